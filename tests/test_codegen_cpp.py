"""cpp_tests/ under pytest: configure, build and run the ctest project that checks generated kernels.

The project synthesizes a matrix of specs (f32/bf16, row/col, size 1, primes, non-multiples of the vector
width, batch, accum, the flagship GEMV) for every ISA this CPU runs (of scalar, avx2, highway, avx512,
avx512_bf16: the others are compiled by test_codegen and the other compile tests), compiles each header
with -Wall -Wextra -Werror and compares every kernel with its reference loop (tolerances:
cpp_tests/check.hpp); a subset runs under AddressSanitizer + UndefinedBehaviorSanitizer, and the parallel
programs under ThreadSanitizer.

With clang++ installed, the main matrix of the scalar ISA and of this CPU's best is compiled and run again with
it, from the same generated kernels.

The build directory is $MORELLO_CPP_TESTS_BUILD, else build/cpp_tests-pytest in the checkout (kept between
runs: a rerun only regenerates and recompiles what changed); clang++'s is the same path with "-clang" added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(
        shutil.which("cmake") is None or shutil.which("ctest") is None or shutil.which("c++") is None,
        reason="needs cmake, ctest and a C++ compiler",
    ),
    pytest.mark.slow,
]  # slow: synthesizes and compiles the whole matrix (minutes on 2 cores)


def _run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-20000:]}")
    return r.stdout


# The second compiler compiles the main set only (the optimized build users ship; the sanitizer sets check the
# runtime's behaviour, not the compiler) from the kernels the first build generated: no second synthesis. Of
# its ISAs, the portable one and this CPU's best: the others' kernels come from the same emitters over other ISA
# helpers, which test_runtime's probe compiles with clang++ for every ISA (their matrix builds were ~20 CPU-s).
CLANG_SETS = "main"


def _clang_isas() -> str:
    from morello_build.target import native_isa
    from morello_build.tools.api import VNNI_PLAIN

    native = native_isa()  # the matrix has no VNNI level: its specs' headers are the plain level's (VNNI_PLAIN)
    return ";".join(dict.fromkeys(["scalar", VNNI_PLAIN.get(native, native)]))


def _build_and_test(build: Path, *configure_args) -> None:
    gen = ["-G", "Ninja"] if shutil.which("ninja") and not (build / "Makefile").exists() else []
    _run(["cmake", "-S", ROOT / "cpp_tests", "-B", build, *gen, f"-DMORELLO_PYTHON={sys.executable}", *configure_args])
    _run(["cmake", "--build", build, "-j2"])
    out = _run(["ctest", "--test-dir", build, "--output-on-failure", "-j2"])
    assert "100% tests passed" in out, out


def test_ctest_generated_kernels_match_references():
    """The matrix with the default compiler, then (one test, so the second build finds the generated kernels)
    with clang++ when installed: every compiler the README names."""
    build = Path(os.environ.get("MORELLO_CPP_TESTS_BUILD") or ROOT / "build" / "cpp_tests-pytest")
    _build_and_test(build)
    if shutil.which("clang++"):
        _build_and_test(
            build.with_name(build.name + "-clang"),
            "-DCMAKE_CXX_COMPILER=clang++",
            f"-DMORELLO_TEST_GEN_DIR={build / 'gen'}",
            f"-DMORELLO_TEST_SETS={CLANG_SETS}",
            f"-DMORELLO_TEST_ISAS={_clang_isas()}",
        )
