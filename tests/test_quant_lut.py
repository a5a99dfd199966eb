"""dot_quant_lut (target/kernels/quant_lut.py): 4-bit weights with f32 activations dequantized by a table per
group, on AVX-512. Forced through the scheduling API on awkward sizes (N = 1 and primes, K not a multiple of
its 32-value chunk, groups shorter than a chunk, rolled loops, zero points, 1 to 4 rows and columns per kernel;
i4 also with A copied once into strips of evens then odds), run against numpy's dequantization by the formats'
definitions; and the search's choice on an Intel profile."""

from __future__ import annotations

import numpy as np
import pytest

from morello_build.codegen import emit_header
from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Kernel, walk
from morello_build.ir.layout import interleaved, row_major
from morello_build.synth import cost
from morello_build.synth import schedule as S
from morello_build.target import get_target
from morello_build.target.kernels import interleaved_for
from morello_build.tools.api import synthesize_program
from tests.test_quant import HAVE_CXX, case_lines, case_outputs, run_program
from tests.test_rows import _forced

KERNEL = "dot_quant_lut"
# (spec, columns per kernel; rows per kernel: all of M)
CASES = [
    ("matmul 1x32x1 b=q4_0", 1),
    ("matmul 1x96x7 b=q4_0", 4),  # 7 columns: tiles of 4 and a ragged 3
    ("matmul 1x64x5 b=i4:col group=32 scales=f32", 2),
    ("matmul 1x36x3 b=i4:col group=channel scales=bf16 zero", 3),  # a chunk of 32 and a tail of 4
    ("matmul 1x48x3 b=i4:col group=16 scales=f16", 1),  # groups shorter than a chunk
    ("matmul 1x384x4 b=i4:col group=128 scales=bf16 zero", 4),
    ("matmul 1x610x1 b=i4:col group=channel scales=f32", 1),  # a rolled loop of two chains, a tail of 2
    ("matmul 1x2x3 b=i4:col group=channel scales=f16 zero", 1),
    ("matmul 1x160x2 b=i4:col group=32 scales=f16 zero", 1),
    # small batches: each column's lookups shared by the rows
    ("matmul 4x64x5 b=i4:col group=32 scales=f16 zero", 2),
    ("matmul 3x96x3 b=q4_0", 3),
    ("matmul 2x36x2 b=i4:col group=channel scales=bf16", 1),
]
# i4 with A copied once into strips of 16 evens then 16 odds (whole chunks: groups a multiple of 32)
STRIP_CASES = [
    ("matmul 1x32x1 b=i4:col group=32 scales=f16", 1),
    ("matmul 4x64x5 b=i4:col group=32 scales=f16 zero", 2),
    ("matmul 3x1216x7 b=i4:col group=64 scales=bf16", 2),  # a rolled chunk loop, 7 columns: 2, 2, 2, 1
    ("matmul 1x1216x7 b=i4:col group=channel scales=f16", 4),  # 4 and a ragged 3
    ("matmul 2x96x3 b=i4:col group=channel scales=f32 zero", 3),
]
ISAS = ["avx512", "avx512_bf16"]


def _a_in_strips(spec, t, body):
    return S.move(spec, "a", "L1", interleaved(row_major(), 2, 32), "f32", target=t, body=body)


def _program(isa: str, tmp) -> tuple:
    lines, cases = ["#include <cstdio>"], []
    for i, (text, cols, outer) in enumerate(_all_cases()):
        impl, t = _forced(text, KERNEL, cols, isa, outer)
        assert KERNEL in {n.name for n in walk(impl) if isinstance(n, Kernel)}
        (tmp / f"k{i}.hpp").write_text(emit_header(parse_spec(text), impl, t, name=f"k{i}", namespace=f"l{i}"))
        lines.append(f'#include "k{i}.hpp"')
    lines.append("int main() {")
    for i, (text, _, _) in enumerate(_all_cases()):
        block, case = case_lines(i, text, 40 + i, "l")
        lines += block
        cases.append(case)
    src = tmp / "main.cpp"
    src.write_text("\n".join(lines + ["  return 0;", "}"]) + "\n")
    return src, cases


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
@pytest.mark.parametrize("isa", ISAS)
def test_lut_kernels_match_numpy(isa, tmp_path):
    src, cases = _program(isa, tmp_path)
    rows = run_program(src, isa)
    for i, (want, bound) in enumerate(cases):
        kern, ref = case_outputs(rows, i, want.shape)
        tol = 1e-5 * bound + 1e-6
        assert np.all(np.abs(ref - want) <= tol), (_all_cases()[i], "reference", ref, want)
        assert np.all(np.abs(kern - want) <= tol), (_all_cases()[i], isa, kern, want)


def _all_cases() -> list:
    return [(t, c, None) for t, c in CASES] + [(t, c, _a_in_strips) for t, c in STRIP_CASES]


def test_strips_of_a_replace_the_shuffles_of_a():
    """With A in strips the i4 kernel zero-extends its bytes as q4_0's does: no i4_order, no lookup_i4."""
    for text, cols in STRIP_CASES:
        impl, t = _forced(text, KERNEL, cols, "avx512", _a_in_strips)
        code = emit_header(parse_spec(text), impl, t, name="k", namespace="s")
        assert "lookup_q4(" in code and "i4_order(" not in code.split("// dot_quant_lut")[1], text


@pytest.mark.parametrize(
    "text",
    [
        "matmul 1x2048x16384 b=i4:col group=32 scales=f16",
        "matmul 1x2048x16384 b=q4_0:col",
        "matmul 1x2560x1024 b=i4:col group=128 scales=bf16 zero",
    ],
)
def test_search_picks_the_table_on_intel_512_bit(text):
    """Golden Cove's 512-bit vector instructions share ports 0 and 5 (vec_pipes 2): dot_quant's widening
    (masks, unpacks, two widenings and conversions per 32 values) costs more of them than the table's shift
    and permutes. 1x2048x16384 i4 g32 f16, one thread, 4 rotated copies (scripts/kernel_ab.py, Xeon):
    dot_quant 4048-4111 us, dot_quant_lut 2973 us (1 column per kernel) / 2808 us (4)."""
    _, _, impl, _ = synthesize_program(text + " serial", isa="avx512_bf16", threads=1, db=None, profile="golden-cove")
    assert {n.name for n in walk(impl) if isinstance(n, Kernel) and n.spec.op.kind == "matmul"} == {KERNEL}


def test_search_copies_a_into_strips_for_a_small_batch_of_i4():
    """4 rows of i4: two shuffles of A per row and chunk in every kernel call along N (a quarter of the
    kernel's vector instructions at 2 columns a call) against one copy of A per call. From DRAM,
    standalone on the Xeon (Mx2048x16384 g32 f16, serial, 48 rotated weight copies): 4 rows
    3976-4069 us with the shuffles, 2894-3037 us from strips; 1 row 1767-1922 against 1809-1840."""
    text = "matmul 4x2048x16384 b=i4:col group=32 scales=f16 serial"
    _, t, impl, _ = synthesize_program(text, isa="avx512_bf16", threads=1, db=None, profile="golden-cove")
    lut = [n for n in walk(impl) if isinstance(n, Kernel) and n.name == KERNEL]
    assert lut and all(interleaved_for(n.spec.op.a, t.lanes) for n in lut)


def test_shared_vector_pipes_take_every_vector_instruction():
    """vec_pipes counts FMAs, ALU ops, shuffles and integer multiplies once more, in one class for all."""
    costs = get_target("avx512_bf16", threads=1, profile="golden-cove").costs
    assert costs.vec_pipes == 2
    f = cost.Features.of(vec_fma=4, vec_op=2, vec_shuffle=3, vec_imul=1, vec_load=5)
    parts = dict(zip(cost.CLASSES, cost.parts(f, costs)))
    assert parts["vector"] == pytest.approx(10 / 2)
    builtin = get_target("avx512_bf16", threads=1, profile="builtin").costs
    assert dict(zip(cost.CLASSES, cost.parts(f, builtin)))["vector"] == 0
