"""Multi-row dot kernels (target/kernels/rows.py): programs forced onto them through the scheduling API
compute A·B (interpreted on every vector ISA, compiled and run in one extension on those this CPU runs),
and the search picks them for a small batch of rows against B columns."""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

from morello_build.check.interpret import interpret
from morello_build.check.testing import cxx
from morello_build.codegen import emit_header
from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Kernel, walk
from morello_build.synth import schedule as S
from morello_build.target import get_target, runnable_isas

# Awkward sizes: M = 2, 3, 5; N prime; K not a multiple of the vector width (and one below it).
SPECS = [
    ("matmul 2x37x13 a=f32 b=bf16:col c=f32", "dot_bf16_rows", 1),
    ("matmul 3x45x7 a=f32 b=f32:col c=f32", "dot_f32_rows", 1),
    ("matmul 5x21x11 a=f32 b=bf16:col c=f32", "dot_bf16_rows", 1),
    ("matmul 3x5x5 a=f32 b=f32:col c=f32", "dot_f32_rows", 1),
    ("matmul 4x70x6 a=f32 b=bf16:col c=f32", "dot_bf16_rows", 2),
]
VECTOR_ISAS = ("avx2", "highway", "avx512")


def _forced(spec: str, kernel: str, cols: int, isa: str, outer=None):
    """Tiles of all M rows x ``cols`` columns of C in registers, each one call of ``kernel`` (one tile, no
    loop, where ``cols`` covers all of N). ``outer(spec, target, body)``, if given, goes around the tiles (a
    copy of an operand made once)."""
    t = get_target(isa, threads=1)
    _, m, _, n = parse_spec(spec).to_spec().op.iter_shape

    def in_registers(s):
        return S.move(
            s, "c", "RF", target=t, body=lambda s: S.to_accum(s, target=t, body=lambda s: S.select(s, kernel, t))
        )

    def tiles(s):
        return S.tile_out(s, (m, cols), target=t, body=in_registers) if cols < n else in_registers(s)

    return (outer(spec, t, tiles) if outer else tiles(spec)), t


def _inputs(spec: str, rng):
    user = parse_spec(spec)
    (_, m, k, n), bdt = user.to_spec().op.iter_shape, user.operand_dtypes()[1].value
    a = rng.uniform(-1, 1, (1, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (1, k, n)).astype(np.float32)
    if bdt == "bf16":
        b = b.astype(ml_dtypes.bfloat16)
    return a, b, a[0] @ b[0].astype(np.float32)


def _kernels(impl):
    return {n.name for n in walk(impl) if isinstance(n, Kernel)}


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_forced_rows_programs_compute_the_product(isa):
    rng = np.random.default_rng(5)
    for spec, kernel, cols in SPECS:
        impl, t = _forced(spec, kernel, cols, isa)
        assert kernel in _kernels(impl)
        a, b, want = _inputs(spec, rng)
        got = interpret(impl, a, b)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        emit_header(parse_spec(spec), impl, t)  # every ISA's emitter produces its C++


@pytest.mark.skipif(shutil.which(cxx().split()[0]) is None, reason="no C++ compiler")
def test_compiled_rows_kernels_match_numpy():
    from morello_build.tools import pyapi

    isas = [isa for isa in VECTOR_ISAS if isa in runnable_isas()]
    jobs = [(spec, kernel, cols, isa) for isa in isas for spec, kernel, cols in SPECS]
    programs = iter([(spec, *_forced(spec, kernel, cols, isa)) for spec, kernel, cols, isa in jobs])

    def header(_spec, isa, name, namespace, **_):  # called in the order of the specs (normalized)
        spec, impl, t = next(programs)
        return emit_header(parse_spec(spec), impl, t, name=name, namespace=namespace)

    by_isa = {isa: [spec for spec, _, _, i in jobs if i == isa] for isa in isas}
    rng = np.random.default_rng(6)
    for isa, specs in by_isa.items():
        for spec, kern in zip(specs, pyapi.compile_kernels(specs, isa=isa, header_fn=header)):
            a, b, want = _inputs(spec, rng)
            got = np.asarray(kern(a[0], np.ascontiguousarray(b[0].T)))
            np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_the_search_picks_rows_kernels_for_a_small_batch():
    t = get_target("avx2", threads=1)
    impl = S.synthesize("matmul 4x128x4 a=f32 b=bf16:col c=f32", t)
    assert "dot_bf16_rows" in _kernels(impl)


def test_four_rows_take_three_columns_in_avx2_registers():
    """12 accumulators, 3 widened B chunks and an A chunk fill AVX2's 16 ymm (rows.tile_registers, which
    dot_quant_rows shares): 4 x 3 tiles spill nothing and ran 1.06-1.24x faster than the 4 x 2 the search took when
    one more temporary was counted (4x2048x16384 bf16 and f32 from DRAM, Zen 3); 4 x 4 do not fit."""
    t = get_target("avx2", threads=1)
    impl = S.synthesize("matmul 4x512x24 a=f32 b=bf16:col c=f32 serial", t)
    tiles = {n.spec.op.iter_shape[3] for n in walk(impl) if isinstance(n, Kernel) and n.name == "dot_bf16_rows"}
    assert tiles == {3}, tiles
    four = S.synthesize("matmul 4x512x4 a=f32 b=bf16:col c=f32 serial", t)
    assert all(n.spec.op.iter_shape[3] < 4 for n in walk(four) if isinstance(n, Kernel) and n.name == "dot_bf16_rows")


# B in main memory (weights of a decode step): a small batch's rows kernels and the gated pair's kernel.
PREFETCHING = [
    ("matmul 4x512x64 b=bf16:col", "dot_bf16_rows"),
    ("matmul 4x512x64 b=q8_0:col", "dot_quant_rows"),
    ("matmul 2x512x64 b=f16:col", "dot_quant_rows"),
    ("gated 1x512x8 b=q8_0", "dot_quant_pair"),
]


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("spec, kernel", PREFETCHING)
def test_rows_and_pair_kernels_prefetch_b_from_main_memory(spec, kernel, isa):
    """As the single-row dot kernels do (test_epilogue): the search leaves B in main memory for them (no
    L1 view hides it: policy._view_pays), they prefetch its columns (or, for weight formats in several groups,
    the columns after the kernel's last, as one stream), and count the prefetches as loads; a
    cost table with prefetch_bytes 0 emits none and counts fewer loads."""
    from dataclasses import replace
    from unittest import mock

    from morello_build.synth import search
    from morello_build.synth.actions import SplitPair, enumerate_actions
    from morello_build.synth.search import synthesize

    t = get_target(isa, threads=1)
    off = replace(t, costs=replace(t.costs, prefetch_bytes=0))
    user = parse_spec(spec)
    without_split = lambda s, tt: (a for a in enumerate_actions(s, tt) if not isinstance(a, SplitPair))  # noqa: E731
    with mock.patch.object(search, "enumerate_actions", without_split):
        impl, _ = synthesize(user.to_spec(), t)
    kernels = [n for n in walk(impl) if isinstance(n, Kernel) and n.name == kernel]
    assert kernels and all(b.level.name == "GL" for k in kernels for b in _bs(k.spec.op))
    on, no = emit_header(user, impl, t, name="k"), emit_header(user, impl, off, name="k")
    # each column prefetch_bytes ahead, or (weight formats in several groups) the columns after the kernel's
    # last into L2, a share per group (quant_int_prefetch.step_slots)
    assert "::prefetch(" in on or "::prefetch_l2_here(" in on
    assert "::prefetch(" not in no and "::prefetch_l2_here(" not in no
    op = kernels[0].spec.op
    loads = [t.kernel(kernel).cost(op, x).get("vec_load") for x in (t, off)]
    assert loads[0] > loads[1]


def _bs(op):
    return (op.b1, op.b2) if op.kind == "pair" else (op.b,)


# (spec, kernel, columns a kernel, bytes a column): bf16, f32, and formats of one group (none; per channel)
NEXT_COLUMNS = [
    ("matmul 4x1000x64 b=bf16:col", "dot_bf16_rows", 2, 2000),
    ("matmul 2x520x9 b=f32:col", "dot_f32_rows", 3, 2080),
    ("matmul 3x400x8 b=f16:col", "dot_quant_rows", 2, 800),
    ("matmul 2x512x12 b=i8:col group=channel scales=bf16", "dot_quant_rows", 3, 512),
]


@pytest.mark.parametrize("spec, kernel, cols, col_bytes", NEXT_COLUMNS)
def test_rows_kernels_of_several_columns_prefetch_the_next_ones(spec, kernel, cols, col_bytes):
    """With several columns of B from main memory, each trip of the kernel's loop brings into L2 its share of
    the column n after each of the kernel's (the next kernel's in the loop over N), every line of it once or
    more, so that B is read as one stream; their cost counts those prefetches and no interleaved streams
    (rows.py, quant_rows.py)."""
    import re

    impl, t = _forced(spec, kernel, cols, "avx512")
    node = next(n for n in walk(impl) if isinstance(n, Kernel) and n.name == kernel)
    text = emit_header(parse_spec(spec), impl, t)
    loop = re.search(r"for \(ix (ch\d+) = 0; \1 < (\d+); \1 \+= (\d+)\)", text)
    var, trips, step = loop.group(1), int(loop.group(2)) // int(loop.group(3)), int(loop.group(3))
    exprs = re.findall(rf"prefetch_l2_here\(bp\d+, {cols * col_bytes} \+ \((.*)\) \* 64\);", text)
    assert exprs and len(exprs) % cols == 0, text
    lines = {eval(e.replace("/", "//").replace(var, str(trip * step))) for trip in range(trips) for e in exprs}
    assert lines == set(range(-(-col_bytes // 64)))
    feats = t.kernel(kernel).cost(node.spec.op, t)
    assert not feats.get("gl_interleaved") and feats.get("vec_load") >= trips * cols


def test_dot_kernels_of_a_k_tile_prefetch_the_next_columns():
    """A GEMV split along K: the dot kernel's columns are k tiles of longer ones, so its own-stream prefetches
    would fetch the part a later k trip reads; it prefetches into L2 the next kernel's tiles instead, every
    line of them (dot.b_prefetch_head); the unsplit program keeps the own-stream prefetches."""
    import re

    t, spec = get_target("avx512", threads=1), "matmul 1x2048x64 b=bf16:col serial"
    split = emit_header(parse_spec(spec), S.split(spec, 512, target=t, body=lambda s: S.synthesize(s, t)), t)
    whole = emit_header(parse_spec(spec), S.synthesize(spec, t), t)
    assert "::prefetch(bp" in whole and "prefetch_l2_here(bp" not in whole
    assert "::prefetch(bp" not in split
    loops = {
        v: (int(end) // int(step), int(step))
        for v, end, step in re.findall(r"for \(ix (ch\d+) = 0; \1 < (\d+); \1 \+= (\d+)\)", split)
    }
    exprs = re.findall(r"prefetch_l2_here\(bp\d+, (\d+) \+ \((.*)\) \* 64\);", split)
    assert exprs and {int(ahead) for ahead, _ in exprs} == {2048 * 2 * 1}  # the next column (1 a kernel)
    for var, (trips, step) in loops.items():  # the peeled first k tile's kernel loop and the others'
        mine = [e for _, e in exprs if var in e]
        lines = {eval(e.replace("/", "//").replace(var, str(i * step))) for i in range(trips) for e in mine}
        assert lines == set(range(512 * 2 // 64)), var
