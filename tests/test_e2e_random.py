"""Randomized end to end: hypothesis draws a spec, the pipeline synthesizes, emits, compiles, runs and
compares the kernel with its reference loop (cpp_tests/check.hpp: tolerances, determinism, guard zones,
serial and threaded parallel-for).

Bounded to stay fast: 5 examples, -O1, one compile per example; one search memo per ISA shared by all
examples (as a build's synthesis DB would be); dims 1..24 (1..12 when batched, since batch multiplies the
sub-specs the search visits; with 40, one example's search took up to 20 s and the test 17-80 s: larger shapes
are the cpp_tests matrix's).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import shared_search

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from morello_build.check.testing import check_headers, cxx  # noqa: E402
from morello_build.codegen import emit_header  # noqa: E402
from morello_build.ir.grammar import UserSpec, format_spec  # noqa: E402
from morello_build.ir.spec import DType  # noqa: E402
from morello_build.target import cpu_flags, get_target  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which(cxx().split()[0]) is None, reason="no C++ compiler")


def _runnable_isas() -> list[str]:
    flags = {f.replace("avx512_bf16", "avx512bf16").replace("avx512_vnni", "avx512vnni") for f in cpu_flags()}
    isas = ["scalar"]
    for isa in ("avx2", "avx512", "avx512_bf16"):
        if get_target(isa).features <= flags:
            isas.append(isa)
    if "avx2" in isas and Path("/usr/include/hwy/highway.h").exists():
        isas.append("highway")
    return isas


ISAS = _runnable_isas()
# deep Impl trees (as search.synthesize does); set here, not inside a hypothesis test, which would warn
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))


@st.composite
def user_specs(draw):
    batch = draw(st.sampled_from([1, 1, 1, 2, 3]))
    hi = 24 if batch == 1 else 12
    m, k, n = (draw(st.integers(1, hi)) for _ in range(3))
    dtypes = tuple(draw(st.sampled_from([DType.F32, DType.BF16])) for _ in range(3))
    layouts = tuple(draw(st.sampled_from(["row", "col"])) for _ in range(3))
    return UserSpec(m, k, n, dtypes, layouts, batch, draw(st.booleans()), draw(st.booleans()))


@pytest.mark.slow  # 5 syntheses and compiles
@settings(
    max_examples=5,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(user=user_specs(), isa=st.sampled_from(ISAS))
def test_random_spec_end_to_end(user, isa):
    target = get_target(isa)
    impl = shared_search.search_for(target).best(user.to_spec(target.limits()))
    assert impl is not None, f"no program for {format_spec(user)} on {isa}"
    text = emit_header(user, impl, target, name="rnd", namespace="e2e")
    with tempfile.TemporaryDirectory(prefix="morello-e2e-") as d:
        res = check_headers([(format_spec(user), text, "e2e", "rnd")], Path(d), opt="-O1")
    assert res.ok, f"{format_spec(user)} on {isa}:\n{res.output}"
    assert ("SKIP" in res.output) or ("ok " in res.output)
