"""Weight formats of B (ir/formats.py): grammar and errors, numpy definitions with known answers (ggml's
Q8_0 and Q4_0 bytes built by hand), the interpreter, and generated kernels of every format on every ISA
this CPU runs against numpy (one translation unit per ISA: the kernels, their reference loops and the
data, compiled once; AVX-512 compile-only where the CPU lacks it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from functools import cache
from pathlib import Path
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
import shared_search

from morello_build.check.interpret import execute, interpret
from morello_build.check.testing import compile_program, cxx
from morello_build.codegen import emit_header
from morello_build.ir.epilogue import ACTIVATIONS
from morello_build.ir.formats import dequantize
from morello_build.ir.grammar import SpecError, parse_spec
from morello_build.ir.impl import Kernel, walk
from morello_build.ir.levels import Level
from morello_build.synth import search
from morello_build.synth.actions import SplitPair, enumerate_actions
from morello_build.synth.search import synthesize
from morello_build.target import get_target, runnable_isas
from morello_build.tools.api import synthesize_program

HAVE_CXX = shutil.which(cxx().split()[0]) is not None
HAVE_HWY = Path("/usr/include/hwy/highway.h").exists()

# Every format, awkward sizes: N = 1 and primes, K = one group, K not a multiple of the vector width, M = 1 to 5.
SPECS = [
    "matmul 1x64x5 b=q8_0",
    "matmul 3x32x1 b=q8_0",
    "matmul 1x96x7 b=q4_0",
    "matmul 4x32x3 b=q4_0",
    "matmul 1x64x3 b=i8:col group=32 scales=f32",
    "matmul 3x40x5 b=i8:col group=channel scales=bf16 zero",
    "matmul 1x128x2 b=i8:col group=64 scales=f16",
    "matmul 1x64x5 b=i4:col group=32 scales=f32",
    "matmul 2x36x3 b=i4:col group=channel scales=bf16 zero",
    "matmul 1x20x3 b=f16:col",
    "matmul 3x37x2 b=f16:col",
    "matmul 1x21x5 b=e4m3:col",
    "matmul 2x29x3 b=sfp:col",
    "matmul 1x45x1 b=sfp:col",  # load_sfp2's 2W chunks, a tail of more than W values (avx2)
    # groups longer than 16 vectors: rolled loops over u chains per column, the rest and a ragged tail unrolled
    "matmul 1x200x3 b=i8:col group=channel scales=f32",
    "matmul 1x202x2 b=i4:col group=channel scales=f16 zero",
    "matmul 1x520x3 b=i8:col group=channel scales=f32",  # rolled on AVX-512 too: the next columns streamed per trip
    "matmul 1x293x2 b=sfp:col",  # load_sfp2's rolled loop, a tail of at most W values
    "matmul 2x136x1 b=f16:col",  # dot_quant_rows' rolled loop
    "matmul 2x64x3 b=q8_0 batch=2",
    "matmul 1x256x5 b=gemma_i8",
    # more than 16 blocks a column: AVX-512's gathers of the blocks' d (widen_block_scales), a masked last one
    "matmul 1x608x3 b=q8_0",
    "matmul 1x544x5 b=q4_0",
    "matmul 1x544x3 b=i8:col group=32 scales=bf16 zero",  # dot_quant's separate scales widened, 16 a step
    "matmul 2x128x1 b=gemma_i8",
    # small batches with several groups (their scales applied per chunk) and zero points: dot_quant_rows
    "matmul 5x64x1 b=i4:col group=32 scales=f16 zero",
    "matmul 4x64x2 b=i8:col group=32 scales=bf16 zero",
]
LUT_KERNEL = "// dot_quant_lut:"
ROWS_KERNEL = "dot_quant_rows"  # the search's choice for every spec above with M > 1 (test_kernels_match_numpy)
# The gated pair with B1 and B2 in a format (issue 22): odd N, M = 1 and 2. PAIR_KERNEL: searched without SplitPair
# on vector targets, so that dot_quant_pair / dot_quant_rows_pair implement them (the search prefers the two sums
# in L1 tiles of 16 columns or more, each filled by the matmul's own kernels: GATED[5]).
GATED = [
    "gated 1x64x5 b=q8_0 bias",
    "gated 2x64x3 b=i4:col group=32 scales=f32 act=silu",
    "gated 1x96x7 b=i4:col group=32 scales=bf16 zero bias",
    # small batches: dot_quant_rows_pair (a column of B1 beside one of B2 per kernel, A loaded once for both;
    # several groups: each B's next columns a share per group; one group: the next columns a share per trip)
    "gated 4x288x5 b=i4:col group=32 scales=f16 zero",
    "gated 3x400x5 b=f16:col act=silu",
    # the search's choice for a small batch of 16 columns or more: both sums in L1 tiles, each matmul's rows kernel
    "gated 4x160x19 b=f16:col",
]
PAIR_KERNEL = (GATED[0], GATED[2], GATED[3], GATED[4])  # the others: the search's accumulators in L1


def _synthesize(text: str, target):
    user = parse_spec(text)
    if text not in PAIR_KERNEL or not target.lanes:
        return shared_search.program(user, target)
    without = lambda s, t: (a for a in enumerate_actions(s, t) if not isinstance(a, SplitPair))  # noqa: E731
    with mock.patch.object(search, "enumerate_actions", without):
        return synthesize(user.to_spec(target.limits()), target)[0]


# -- grammar -------------------------------------------------------------------------------------------
def test_grammar_round_trip_and_keys():
    for text in SPECS:
        u = parse_spec(text)
        assert parse_spec(str(u)) == u
    assert str(parse_spec("matmul 1x64x3 b=q8_0")) == "matmul 1x64x3 b=q8_0:col"
    assert parse_spec("matmul 1x64x3 b=i4 group=64 scales=f16 zero").dtypes[1].value == "i4.g64.f16.z"
    assert str(parse_spec("matmul 1x64x3 b=bf16:col")) == "matmul 1x64x3 b=bf16:col"  # unchanged


@pytest.mark.parametrize(
    "text, words",
    [
        ("matmul 1x48x3 b=q8_0", "not a multiple of the q8_0 group of 32"),
        ("matmul 1x64x3 b=q4_0:row", "write b=q4_0:col"),
        ("matmul 1x64x3 b=i8", "needs group=G"),
        ("matmul 1x64x3 b=i8 group=48", "not a multiple of the i8.g48.f32 group"),
        ("matmul 1x64x3 b=i4 group=32 scales=f64", "unknown scale dtype 'f64'"),
        ("matmul 1x64x3 b=q8_0 zero", "q8_0 has no options"),
        ("matmul 1x64x3 b=f32:col group=32", "go with b=i8 or b=i4"),
        ("matmul 1x65x3 b=i4 group=channel", "not a multiple of 2"),
        ("matmul 1x64x3 b=q5_k", "unknown dtype 'q5_k'"),
    ],
)
def test_grammar_errors_are_one_line(text, words):
    with pytest.raises(SpecError) as e:
        parse_spec(text)
    assert words in str(e.value) and "\n" not in str(e.value) and "FORMAT" in str(e.value)


# -- random data in each format -------------------------------------------------------------------------
def _random_format(fmt, cols: int, k: int, rng) -> dict:
    """B's arrays: 'b' and, where the format has them, 'b_scales' and 'b_zeros'."""
    groups = cols * k // fmt.group
    if fmt.name == "f16":
        return {"b": rng.uniform(-1, 1, cols * k).astype(np.float16).view(np.uint16)}
    if fmt.name == "e4m3":  # every code but the two NaNs: zeros, subnormals and +-448 too
        codes = rng.integers(0, 254, cols * k, dtype=np.uint8)
        return {"b": codes + (codes >= 0x7F)}  # skip 0x7F; 0xFF is out of range
    if fmt.name == "sfp":  # every code is a value (0x80: -0)
        return {"b": rng.integers(0, 256, cols * k, dtype=np.uint8)}
    if fmt.name == "gemma_i8":  # as IntCodec::QuantizeGroup leaves them: integral zero points, small scales
        inv = rng.uniform(0.002, 0.02, (groups, 1)).astype(ml_dtypes.bfloat16).view(np.uint8)
        zp = rng.integers(-8, 9, (groups, 1)).astype(ml_dtypes.bfloat16).view(np.uint8)
        q = rng.integers(0, 256, (groups, fmt.group), dtype=np.uint8)
        return {"b": np.concatenate([inv, zp, q], axis=1).reshape(-1)}
    if fmt.block:
        d = rng.uniform(0.01, 0.1, (groups, 1)).astype(np.float16).view(np.uint8)
        q = rng.integers(0, 256, (groups, fmt.unit_size - 2), dtype=np.uint8)
        return {"b": np.concatenate([d, q], axis=1).reshape(-1)}
    out = {
        "b": rng.integers(
            -128 if fmt.name == "i8" else 0, 128 if fmt.name == "i8" else 256, fmt.storage_elems(cols * k)
        ).astype(np.int8 if fmt.name == "i8" else np.uint8)
    }
    s = rng.uniform(0.005, 0.05, groups).astype(np.float32)
    out["b_scales"] = {
        "f32": s,
        "f16": s.astype(np.float16).view(np.uint16),
        "bf16": s.astype(ml_dtypes.bfloat16).view(np.uint16),
    }[fmt.scales]
    if fmt.zero:
        out["b_zeros"] = (
            rng.integers(-3, 4, groups).astype(np.int8)
            if fmt.name == "i8"
            else (rng.integers(0, 16, groups).astype(np.uint8))
        )
    return out


def _weights(u, fmt, arrays) -> np.ndarray:
    """B's values as numpy dequantizes them (the format's definition), (batch, K, N) in float64."""
    w = dequantize(fmt, arrays["b"], u.k, arrays.get("b_scales"), arrays.get("b_zeros"))  # (batch * N, K)
    return w.reshape(u.batch, u.n, u.k).transpose(0, 2, 1).astype(np.float64)


def _case(text: str, seed: int):
    u = parse_spec(text)
    fmt, rng = u.dtypes[1], np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (u.batch, u.m, u.k)).astype(np.float32)
    arrays = _random_format(fmt, u.batch * u.n, u.k, rng)
    wt = _weights(u, fmt, arrays)
    want = a.astype(np.float64) @ wt
    bound = np.abs(a).astype(np.float64) @ np.abs(wt)
    return u, a, arrays, want, bound


def _gated_case(text: str, seed: int):
    """A gated spec's inputs: A, B1's and B2's arrays (keys b1..., b2...), the biases, numpy's output and
    its tolerance (each sum's 1e-5 bound through the activation's slope and the other factor)."""
    u = parse_spec(text)
    fmt, rng = u.dtypes[1], np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (u.batch, u.m, u.k)).astype(np.float32)
    arrays, sums, bounds = {}, [], []
    for name in ("b1", "b2"):
        x = _random_format(fmt, u.batch * u.n, u.k, rng)
        arrays |= {name + key[1:]: v for key, v in x.items()}
        wt = _weights(u, fmt, x)
        sums.append(a.astype(np.float64) @ wt)
        bounds.append(1e-5 * (np.abs(a).astype(np.float64) @ np.abs(wt)) + 1e-6)
    biases = {t: rng.uniform(-1, 1, u.n).astype(np.float32) for t in u.epilogue.tensors}
    g, up = sums[0] + biases.get("bias1", 0.0), sums[1] + biases.get("bias2", 0.0)
    act = ACTIVATIONS[u.epilogue.act]
    gate, want = act.numpy(g), act.numpy(g) * up
    return u, a, arrays, biases, want, gated_tolerance(act, bounds, gate, up, want)


def gated_tolerance(act, sum_tols, gate, up, want):
    """A gated output's tolerance from its sums' (sum_tols: the gate's, the up's): the gate sum's error through
    the activation's slope times |up| and up's error, the up sum's error times |act(gate)|, and the
    activation's few f32 ulps."""
    return act.slope * sum_tols[0] * (np.abs(up) + sum_tols[1]) + sum_tols[1] * np.abs(gate) + 1e-5 * np.abs(want)


# -- the interpreter --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", SPECS[::3])
def test_interpreter_matches_numpy(text):
    u, a, arrays, want, bound = _case(text, 1)
    fmt = u.dtypes[1]
    _, _, impl, _ = synthesize_program(text, isa="avx2", threads=1)
    w = dequantize(fmt, arrays["b"], u.k, arrays.get("b_scales"), arrays.get("b_zeros"))
    logical = {"f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn}.get(fmt.name, np.float32)
    b = w.reshape(u.batch, u.n, u.k).transpose(0, 2, 1).astype(logical)
    c = np.zeros((u.batch, u.m, u.n), np.float32)
    execute(impl, [a, b, c])
    assert np.all(np.abs(c - want) <= 1e-5 * bound + 1e-6)


@pytest.mark.parametrize("isa", [isa for isa in ("avx512", "avx2") if isa not in runnable_isas()][:1])
@pytest.mark.parametrize("text", GATED)
def test_gated_programs_this_cpu_cannot_run_match_numpy(text, isa):
    """The gated pair in a format, on an ISA this CPU does not run: its program run by the interpreter."""
    u, a, arrays, biases, want, tol = _gated_case(text, 3)
    impl = _synthesize(text, get_target(isa, threads=2))
    pairs = ("dot_quant_pair", "dot_quant_rows_pair")
    assert (text in PAIR_KERNEL) == any(isinstance(n, Kernel) and n.name in pairs for n in walk(impl))
    fmt = u.dtypes[1]
    bs = [_weights(u, fmt, {"b" + k[2:]: v for k, v in arrays.items() if k.startswith(n)}) for n in ("b1", "b2")]
    got = interpret(impl, a, *(b.astype(np.float32) for b in bs), extras=biases)
    assert np.all(np.abs(got - want) <= tol), (text, isa)


# -- generated kernels against numpy ------------------------------------------------------------------
def _c_array(ctype: str, name: str, x: np.ndarray) -> str:
    if x.dtype == np.float32:
        vals = ", ".join(f"{v!r}f" if np.isfinite(v) else "0.0f" for v in x.reshape(-1).tolist())
    else:
        vals = ", ".join(str(int(v)) for v in x.reshape(-1).tolist())
    return f"static const {ctype} {name}[] = {{{vals}}};"


@cache
def _headers(isa: str):
    """The kernels of SPECS for ``isa`` (synthesized once per test run)."""
    target = get_target(isa, threads=2)
    out = []
    for i, text in enumerate(SPECS + GATED):
        user, impl = parse_spec(text), _synthesize(text, target)
        out.append(emit_header(user, impl, target, name=f"k{i}", namespace=f"q{i}"))
        if isa != "scalar" and not (LUT_KERNEL in out[-1] and "avx512" in isa):
            # small batches run the rows kernel (its comment is in the kernel's code); on AVX-512 4-bit weights
            # may run dot_quant_lut row by row instead (test_quant_lut.py)
            assert (f"// {ROWS_KERNEL}" in out[-1]) == (user.m > 1), (text, isa)  # or its _pair form
    return tuple(out)


def case_lines(i: int, text: str, seed: int, ns: str) -> tuple[list[str], tuple]:
    """main()'s block for case i (_case(text, seed)): its arrays, a call of {ns}{i}::k{i} and of its reference
    loop, both outputs printed as rows "i kernel reference"; and (numpy's output, its bound)."""
    u, a, arrays, want, bound = _case(text, seed)
    fmt = u.dtypes[1]
    extra = [f"b_{suffix}" for suffix, _ in fmt.extra_arrays()]
    lines = ["  {", "  " + _c_array("float", "a", a), "  " + _c_array(fmt.ctype, "b", arrays["b"])]
    lines += ["  " + _c_array(ctype, f"b_{suffix}", arrays[f"b_{suffix}"]) for suffix, ctype in fmt.extra_arrays()]
    lines.append(f"  static float c[{want.size}], r[{want.size}];")
    lines.append(f"  {ns}{i}::k{i}({', '.join(['a', 'b', 'c', *extra])});")
    lines.append(f"  {ns}{i}::k{i}_reference({', '.join(['a', 'b', 'r', *extra])});")
    lines.append(f'  for (int j = 0; j < {want.size}; ++j) std::printf("{i} %.9g %.9g\\n", c[j], r[j]);')
    lines.append("  }")
    return lines, (want, bound)


def gated_case_lines(i: int, ns: str, a, arrays: dict, biases: dict, size: int) -> list[str]:
    """main()'s block for gated case i: {ns}{i}::k{i}(a, b1, b2, c, B1's arrays, B2's, biases) and its reference
    loop, both outputs printed as rows "i kernel reference"."""
    lines = ["  {", "  " + _c_array("float", "a", a)]
    for name, x in (arrays | biases).items():
        lines.append("  " + _c_array(str(x.dtype) + "_t" if x.dtype != np.float32 else "float", name, x))
    rest = [n for n in arrays if n not in ("b1", "b2")] + list(biases)
    lines.append(f"  static float c[{size}], r[{size}];")
    lines.append(f"  {ns}{i}::k{i}({', '.join(['a', 'b1', 'b2', 'c', *rest])});")
    lines.append(f"  {ns}{i}::k{i}_reference({', '.join(['a', 'b1', 'b2', 'r', *rest])});")
    lines.append(f'  for (int j = 0; j < {size}; ++j) std::printf("{i} %.9g %.9g\\n", c[j], r[j]);')
    return lines + ["  }"]


def _program(isa: str, tmp: Path) -> tuple[Path, list]:
    lines, cases = ["#include <cstdio>"], []
    for i, header in enumerate(_headers(isa)):
        (tmp / f"k{i}.hpp").write_text(header)
        lines.append(f'#include "k{i}.hpp"')
    lines.append("int main() {")
    for i, text in enumerate(SPECS):
        block, case = case_lines(i, text, 10 + i, "q")
        lines += block
        cases.append(case)
    for i, text in enumerate(GATED, start=len(SPECS)):  # NAME(a, b1, b2, c, b1's arrays, b2's arrays, biases)
        u, a, arrays, biases, want, tol = _gated_case(text, 10 + i)
        cases.append((want, tol))
        lines += gated_case_lines(i, "q", a, arrays, biases, want.size)
    lines += ["  return 0;", "}"]
    src = tmp / "main.cpp"
    src.write_text("\n".join(lines) + "\n")
    return src, cases


def _compile(src: Path, extra=(), opt="-O1") -> Path:
    exe = src.with_suffix("")
    built = compile_program(src, exe, opt=opt, includes=(src.parent,), extra_flags=extra)
    assert built.ok, built.output[-6000:]
    return exe


def run_program(src: Path, isa: str) -> list:
    """Compile the test program (-O1; -O0 for an ISA this CPU cannot run: a third less compile time, and the
    always_inline helpers still inline, so a target attribute that misses a feature still fails), then skip
    the test there, else run it: its output rows (case, kernel's value, reference's value)."""
    exe = _compile(src, opt="-O1" if isa in runnable_isas() else "-O0")
    if isa not in runnable_isas():
        pytest.skip(f"this CPU does not run {isa} (compiled only)")
    return output_rows(exe)


def output_rows(exe: Path) -> list:
    """Run a test program: its output rows (case, kernel's value, reference's value)."""
    out = subprocess.run([str(exe)], stdout=subprocess.PIPE, text=True, check=True).stdout.split("\n")
    return [line.split() for line in out if line]


def case_outputs(rows: list, i: int, shape) -> tuple[np.ndarray, np.ndarray]:
    """(kernel, reference) outputs of case i, shaped."""
    got = np.array([[float(x[1]), float(x[2])] for x in rows if x[0] == str(i)])
    return got[:, 0].reshape(shape), got[:, 1].reshape(shape)


# avx512_bf16 adds nothing here: with f32 A its programs for these specs are avx512's (dot_quant uses no bf16).
ISAS = ["scalar", "avx2", "avx512"] + (["highway"] if HAVE_HWY else [])


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
@pytest.mark.parametrize("isa", ISAS)
def test_kernels_match_numpy(isa, tmp_path):
    src, cases = _program(isa, tmp_path)
    rows = run_program(src, isa)
    for i, (want, bound) in enumerate(cases):
        kern, ref = case_outputs(rows, i, want.shape)
        tol = 1e-5 * bound + 1e-6 if i < len(SPECS) else bound  # gated: its own tolerance
        assert np.all(np.abs(ref - want) <= tol), ((SPECS + GATED)[i], "reference", ref, want)
        assert np.all(np.abs(kern - want) <= tol), ((SPECS + GATED)[i], isa, kern, want)


# Inserting values into vector lanes one at a time: what a compiler emits where it fails to vectorize a
# conversion (GCC 12 turned AVX-512 byte-to-int32 widening inside a kernel into 16 byte loads and inserts:
# correct, 8x slower).
LANE_INSERTS = ("vpinsrb", "vpinsrw", "vpinsrd", "vpinsrq")


@pytest.mark.skipif(not shutil.which("objdump") or not HAVE_CXX, reason="needs a C++ compiler and objdump")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_weight_formats_widen_in_vector_registers(isa, tmp_path):
    """The kernels of every format (SPECS), compiled as users do (-O2), never fill vector lanes one by one."""
    lines = []
    for i, header in enumerate(_headers(isa)):
        (tmp_path / f"k{i}.hpp").write_text(header)
        lines += [f'#include "k{i}.hpp"', f"void (*entry{i})(void* const*) = &q{i}::k{i}_call;"]
    src = tmp_path / "entries.cpp"
    src.write_text("\n".join(lines) + "\n")
    obj = _compile(src, extra=("-c",), opt="-O2")
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True, check=True)
    found = [w for w in asm.stdout.split() if w in LANE_INSERTS]
    assert not found, f"{isa}: {len(found)} lane inserts ({', '.join(sorted(set(found)))})"


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_i4_gemv_widens_two_vectors_per_load(isa):
    """dot_quant widens i4 2W values at a time (load2_i4: on AVX-512 one 16-byte load and one nibble split
    for 32 values, where two load_i4 calls took 2 masked 8-byte loads: 1x2048x16384 1.29x faster warm)."""
    from tests.test_rows import _forced

    text = "matmul 1x64x5 b=i4:col group=32 scales=f32"
    header = emit_header(parse_spec(text), *_forced(text, "dot_quant", 1, isa))
    assert "::load2_i4(" in header and "::load_i4(" not in header.split("// dot_quant:")[1]


@pytest.mark.parametrize(
    "b, hoisted",
    [
        ("b=q4_0", True),
        ("b=i4:col group=32 scales=f16 zero", True),
        ("b=i8:col group=64 scales=f32 zero", True),
        ("b=gemma_i8", True),
        ("b=i4:col group=channel scales=f32 zero", False),  # one rolled group: its sum of A one long chain
        ("b=i8:col group=32 scales=f32", False),  # no zero point
    ],
)
def test_dot_quant_takes_the_zero_point_off_once_per_group(b, hoisted):
    """sum a (q - z) as sum a q - z sum a: per group the sum of A (once for every column) and one FMA per
    column, no subtraction per widened vector (load_q4 and load_i4 subtract 0); the kernel's features count
    that, and on AVX2 four columns keep one FMA chain each so that the two more registers fit."""
    from morello_build.target.kernels import quant
    from tests.test_rows import _forced

    text, n = f"matmul 1x512x4 {b}", 4
    impl, target = _forced(text, "dot_quant", n, "avx2")
    kernel = emit_header(parse_spec(text), impl, target).split("// dot_quant:")[1].split("hsum")[0]
    fmt = parse_spec(text).dtypes[1]
    assert quant.hoists_zero(fmt, 512, target.lanes) == hoisted
    assert ("asum" in kernel) == hoisted and kernel.count("bcast(-float(") == (n if hoisted else 0)
    calls = re.findall(r"load2?_(?:q4|i4)\([^()]*\)", kernel)  # q4: (p, shift, n[, z]); i4: (p, n, z, lo, hi)
    if hoisted:
        assert "::sub(" not in kernel and all(c.endswith(", 0)") or ", 0, blo" in c for c in calls), calls
    op = next(x for x in walk(impl) if isinstance(x, Kernel) and x.name == "dot_quant").spec.op
    short_groups = quant.group_size(fmt, 512) <= 4 * target.lanes  # one chain anyway: quant.chains
    assert quant.chains(fmt, n, 512, target) == (1 if hoisted or short_groups else 2)
    assert quant._vector_regs(op, target) <= target.vector_regs
    with mock.patch.object(quant, "hoists_zero", return_value=False):  # the kernel subtracting per vector
        plain = quant.DOT_QUANT.cost(op, target)
    feats, groups = quant.DOT_QUANT.cost(op, target), 512 // quant.group_size(fmt, 512)
    assert feats.get("vec_fma") - plain.get("vec_fma") == (groups * n if hoisted else 0)  # one FMA per group and column
    assert (feats.get("vec_op") < plain.get("vec_op")) == hoisted  # no subtraction per chunk and column


# -- dot_quant_rows forced by the scheduling API ---------------------------------------------------------
def test_small_batch_gated_pairs_accumulate_in_l1():
    header = _headers("avx512")[len(SPECS) + GATED.index("gated 4x160x19 b=f16:col")]
    assert re.search(r"pair_accum c1, c2 -> f32\[1x4x(16|19)\]\{row\}@L1", header) and "// dot_quant_rows:" in header


def test_small_batch_gated_pairs_run_the_rows_pair_kernel():
    from morello_build.ir.impl import Kernel, walk

    for text in GATED[3:5]:
        target = get_target("avx512", threads=2)
        impl = _synthesize(text, target)
        assert "dot_quant_rows_pair" in {n.name for n in walk(impl) if isinstance(n, Kernel)}, text
        assert "prefetch_l2_here(" in emit_header(parse_spec(text), impl, target, name="k"), text


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_forced_rows_program_runs_the_rows_kernel(isa):
    from morello_build.ir.impl import Kernel, walk
    from tests.test_rows import _forced

    text = "matmul 3x64x5 b=i4:col group=32 scales=bf16 zero"  # 5 columns: tiles of 2, a ragged one
    impl, t = _forced(text, ROWS_KERNEL, 2, isa)
    assert {n.name for n in walk(impl) if isinstance(n, Kernel)} >= {ROWS_KERNEL}
    u, a, arrays, want, bound = _case(text, 3)
    fmt = u.dtypes[1]
    w = dequantize(fmt, arrays["b"], u.k, arrays.get("b_scales"), arrays.get("b_zeros"))
    c = np.zeros((1, u.m, u.n), np.float32)
    execute(impl, [a, w.reshape(1, u.n, u.k).transpose(0, 2, 1).astype(np.float32), c])
    assert np.all(np.abs(c - want) <= 1e-5 * bound + 1e-6)
    assert f"// {ROWS_KERNEL}: 3 row(s) x 2 column(s)" in emit_header(u, impl, t)


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_rows_kernels_of_several_columns_compute_the_product(isa, tmp_path):
    """dot_quant_rows with several columns of one group from main memory: the next columns' prefetches and A
    kept for the n columns (test_rows' NEXT_COLUMNS, forced) against numpy."""
    from tests.test_rows import NEXT_COLUMNS, _forced

    specs = [(text, cols) for text, kernel, cols, _ in NEXT_COLUMNS if kernel == ROWS_KERNEL]
    lines, cases = ["#include <cstdio>"], []
    for i, (text, cols) in enumerate(specs):
        header = emit_header(parse_spec(text), *_forced(text, ROWS_KERNEL, cols, isa), name=f"k{i}", namespace=f"n{i}")
        assert "prefetch_l2_here(" in header
        (tmp_path / f"k{i}.hpp").write_text(header)
        lines.append(f'#include "k{i}.hpp"')
    lines.append("int main() {")
    for i, (text, _) in enumerate(specs):
        block, case = case_lines(i, text, 40 + i, "n")
        lines += block
        cases.append(case)
    src = tmp_path / "main.cpp"
    src.write_text("\n".join(lines + ["  return 0;", "}"]) + "\n")
    rows = run_program(src, isa)
    for i, (want, bound) in enumerate(cases):
        kern, _ = case_outputs(rows, i, want.shape)
        assert np.all(np.abs(kern - want) <= 1e-5 * bound + 1e-6), (specs[i], isa, kern, want)


# -- the Python API ------------------------------------------------------------------------------------
PY_SPECS = ["matmul 3x64x5 b=q4_0", "matmul 1x64x3 b=i8:col group=32 scales=f16 zero", "matmul 2x40x3 b=f16:col"]
PY_GATED = "gated 2x64x3 b=i4:col group=32 scales=f32 act=silu"  # GATED[1]
PY_AQUANT = "matmul 2x64x3 b=i4:col group=32 scales=f16 zero aquant=i8"  # checked by test_quant_int's helpers
PY_GATED_AQUANT = "gated 2x64x3 b=i4:col group=32 scales=f16 zero aquant=i8 act=silu bias"


@pytest.mark.slow  # one extension (the binding object is shared with test_pyapi through the session cache)
@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_pyapi_takes_numpy_format_arrays(pyapi_cache_dir):
    pytest.importorskip("pybind11")
    from morello_build.tools import pyapi
    from tests.test_quant_int import check_pyapi_aquant, check_pyapi_gated_aquant

    specs = PY_SPECS + [PY_GATED, PY_AQUANT, PY_GATED_AQUANT]
    *kernels, gated, aq, gated_aq = pyapi.compile_kernels(specs, isa="avx2", threads=1)
    check_pyapi_aquant(aq, PY_AQUANT)
    check_pyapi_gated_aquant(gated_aq, PY_GATED_AQUANT)
    u, a, arrays, _, want, tol = _gated_case(PY_GATED, 6)  # keywords b1_scales, b2_scales: per column
    terms = {name: x.reshape(u.n, -1) for name, x in arrays.items() if name not in ("b1", "b2")}
    got = gated(a[0], arrays["b1"].reshape(u.n, -1), arrays["b2"].reshape(u.n, -1), **terms)
    assert np.all(np.abs(got - want[0]) <= tol[0])
    for text, f in zip(PY_SPECS, kernels):
        u, a, arrays, want, bound = _case(text, 5)
        b = arrays["b"].reshape(u.n, -1)  # per column: its bytes (or values)
        a = a[0]
        if u.dtypes[1].name == "f16":
            b = b.view(np.float16)
        terms = {name: arrays[name].reshape(u.n, -1) for name in ("b_scales", "b_zeros") if name in arrays}
        got = f(a, b, **terms)
        assert np.all(np.abs(got - want) <= 1e-5 * bound + 1e-6), text
    f, a, z = kernels[1], np.zeros((1, 64), np.float32), np.zeros((3, 2), np.int8)
    with pytest.raises(TypeError, match="b: expected shape"):
        f(a, np.zeros((3, 64), np.uint8), b_scales=np.zeros((3, 2), np.float16), b_zeros=z)
    with pytest.raises(ValueError, match="b_scales: expected shape"):
        f(a, np.zeros((3, 64), np.int8), b_scales=np.zeros((3, 3), np.float16), b_zeros=z)


# -- the DB keys formats -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, in_key",
    [
        ("matmul 2x64x6 b=i4:col group=32 scales=bf16 zero", "i4.g32.bf16.z"),
        ("matmul 2x64x6 b=i4:col group=32 scales=bf16 zero aquant=i8", "f32.qi8"),  # A quantized (ir/aquant.py)
    ],
)
def test_db_keys_formats(tmp_path, text, in_key):
    from morello_build.db import encode
    from morello_build.ir.impl import format_tree

    spec = parse_spec(text).to_spec()
    key, coords, _ = encode.op_key(spec.op)
    assert in_key in key and encode.op_from_key(key, coords) == spec.op
    db = str(tmp_path / "q.db")
    first = synthesize_program(text, isa="avx2", threads=1, db=db)[2]
    again = synthesize_program(text, isa="avx2", threads=1, db=db)[2]  # read back from the DB
    assert format_tree(again) == format_tree(first)


# -- the spec algebra and the cost model -----------------------------------------------------------------
def test_k_tiles_hold_whole_groups():
    from morello_build.synth.actions import Tile
    from morello_build.synth.actions.plan import Refusal

    target = get_target("avx2", threads=1)
    spec = parse_spec("matmul 1x128x4 b=q8_0 accum").to_spec(target.limits())
    refused = Tile((1, 1, 16, 4)).plan(spec, target)
    assert isinstance(refused, Refusal) and refused.code == "cuts-group" and "q8_0" in refused.reason
    assert not isinstance(Tile((1, 1, 64, 4)).plan(spec, target), Refusal)
    assert not isinstance(Tile((1, 1, 1, 4)).plan(spec, target), Refusal)  # single values: scalar loads


def test_cost_counts_the_formats_bytes():
    from morello_build.target.kernels.quant import DOT_QUANT

    target = get_target("avx2", threads=1)

    def lines(text):
        op = parse_spec(text + " accum").to_spec(target.limits()).op
        op = op.with_operands((op.a, op.b, replace(op.c, level=Level.RF)))
        return dict(DOT_QUANT.cost(op, target)).get("gl_line", 0)

    a_lines = 4096 * 4 // 64  # A is in main memory too
    q8, q4, i4 = (lines(f"matmul 1x4096x1 {b}") - a_lines for b in ("b=q8_0", "b=q4_0", "b=i4 group=32 scales=f32"))
    assert q8 == 4096 * 34 // 32 // 64 and q4 == 4096 * 18 // 32 // 64
    assert i4 == 4096 // 2 // 64 + 4096 // 32 * 4 // 64  # the values' lines, then the scales'


def test_rows_cost_widens_each_chunk_once():
    from morello_build.target.kernels.quant_rows import DOT_QUANT_ROWS

    target = get_target("avx2", threads=1)

    def feats(m: int):
        op = parse_spec(f"matmul {m}x256x1 b=i4 group=32 accum").to_spec(target.limits()).op
        op = op.with_operands((op.a, replace(op.b, level=Level.L1), replace(op.c, level=Level.RF)))
        return DOT_QUANT_ROWS.cost(op, target)

    two, four = feats(2), feats(4)
    steps = 256 // 8
    assert two.get("vec_fma") == 2 * steps and four.get("vec_fma") == 4 * steps  # an FMA per row and chunk
    groups = 256 // 32  # each group's scale: one broadcast load
    assert two.get("vec_load") == 3 * steps + groups and four.get("vec_load") == 5 * steps + groups  # B once, A per row
    # per chunk: load_i4's shift, mask, zero point, convert, and the scale multiply (ALU ops); its nibble
    # unpack and widening to 32-bit lanes (shuffles)
    widen = steps * 3
    assert two.get("vec_shuffle") == four.get("vec_shuffle") == steps * 2
    assert two.get("vec_op") - widen == 2 * 3 and four.get("vec_op") - widen == 4 * 1  # the chains' adds
