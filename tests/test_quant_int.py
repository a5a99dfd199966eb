"""aquant=i8 (ir/aquant.py): A quantized to int8 in the kernel, integer dot products with integer weights.

The numpy definition with known answers (ties to even, an all-zero block), the grammar and its errors,
the search placing the quantizing copy once outside the loop over N, the interpreter, and generated
kernels of every integer format on every ISA this CPU runs against both the exact semantics (tight)
and the f32 product with unquantized A (within the documented bound); one translation unit per ISA,
AVX-512 compile-only where the CPU lacks it (as tests/test_quant.py)."""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import shared_search

from morello_build.check.interpret import execute, interpret
from morello_build.codegen import emit_header
from morello_build.ir import aquant
from morello_build.ir.epilogue import ACTIVATIONS
from morello_build.ir.formats import dequantize
from morello_build.ir.grammar import SpecError, parse_spec
from morello_build.ir.impl import Kernel, Loop, MoveImpl, walk
from morello_build.target import get_target, runnable_isas
from morello_build.tools.api import synthesize_header
from tests.test_quant import (
    HAVE_CXX,
    HAVE_HWY,
    _c_array,
    _compile,
    _random_format,
    case_outputs,
    gated_case_lines,
    gated_tolerance,
    output_rows,
    run_program,
)

# Every integer format, awkward sizes: N = 1 and primes, K = one block or several, M = 1..3, a batch.
SPECS = [
    "matmul 1x64x5 b=q8_0 aquant=i8",
    "matmul 3x32x1 b=q8_0 aquant=i8",
    "matmul 1x96x7 b=q4_0 aquant=i8",
    "matmul 2x32x2 b=q4_0 aquant=i8",
    "matmul 1x64x3 b=i8:col group=32 scales=f32 aquant=i8",
    "matmul 3x64x5 b=i8:col group=channel scales=bf16 zero aquant=i8",
    "matmul 1x128x2 b=i8:col group=64 scales=f16 aquant=i8",
    "matmul 1x96x5 b=i4:col group=32 scales=f16 aquant=i8",
    "matmul 2x96x3 b=i4:col group=channel scales=bf16 zero aquant=i8",
    "matmul 2x64x3 b=q8_0 aquant=i8 batch=2",
    "matmul 2x128x4 b=i4:col group=64 scales=f32 aquant=i8",
    "matmul 3x96x5 b=q4_0 aquant=i8",
    "matmul 1x160x13 b=i4:col group=32 scales=f16 zero aquant=i8",  # dot_int4 with zero points: 8 + 5 columns
    "matmul 1x192x9 b=i4:col group=64 scales=f16 zero aquant=i8",  # groups of 64, an odd pair count
    # zero points on VNNI (dot_int4_vnni): an odd block count in groups of 32 at N = 1, groups of 128 at a prime
    # N (madd_epi16 by z: 1 and 2 rows); 3 and 4 rows (16 - z added to the nibbles): groups of 64 (an odd pair
    # count), channel (K = 96: a pair in one group, then the odd block), groups of 32 (7 blocks)
    "matmul 1x224x1 b=i4:col group=32 scales=f32 zero aquant=i8",
    "matmul 2x384x7 b=i4:col group=128 scales=f16 zero aquant=i8",
    "matmul 3x320x2 b=i4:col group=64 scales=bf16 zero aquant=i8",
    "matmul 3x96x2 b=i4:col group=channel scales=f16 zero aquant=i8",
    "matmul 4x224x2 b=i4:col group=32 scales=f32 zero aquant=i8",
]
# dot_int4 with zero points where the search picks dot_int: 4 x 2, 2 x 3 and 1 x 3 tiles (test_dot_int4_tiles).
FORCED = [
    "matmul 4x96x2 b=i4:col group=32 scales=f16 zero aquant=i8",
    "matmul 3x192x3 b=i4:col group=64 scales=f32 zero aquant=i8",
    "matmul 2x160x8 b=i4:col group=32 scales=f16 zero aquant=i8",  # 2 rows x 4 columns: A's rows split
]
# The gated pair with A quantized once for both sums: a GEMV with biases (accumulators in registers), small
# batches with zero points and an odd row count (accumulators in L1, where dot_int_cols16 adds 16 columns at
# a time into each, then the rest of N: 5 and 3 columns).
GATED = [
    "gated 1x96x5 b=q8_0 aquant=i8 bias",
    "gated 4x128x37 b=i4:col group=32 scales=f16 zero aquant=i8 act=silu",
    "gated 3x64x35 b=q4_0 aquant=i8 bias act=relu",
]


# -- the definition ---------------------------------------------------------------------------------------
def test_quantize_known_answer():
    x = np.zeros(64, np.float32)
    x[:6] = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5]  # max 127: qa = round_half_even(x), ties to even
    x[6] = -127.0
    q, s = aquant.quantize(x)
    assert q[:7].tolist() == [127, 0, 2, 2, 0, -2, -127] and s[0] == np.float32(1.0)
    assert s[1] == 0 and not q[32:].any()  # an all-zero block: scale 0, values 0
    y = np.linspace(-3, 2, 32, dtype=np.float32)
    q, s = aquant.quantize(y)
    assert s[0] == np.float32(3) / np.float32(127) and q[0] == -127 and q.max() == 85


def test_exact_semantics_within_the_bound():
    rng = np.random.default_rng(0)
    for text in SPECS[:9]:
        u = parse_spec(text)
        fmt = u.dtypes[1]
        a, arrays, exact, want, _ = _case(u, rng)
        bound = aquant.error_bound(a[0], fmt, arrays["b"], arrays.get("b_scales"), arrays.get("b_zeros"))
        assert np.all(np.abs(exact - want[0]) <= bound * (1 + 1e-6) + 1e-9), text


# -- grammar ----------------------------------------------------------------------------------------------
def test_grammar_round_trip_and_keys():
    for text in SPECS + GATED:
        u = parse_spec(text)
        assert parse_spec(str(u)) == u and "aquant=i8" in str(u)
        assert u.to_spec().op.a.dtype.value == "f32.qi8"
    plain = parse_spec("matmul 1x64x3 b=q8_0")
    assert str(plain) == "matmul 1x64x3 b=q8_0:col" and plain.dtypes[0].value == "f32"  # unchanged


@pytest.mark.parametrize(
    "text, words",
    [
        ("matmul 1x64x3 aquant=i8", "B must hold integers"),
        ("matmul 1x64x3 b=f16:col aquant=i8", "not f16"),
        ("matmul 1x64x3 a=bf16 b=q8_0 aquant=i8", "A must be f32"),
        ("matmul 1x64x3 a=f32:col b=q8_0 aquant=i8", "row-major"),
        ("matmul 1x64x3 b=i8 group=16 aquant=i8", "group of 16 values is not a multiple"),
        ("matmul 1x48x3 b=i8 group=channel aquant=i8", "K = 48 is not a multiple"),
        ("matmul 1x64x3 b=q8_0 aquant=i4", "aquant=i8"),
        ("gated 1x64x3 b=bf16:col aquant=i8", "B must hold integers"),
    ],
)
def test_grammar_errors_name_the_token(text, words):
    with pytest.raises(SpecError) as e:
        parse_spec(text)
    msg = str(e.value)
    assert words in msg and "\n" not in msg and "aquant=" in msg.split(":")[0], msg


# -- the search: one quantizing copy per call (per parallel task), outside the loop over N ----------------
def test_quantizing_copy_outside_the_loop_over_n():
    target = get_target("avx2", threads=2)
    u = parse_spec("matmul 1x2048x512 b=q4_0 aquant=i8")
    impl = shared_search.program(u, target)
    moves = [n for n in walk(impl) if isinstance(n, MoveImpl) and n.buffer.dtype == aquant.Q8A]
    assert len(moves) == 1 and moves[0].load.name == "quantize_a"
    above = [n for n in walk(impl) if isinstance(n, Loop) and any(x is moves[0] for x in walk(n))]
    assert not any(3 in n.dims and not n.parallel for n in above)  # once per task: no serial loop over N
    kernels = {n.name for n in walk(impl) if isinstance(n, Kernel)}
    assert kernels & {"dot_int", "dot_int4"} and "dot_quant" not in kernels


# -- random data ------------------------------------------------------------------------------------------
def _case(u, rng):
    """A (batch, M, K) with an all-zero block and exact ties, B's arrays, the exact semantics and the f32
    product with unquantized A, (batch, M, N) each."""
    fmt = u.dtypes[1]
    a = rng.uniform(-1, 1, (u.batch, u.m, u.k)).astype(np.float32)
    a[0, 0, :32] = 0.0
    if u.k >= 64:
        a[0, -1, 32:40] = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]
        a[0, -1, 40:64] = rng.integers(-127, 128, 24)
    arrays = _random_format(fmt, u.batch * u.n, u.k, rng)
    exact, want, terms = [], [], []
    w = dequantize(fmt, arrays["b"], u.k, arrays.get("b_scales"), arrays.get("b_zeros"))
    cols = u.n * u.k // fmt.unit * fmt.unit_size  # B's array per batch
    groups = u.n * u.k // fmt.group
    for i in range(u.batch):
        part = {
            name: arrays[name][i * (cols if name == "b" else groups) :][: cols if name == "b" else groups]
            for name in arrays
        }
        exact.append(aquant.matmul(a[i], fmt, part["b"], part.get("b_scales"), part.get("b_zeros")))
        terms.append(_terms(a[i], fmt, part))
        want.append(a[i].astype(np.float64) @ w[i * u.n : (i + 1) * u.n].T.astype(np.float64))
    return a, arrays, np.array(exact), np.array(want), np.array(terms)


def _terms(a, fmt, arrays):
    """sum over blocks of |sa * sb| * sum_j |qa * (qb - z)| (M, N): what bounds the float rounding."""
    qa, sa = aquant.quantize(a)
    qb, sb = aquant.integer_weights(fmt, arrays["b"], a.shape[-1], arrays.get("b_scales"), arrays.get("b_zeros"))
    m, n, nb = a.shape[0], qb.shape[0], a.shape[-1] // aquant.BLOCK
    isum = np.einsum("mbj,nbj->mnb", np.abs(qa).reshape(m, nb, -1).astype(np.int64), np.abs(qb).reshape(n, nb, -1))
    return np.einsum("mnb,mb,nb->mn", isum.astype(np.float64), sa.astype(np.float64), np.abs(sb).astype(np.float64))


def _tight(a, exact, terms):
    """Float rounding only: the f32 sums over blocks, within 2^-16 of the sum of the terms' magnitudes."""
    return 2.0**-16 * terms + 1e-6


def _gated_case(u, rng):
    """A (1, M, K), B1's and B2's arrays (keys b1..., b2...), the biases, the exact semantics of
    act(A·B1 + bias1) * (A·B2 + bias2) with A quantized once, and its tolerance: each sum's float rounding
    (_tight) through the activation's slope and the other factor, plus the activation's few ulps."""
    a = rng.uniform(-1, 1, (1, u.m, u.k)).astype(np.float32)
    a[0, 0, :32] = 0.0
    fmt, arrays, sums, tols = u.dtypes[1], {}, [], []
    for name in ("b1", "b2"):
        x = _random_format(fmt, u.n, u.k, rng)
        arrays |= {name + key[1:]: v for key, v in x.items()}
        sums.append(aquant.matmul(a[0], fmt, x["b"], x.get("b_scales"), x.get("b_zeros")))
        tols.append(_tight(a, sums[-1], _terms(a[0], fmt, x)))
    biases = {t: rng.uniform(-1, 1, u.n).astype(np.float32) for t in u.epilogue.tensors}
    act = ACTIVATIONS[u.epilogue.act]
    gate, up = act.numpy(sums[0] + biases.get("bias1", 0.0)), sums[1] + biases.get("bias2", 0.0)
    exact = gate * up
    tol = gated_tolerance(act, tols, gate, up, exact) + 1e-6
    return a, arrays, biases, exact[None], tol[None]


# -- the interpreter --------------------------------------------------------------------------------------
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_interpreter_matches_the_exact_semantics(isa):
    target = get_target(isa, threads=2)
    rng = np.random.default_rng(3)
    for text in SPECS[::2]:
        u = parse_spec(text)
        fmt = u.dtypes[1]
        impl = shared_search.program(u, target)
        a, arrays, exact, _, terms = _case(u, rng)
        w = dequantize(fmt, arrays["b"], u.k, arrays.get("b_scales"), arrays.get("b_zeros"))
        b = w.reshape(u.batch, u.n, u.k).transpose(0, 2, 1).astype(np.float32)
        c = np.zeros((u.batch, u.m, u.n), np.float32)
        execute(impl, [a, b, c])
        assert np.all(np.abs(c - exact) <= _tight(a, exact, terms)), (text, isa)


@pytest.mark.parametrize("text", GATED[1:])
def test_interpreter_runs_gated_pairs_exactly(text):
    """The gated pair's avx512 programs (compiled for avx512_bf16 only): one quantizing copy of A for both sums."""
    u, target = parse_spec(text), get_target("avx512", threads=2)
    impl = shared_search.program(u, target)
    assert sum(isinstance(n, MoveImpl) and n.buffer.dtype == aquant.Q8A for n in walk(impl)) == 1
    a, arrays, biases, exact, tol = _gated_case(u, np.random.default_rng(4))
    fmt = u.dtypes[1]
    bs = []
    for n in ("b1", "b2"):
        x = {"b" + key[2:]: v for key, v in arrays.items() if key.startswith(n)}
        bs.append(dequantize(fmt, x["b"], u.k, x.get("b_scales"), x.get("b_zeros")).reshape(u.n, u.k).T)
    got = interpret(impl, a, *bs, extras=biases)
    assert np.all(np.abs(got - exact) <= tol), text


# -- generated kernels against numpy ----------------------------------------------------------------------
@cache
def _headers(isa: str):
    target = get_target(isa, threads=2)
    out = []
    for i, text in enumerate(SPECS + GATED):
        user = parse_spec(text)
        impl = shared_search.program(user, target)
        out.append(emit_header(user, impl, target, name=f"k{i}", namespace=f"qi{i}"))
    return tuple(out)


def test_small_batch_gated_pairs_accumulate_in_l1():
    """aquant's gated pair of a small batch: both sums in L1 tiles, each filled by dot_int_cols16, then gated.
    Measured (Zen 4, 1 thread, weights from DRAM): gated 4x2560x10240 b=q4_0 8.2 -> 2.8 ms (accumulators in
    registers, a dot kernel per column, before); two aquant matmuls 2.6. The last group of a tile prefetches
    the other B's next columns (lower.kernel_streams: each tile's first columns no longer start cold)."""
    for h in _headers("avx512_bf16")[len(SPECS) + 1 :]:
        assert "// dot_int_cols16:" in h and re.search(r"pair_accum c1, c2 -> f32\[1x\dx3\d\]\{row\}@L1", h), h
        assert re.search(r"const std::ptrdiff_t jump\d+ = .* \? std::ptrdiff_t\(.*\(b2 \+", h), h
        assert re.search(r"prefetch_l2_here\([^;]*\+ gj\d+ \+", h), h


def _program(isa: str, tmp: Path, specs=SPECS, headers=None):
    lines, cases = ["#include <cstdio>"], []
    for i, header in enumerate(headers or _headers(isa)):
        (tmp / f"k{i}.hpp").write_text(header)
        lines.append(f'#include "k{i}.hpp"')
    lines.append("int main() {")
    rng = np.random.default_rng(7)
    for i, text in enumerate(specs):
        u = parse_spec(text)
        if u.kind == "gated":
            cases.append(_gated_case(u, rng))
            a, arrays, biases, exact, _ = cases[-1]
            lines += gated_case_lines(i, "qi", a, arrays, biases, exact.size)
            continue
        fmt = u.dtypes[1]
        case = _case(u, rng)
        a, arrays, exact = case[:3]
        cases.append(case)
        lines += ["  {", "  " + _c_array("float", "a", a), "  " + _c_array(fmt.ctype, "b", arrays["b"])]
        extra = []
        for suffix, ctype in fmt.extra_arrays():
            lines.append("  " + _c_array(ctype, f"b_{suffix}", arrays[f"b_{suffix}"]))
            extra.append(f"b_{suffix}")
        args, rargs = ", ".join(["a", "b", "c", *extra]), ", ".join(["a", "b", "r", *extra])
        lines.append(f"  static float c[{exact.size}], r[{exact.size}];")
        lines.append(f"  qi{i}::k{i}({args});")
        lines.append(f"  qi{i}::k{i}_reference({rargs});")
        lines.append(f'  for (int j = 0; j < {exact.size}; ++j) std::printf("{i} %.9g %.9g\\n", c[j], r[j]);')
        lines.append("  }")
    lines += ["  return 0;", "}"]
    src = tmp / "main.cpp"
    src.write_text("\n".join(lines) + "\n")
    return src, cases


# avx512_bf16: its CPUs have VNNI (dot_int_vnni; compiled only here, without them). avx512 runs dot_int, the
# code avx2 and highway run (its programs are checked by the interpreter above): not compiled again here.
ISAS = ["scalar", "avx2", "avx512_bf16"] + (["highway"] if HAVE_HWY else [])


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
@pytest.mark.parametrize("isa", ISAS)
def test_kernels_match_the_exact_semantics(isa, tmp_path):
    _check_program(isa, tmp_path, SPECS + GATED)


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_ymm_vnni_kernels_match_the_exact_semantics(tmp_path, monkeypatch, request):
    """dot_int_vnni and dot_int4_vnni on avx512_bf16 (VNNI), with their zmm rivals (which the search prefers
    there) out of the catalog: every spec against numpy (M = 1..4, odd block and pair counts, N = 1 and primes,
    groups of 32, 64, 128 and channel), dot_int4_vnni by both of its ways with zero points (madd_epi16 by z;
    16 - z added to the nibbles: from 3 rows on)."""
    shared_search.without_kernels(("dot_int4_vnni512", "dot_int_vnni512"), monkeypatch, request)
    target, headers = get_target("avx512_bf16", threads=2), []
    search = shared_search.new_search(target)  # this catalog's: one memo for the specs below
    for i, text in enumerate(SPECS):
        user = parse_spec(text)
        impl = search.best(user.to_spec(target.limits()))
        header = emit_header(user, impl, target, name=f"k{i}", namespace=f"qi{i}")
        want = "dot_int4_vnni" if user.dtypes[1].name in ("q4_0", "i4") else "dot_int_vnni"
        assert f"// {want}:" in header and "vnni512" not in header, text
        headers.append(header)
    assert sum("_mm256_add_epi8(" in h for h in headers) == 3
    _assert_i4_both_ways(headers)
    _check_program("avx512_bf16", tmp_path, SPECS, headers)


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_avxvnni_kernels_match_the_exact_semantics(tmp_path, monkeypatch, request):
    """avx2_vnni (AVX-VNNI without AVX-512): dot_int_avxvnni and dot_int4_avxvnni (no other dot kernel), with
    dot_int_cols8 and its AVX-VNNI form (which the search prefers for some small batches; test_quant_int_cols8
    checks both) out of the catalog, on every spec and gated pair against numpy, i4 both ways. The VEX intrinsic
    only: the same code as dot_int_vnni's, whose EVEX instruction does the same. Run natively on an AVX-VNNI CPU,
    else with the instruction emulated."""
    shared_search.without_kernels(("dot_int_cols8", "dot_int_cols8_avxvnni"), monkeypatch, request)
    target, headers = get_target("avx2_vnni", threads=2), []
    search = shared_search.new_search(target)
    for i, text in enumerate(SPECS + GATED):
        user = parse_spec(text)
        impl = search.best(user.to_spec(target.limits()))
        header = emit_header(user, impl, target, name=f"k{i}", namespace=f"qi{i}")
        kernels = set(re.findall(r"// (dot_\w+):", header))
        assert kernels and kernels <= {"dot_int_avxvnni", "dot_int4_avxvnni"}, (text, kernels)
        assert "_mm256_dpbusd_avx_epi32(" in header and "_mm256_dpbusd_epi32(" not in header, text
        headers.append(header)
    assert all(any(f"// {k}:" in h for h in headers) for k in ("dot_int_avxvnni", "dot_int4_avxvnni"))
    _assert_i4_both_ways(headers)
    _check_program("avx2_vnni", tmp_path, SPECS + GATED, headers, run=_run_emulating_avxvnni)


def test_search_uses_avxvnni_only_for_aquant():
    """avx2_vnni's search is avx2's but for aquant=i8 (tools.api.search_isa), so its dispatch level and its
    programs add nothing elsewhere; for the decode GEMVs it picks the VNNI dot kernels."""
    from morello_build.tools.api import search_isa

    extra = {k.name for k in get_target("avx2_vnni").kernels()} - {k.name for k in get_target("avx2").kernels()}
    assert extra == {"dot_int_avxvnni", "dot_int4_avxvnni", "dot_int_cols8_avxvnni"}
    assert search_isa(parse_spec("matmul 1x2048x256 b=bf16:col"), "avx2_vnni") == "avx2"
    assert search_isa(parse_spec("matmul 1x2048x256 b=q4_0:col"), "avx2_vnni") == "avx2"
    target = get_target("avx2_vnni", threads=2)
    for text, want in (
        ("matmul 1x2048x2560 b=q4_0:col aquant=i8", "dot_int4_avxvnni"),
        ("matmul 1x2048x2560 b=q8_0:col aquant=i8", "dot_int_avxvnni"),
    ):
        u = parse_spec(text)
        assert search_isa(u, "avx2_vnni") == "avx2_vnni"
        impl = shared_search.program(u, target)
        assert {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")} == {want}, text


@pytest.mark.parametrize("vnni, plain", [("avx2_vnni", "avx2"), ("avx512_vnni", "avx512")])
def test_vnni_headers_without_aquant_are_the_plain_levels_headers(vnni, plain, monkeypatch):
    """A header avx2_vnni (avx512_vnni) asks for, or native on such a CPU, is avx2's (avx512's) byte for byte where
    its program is (no aquant=i8): no VNNI target attribute (GCC 10 has no avxvnni) and no VNNI check at run time
    (it runs on every AVX2 (AVX-512) CPU). With aquant=i8 it keeps both."""
    import morello_build.target as target_mod
    from morello_build.tools.api import header_isa, synthesize_header

    monkeypatch.setattr(target_mod, "native_isa", lambda: vnni)
    kw = {"threads": 1, "db": os.environ["MORELLO_DB"]}  # the run's DB (conftest.py): one search per program
    f32 = "matmul 3x16x40 b=bf16:col"
    header = synthesize_header(f32, isa=plain, **kw)
    assert synthesize_header(f32, isa=vnni, **kw) == header
    assert synthesize_header(f32, isa="native", **kw) == header
    assert "vnni" not in header
    aquant = "matmul 1x64x64 b=q8_0:col aquant=i8"
    assert header_isa(parse_spec(aquant), "native") == vnni
    attr = ",".join(get_target(vnni).cpu_features)
    assert attr.endswith("vnni") and f'target("{attr}")' in synthesize_header(aquant, isa="native", **kw)


def test_avx512_bf16_headers_are_the_levels_whose_program_they_repeat(monkeypatch):
    """A header avx512_bf16 asks for, or native on a Sapphire Rapids or Zen 4, is avx512's byte for byte unless A and
    B are both bf16 (vdpbf16ps) or A is quantized in the kernel (avx512_vnni's: the VNNI dot kernels): it then runs
    on every AVX-512 CPU (Skylake-X included), as its program would."""
    import morello_build.target as target_mod
    from morello_build.tools.api import header_isa, synthesize_header

    monkeypatch.setattr(target_mod, "native_isa", lambda: "avx512_bf16")
    kw = {"threads": 1, "db": os.environ["MORELLO_DB"]}
    f32 = "matmul 3x16x40 b=bf16:col"
    header = synthesize_header(f32, isa="avx512", **kw)
    assert synthesize_header(f32, isa="avx512_bf16", **kw) == synthesize_header(f32, isa="native", **kw) == header
    assert f'target("{",".join(get_target("avx512_bf16").cpu_features)}")' not in header
    cases = {"matmul 1x64x64 b=q8_0:col aquant=i8": "avx512_vnni", "matmul 2x32x8 a=bf16 b=bf16:col": "avx512_bf16"}
    for spec, isa in cases.items():
        assert header_isa(parse_spec(spec), "native") == isa, spec
        attr = ",".join(get_target(isa).cpu_features)
        assert f'target("{attr}")' in synthesize_header(spec, isa="native", **kw), spec


def test_avx512_vnni_is_avx512_with_the_vnni_kernels():
    """avx512_vnni (AVX-512 VNNI without BF16: Cascade Lake, Ice Lake, Tiger Lake) has avx512's kernels and the VNNI
    dot kernels, ymm (EVEX vpdpbusd) and zmm; avx512_bf16 adds the bf16 x bf16 ones alone. So avx512_bf16's aquant=i8
    programs are avx512_vnni's (search_isa: a dispatch header searches them once), and the decode GEMVs pick the
    VNNI kernels there."""
    from morello_build.tools.api import search_isa

    avx512, vnni, bf16 = ({k.name for k in get_target(i).kernels()} for i in ("avx512", "avx512_vnni", "avx512_bf16"))
    assert vnni - avx512 == {"dot_int_vnni", "dot_int4_vnni", "dot_int_vnni512", "dot_int4_vnni512", "dot_int_cols16"}
    assert bf16 - vnni == {"dot_bf16_dp", "dot_bf16_dp_pair"}
    assert search_isa(parse_spec("matmul 1x2048x256 b=q4_0:col"), "avx512_vnni") == "avx512"
    assert search_isa(parse_spec("matmul 1x2048x256 a=bf16 b=bf16:col"), "avx512_bf16") == "avx512_bf16"
    target = get_target("avx512_vnni", threads=2)
    for text in ("matmul 1x2048x2560 b=q4_0:col aquant=i8", "matmul 1x2048x2560 b=q8_0:col aquant=i8"):
        u = parse_spec(text)
        assert search_isa(u, "avx512_vnni") == search_isa(u, "avx512_bf16") == "avx512_vnni"
        impl = shared_search.program(u, target)
        dots = {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")}
        assert dots and dots <= vnni - avx512, (text, dots)
        header = emit_header(u, impl, target)
        assert "_dpbusd_epi32(" in header and f'target("{",".join(target.cpu_features)}")' in header, text


CPU_LEVELS = [((), "avx512"), (("avx512_vnni",), "avx512_vnni"), (("avx512_vnni", "avx512_bf16"), "avx512_bf16")]


@pytest.mark.parametrize("extra, native", CPU_LEVELS)
def test_native_takes_the_avx512_level_the_cpu_has(extra, native, monkeypatch, request):
    """/proc/cpuinfo's flags of Skylake-X, Cascade Lake / Ice Lake (VNNI, no BF16) and Sapphire Rapids / Zen 4."""
    import morello_build.target as target_mod

    flags = "sse4_2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl".split() + list(extra)
    monkeypatch.setattr(target_mod, "cpu_flags", lambda: frozenset(flags))
    for cached in (target_mod.runnable_isas, target_mod.native_isa):
        cached.cache_clear()
        request.addfinalizer(cached.cache_clear)
    assert target_mod.native_isa() == native


def _assert_i4_both_ways(headers) -> None:
    """i4's pairs of blocks both ways: nibbles interleaved into value order (more rows than half the columns),
    and A's rows split into evens and odds."""
    i4 = [h for h in headers if "i4.g" in h]
    assert any("_mm256_unpacklo_epi8(" in h for h in i4) and any("_mm256_unpacklo_epi64(" in h for h in i4)


def test_search_picks_vnni512_for_zero_points():
    """The decode GEMV with i4 zero points on a VNNI target: dot_int4_vnni512, four blocks a step on zmm (per
    output and step two vpdpbusd onto the row's offsets; dot_int4 spends 2 maddubs, add, mullo, sub and madd
    per two blocks). Measured (warm, 1 thread, Intel Xeon, scripts/kernel_ab.py): 1x2048x16384 968 us,
    dot_int4_vnni 1023 (4x2048x16384 2905 us, dot_int4_vnni 3363; there dot_int_cols16 is faster still:
    test_quant_int_zmm's picks)."""
    target = get_target("avx512_bf16", threads=2)
    u = parse_spec("matmul 1x2048x16384 b=i4:col group=32 scales=f16 zero aquant=i8")
    impl = shared_search.program(u, target)
    assert {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")} == {"dot_int4_vnni512"}


# Tests only: AVX-VNNI's vpdpbusd (VEX) by its definition (Intel SDM, VPDPBUSD: each int32 lane plus the 4
# products of its u8 bytes of the second operand by the s8 bytes of the third, wrapping), so that the avx2_vnni
# programs run on a CPU without AVX-VNNI: everything but the instruction itself, whose operation is AVX512-VNNI's
# ymm form (dot_int_vnni, run on VNNI hosts). Included before the headers: immintrin.h's guard keeps the macro.
_EMULATED_DPBUSD = """#include <immintrin.h>
#include <cstdint>
#include <cstring>
__attribute__((target("avx2"))) static inline __m256i test_dpbusd(__m256i acc, __m256i u, __m256i s) {
  std::uint32_t r[8];
  std::uint8_t a[32];
  std::int8_t b[32];
  std::memcpy(r, &acc, 32);
  std::memcpy(a, &u, 32);
  std::memcpy(b, &s, 32);
  for (int l = 0; l < 8; ++l)
    for (int i = 0; i < 4; ++i) r[l] += static_cast<std::uint32_t>(a[4 * l + i] * b[4 * l + i]);
  __m256i out;
  std::memcpy(&out, r, 32);
  return out;
}
#define _mm256_dpbusd_avx_epi32 test_dpbusd
"""


def _run_emulating_avxvnni(src: Path, isa: str) -> list:
    """run_program's rows, on a CPU without AVX-VNNI with _EMULATED_DPBUSD included first."""
    if isa in runnable_isas():
        return run_program(src, isa)
    emulation = src.with_name("emulated_dpbusd.hpp")
    emulation.write_text(_EMULATED_DPBUSD)
    return output_rows(_compile(src, extra=("-include", str(emulation))))


def _check_program(isa: str, tmp: Path, specs, headers=None, run=run_program) -> None:
    src, cases = _program(isa, tmp, specs, headers)
    rows = run(src, isa)
    for i, case in enumerate(cases):
        if parse_spec(specs[i]).kind == "gated":
            exact, tol = case[3:]
            kern, ref = case_outputs(rows, i, exact.shape)
            assert np.all(np.abs(ref - exact) <= tol), (specs[i], "reference", ref, exact)
            assert np.all(np.abs(kern - exact) <= tol), (specs[i], isa, kern, exact)
            continue
        a, arrays, exact, want, terms = case
        kern, ref = case_outputs(rows, i, exact.shape)
        tol = _tight(a, exact, terms)
        assert np.all(np.abs(ref - exact) <= tol), (specs[i], "reference", ref, exact)
        assert np.all(np.abs(kern - exact) <= tol), (specs[i], isa, kern, exact)
        u, fmt = parse_spec(specs[i]), parse_spec(specs[i]).dtypes[1]
        if u.batch == 1:  # against unquantized A: within the documented bound
            bound = aquant.error_bound(a[0], fmt, arrays["b"], arrays.get("b_scales"), arrays.get("b_zeros"))
            assert np.all(np.abs(kern[0] - want[0]) <= bound + tol[0]), (specs[i], isa)


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_dot_int4_tiles_with_zero_points(tmp_path, monkeypatch, request):
    """dot_int4's zero points on tiles of 2 to 4 rows: the search, without dot_int (and dot_int_cols8), picks them
    (avx2 only: highway's functions run the same AVX2 text, and SPECS' zero-point specs run there)."""
    isa = "avx2"
    shared_search.without_kernels(("dot_int", "dot_int_scalar", "dot_int_cols8"), monkeypatch, request)
    target, headers = get_target(isa, threads=2), []
    search = shared_search.new_search(target)  # this catalog's: one memo for the specs below
    for i, text in enumerate(FORCED):
        user = parse_spec(text)
        impl = search.best(user.to_spec(target.limits()))
        shapes = {n.spec.op.iter_shape[1] for n in walk(impl) if isinstance(n, Kernel) and n.name == "dot_int4"}
        assert max(shapes) >= 2, (text, shapes)
        headers.append(emit_header(user, impl, target, name=f"k{i}", namespace=f"qi{i}"))
    _assert_i4_both_ways(headers)
    _check_program(isa, tmp_path, FORCED, headers)


# -- the Python API (run by test_quant's) and the cost model -----------------------------------------------------
def check_pyapi_aquant(f, text: str) -> None:
    """The Python API runs an aquant spec (called from test_quant's Python API test: one extension for both)."""
    u = parse_spec(text)
    a, arrays, exact, _, terms = _case(u, np.random.default_rng(5))
    got = f(
        a[0],
        arrays["b"].reshape(u.n, -1),
        b_scales=arrays["b_scales"].reshape(u.n, -1).view(np.float16),
        b_zeros=arrays["b_zeros"].reshape(u.n, -1),
    )
    assert np.all(np.abs(got - exact[0]) <= _tight(a, exact, terms)[0])


def check_pyapi_gated_aquant(f, text: str) -> None:
    """The Python API runs a gated aquant spec: B1's and B2's arrays per column, the biases by keyword."""
    u = parse_spec(text)
    a, arrays, biases, exact, tol = _gated_case(u, np.random.default_rng(6))
    cols = {n: x.reshape(u.n, -1) for n, x in arrays.items()}
    terms = {n: x.view(np.float16) if n.endswith("_scales") else x for n, x in cols.items() if n not in ("b1", "b2")}
    for run in (f, f.reference):
        got = run(a[0], cols["b1"], cols["b2"], **terms, **biases)
        assert np.all(np.abs(got - exact[0]) <= tol[0]), run


def test_cost_counts_bytes_and_instructions():
    from dataclasses import replace

    from morello_build.ir.levels import Level
    from morello_build.target.kernels.quant_int import DOT_INT

    target = get_target("avx2", threads=1)

    def feats(b):
        op = parse_spec(f"matmul 1x4096x1 {b} aquant=i8 accum").to_spec(target.limits()).op
        op = op.with_operands((replace(op.a, dtype=aquant.Q8A, level=Level.L1), op.b, replace(op.c, level=Level.RF)))
        assert DOT_INT.applies(op, target)
        return dict(DOT_INT.cost(op, target))

    q8, q4 = feats("b=q8_0"), feats("b=q4_0")
    assert q8["gl_line"] == 4096 * 34 // 32 // 64 and q4["gl_line"] == 4096 * 18 // 32 // 64  # A is in L1
    assert q8["vec_fma"] == q4["vec_fma"] == 4096 // 32 and q4["vec_op"] > q8["vec_op"]  # nibbles cost more


def test_dot_int_prefetches_its_weights_into_l2():
    from dataclasses import replace

    from morello_build.ir.levels import Level
    from morello_build.target.kernels.quant_int import DOT_INT

    target = get_target("avx2", threads=1)

    def feats(b):
        o = parse_spec(f"matmul 1x4096x4 {b} aquant=i8 accum").to_spec(target.limits()).op
        o = o.with_operands((replace(o.a, dtype=aquant.Q8A, level=Level.L1), o.b, replace(o.c, level=Level.RF)))
        return dict(DOT_INT.cost(o, target))

    for b in ("b=q8_0", "b=i8:col group=32 scales=f16", "b=q4_0", "b=i4:col group=32 scales=f16 zero"):
        f = feats(b)
        assert "gl_interleaved" not in f and f["vec_load"] > 4096 // 32 * 5, b  # one stream; the prefetches
    header = synthesize_header("matmul 4x256x8 b=i4:col group=32 scales=f16 zero aquant=i8", isa="avx2", threads=1)
    body = header.split("// dot_int")[1]
    assert "prefetch_l2_here(" in body and "::prefetch(" not in body  # into L2: see quant_int_prefetch.prefetch_slots


@pytest.mark.parametrize("spec", ["matmul 1x256x16 b=q4_0:col aquant=i8", "matmul 1x256x8 b=q8_0:col aquant=i8"])
def test_dot_int_deals_its_prefetches_between_columns(spec):
    """A step's prefetches (several lines per pair of blocks here) come one by one between the columns' products,
    not in a burst (quant_int_prefetch.prefetch_slots: 0.79 -> 1.00 of a read sweep from DRAM on a Golden Cove Xeon)."""
    lines = synthesize_header(spec, isa="avx2", threads=1).split("// dot_int")[1].splitlines()
    at = [i for i, line in enumerate(lines) if "prefetch_l2_here(" in line]
    assert len(at) >= 3 and all(b - a > 1 for a, b in zip(at, at[1:])), at


def test_dot_int_prefetches_separate_scales_and_zero_points():
    """Formats that keep scales and zero points apart: each array is a stream the kernel prefetches."""
    header = synthesize_header("matmul 1x256x8 b=i4:col group=32 scales=f16 zero aquant=i8", isa="avx2", threads=1)
    body = header.split("// dot_int")[1]
    for array in ("bp", "sp", "zp"):  # values, scales, zero points (quant_int._pointers' names)
        assert f"prefetch_l2_here({array}" in body, array


def test_dot_int4_reads_one_stream_with_fewer_instructions():
    from dataclasses import replace

    from morello_build.ir.levels import Level
    from morello_build.target.kernels.quant_int import DOT_INT
    from morello_build.target.kernels.quant_int4 import DOT_INT4

    target = get_target("avx2", threads=1)

    def op(b):
        o = parse_spec(f"matmul 1x4096x4 {b} aquant=i8 accum").to_spec(target.limits()).op
        return o.with_operands((replace(o.a, dtype=aquant.Q8A, level=Level.L1), o.b, replace(o.c, level=Level.RF)))

    for b in ("b=q4_0", "b=i4:col group=32 scales=f16"):
        new, old = dict(DOT_INT4.cost(op(b), target)), dict(DOT_INT.cost(op(b), target))
        assert "gl_interleaved" not in new and "gl_interleaved" not in old  # the prefetches make one stream
        assert new["gl_line"] == old["gl_line"] and new["vec_op"] < old["vec_op"], b
    zero, plain = (dict(DOT_INT4.cost(op(f"b=i4:col group=32 scales=f16{z}"), target)) for z in (" zero", ""))
    assert zero["vec_op"] > plain["vec_op"] and zero["scalar_op"] > plain["scalar_op"]  # z to lanes, the mullo
    assert zero["gl_line"] > plain["gl_line"]  # the zero points' bytes
    assert not DOT_INT4.applies(op("b=q8_0"), target)
