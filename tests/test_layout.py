"""Layouts: every logical coordinate gets its own offset inside the buffer, the C offset expression agrees,
and contiguity / cache-line / unit-stride estimates hold on known cases and on random tiles."""

from __future__ import annotations

import itertools
import re
from math import prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from morello_build.ir.layout import Layout, col_major, interleaved, packed, row_major
from morello_build.ir.spec import DType, Level, TensorSpec

STRIPS = [2, 4, 8, 16]


@st.composite
def layouts(draw):
    kind = draw(st.sampled_from(["row", "col", "packed", "interleaved", "interleaved_col"]))
    if kind == "row":
        return row_major()
    if kind == "col":
        return col_major()
    if kind == "packed":
        return packed(draw(st.sampled_from([1, 2])), draw(st.sampled_from(STRIPS)))
    if kind == "interleaved":
        return interleaved(row_major(), 2, draw(st.sampled_from(STRIPS)))
    return interleaved(col_major(), 1, draw(st.sampled_from(STRIPS)))


shapes = st.tuples(st.integers(1, 3), st.integers(1, 12), st.integers(1, 20))


def all_coords(shape):
    return itertools.product(*(range(s) for s in shape))


@settings(max_examples=300, deadline=None)
@given(layouts(), shapes)
def test_offsets_are_distinct_and_in_the_buffer(layout, shape):
    n = layout.buffer_elements(shape)
    offsets = [layout.offset(c, shape) for c in all_coords(shape)]
    assert len(set(offsets)) == prod(shape)
    assert min(offsets) >= 0 and max(offsets) < n
    assert n >= prod(shape)


def eval_c(expr: str, env: dict[str, int]) -> int:
    """Evaluate a C integer expression over non-negative values (C '/' truncates = floors here)."""
    assert re.fullmatch(r"[\sA-Za-z0-9_+*/%()]*", expr), expr
    return eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(env))


@settings(max_examples=150, deadline=None)
@given(layouts(), shapes)
def test_c_offset_agrees_with_offset(layout, shape):
    expr = layout.c_offset(("b", "i", "j"), shape)
    for c in all_coords(shape):
        assert eval_c(expr, dict(zip("bij", c))) == layout.offset(c, shape), expr


def test_c_offset_with_compound_index_expressions():
    layout = interleaved(row_major(), 2, 8)
    shape = (1, 3, 20)
    expr = layout.c_offset(("0", "i0 + i", "j0 + j"), shape)
    for i0, i, j0, j in itertools.product([0, 1], [0, 1], [0, 8], range(8)):
        assert eval_c(expr, {"i0": i0, "i": i, "j0": j0, "j": j}) == layout.offset((0, i0 + i, j0 + j), shape)


def test_known_offsets():
    shape = (2, 3, 4)
    assert row_major().offset((1, 2, 3), shape) == 1 * 12 + 2 * 4 + 3
    assert col_major().offset((1, 2, 3), shape) == 1 * 12 + 3 * 3 + 2
    # B (K=3, N=20) in panels of 8 along N: panel, then k, then n % 8; the last panel is padded.
    p = packed(2, 8)
    assert p.buffer_elements((1, 3, 20)) == 3 * 3 * 8
    assert p.offset((0, 1, 10), (1, 3, 20)) == 1 * 24 + 1 * 8 + 2
    # Interleaved strips of 8 along K: evens then odds inside each strip.
    il = interleaved(row_major(), 2, 8)
    assert [il.offset((0, 0, k), (1, 1, 8)) for k in range(8)] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert il.offset((0, 0, 9), (1, 1, 16)) == 8 + 4
    assert row_major().name == "row" and col_major().name == "col"


def test_interleave_needs_the_innermost_dim():
    with pytest.raises(ValueError):
        interleaved(row_major(), 1, 8)


# -- contiguity and cache lines ---------------------------------------------------------------------
def f32(shape, layout=None, contig=None):
    layout = layout or row_major()
    return TensorSpec(shape, DType.F32, layout, Level.GL, len(layout.digits) if contig is None else contig)


def test_contiguity_of_row_major_tiles():
    t = f32((1, 4, 16))
    assert t.lines() == 4  # 256 contiguous bytes
    assert t.tile((1, 2, 16)).contig == 2 and t.tile((1, 2, 16)).lines() == 2  # two whole rows: one run
    assert t.tile((1, 4, 8)).contig == 1 and t.tile((1, 4, 8)).lines() == 4  # four half rows
    assert t.tile((1, 1, 1)).lines() == 1
    assert t.tile((1, 4, 1)).lines() == 4  # a column: four separate lines


def test_contiguity_of_col_major_tiles():
    t = f32((1, 8, 4), col_major())  # K=8 x N=4 stored as 4 rows of 8
    col = t.tile((1, 8, 1))
    assert col.layout.contiguous_run(col.shape, col.contig) == 8 and col.lines() == 1
    row = t.tile((1, 1, 4))
    assert row.lines() == 4


def test_cache_lines_bf16_and_long_runs():
    t = TensorSpec((1, 1, 64), DType.BF16, row_major(), Level.GL, 3)
    assert t.lines() == 2  # 128 bytes
    assert f32((1, 1, 17)).lines() == 2  # 68 bytes round up to two lines (alignment ignored)
    big = f32((1, 64, 64))
    assert big.lines() == 64 * 64 * 4 // 64
    assert big.tile((1, 64, 16)).lines() == 64  # one line per row segment


def test_padded_strips_count_their_runs():
    """B with N=3 in panels of 2: a row of a batch touches two panels (the second one padded)."""
    t = f32((2, 2, 3), packed(2, 2)).tile((2, 1, 3))
    assert t.layout.contiguous_run(t.shape, t.contig) == 2
    assert t.lines() == 4  # 2 batches x 2 panels, not ceil(6 elements / 2)


def test_packed_tiles_keep_whole_panels_contiguous():
    t = f32((1, 8, 32), packed(2, 16))  # two panels of 8x16
    panel = t.tile((1, 8, 16))
    assert panel.layout.contiguous_run(panel.shape, panel.contig) == 8 * 16
    assert panel.lines() == 8
    assert panel.unit_stride(2) is False  # 2-D tile: not a single run of n


def test_unit_stride_runs():
    t = f32((1, 4, 16))
    assert t.tile((1, 1, 16)).unit_stride(2)
    assert t.tile((1, 1, 8)).unit_stride(2)
    assert not t.tile((1, 4, 1)).unit_stride(1)  # a row-major column is strided
    assert not t.tile((1, 2, 16)).unit_stride(2)  # two rows: not a 1-D run
    c = f32((1, 8, 4), col_major())
    assert c.tile((1, 8, 1)).unit_stride(1)  # a column of a col-major matrix
    assert not c.tile((1, 1, 4)).unit_stride(2)
    p = f32((1, 4, 32), packed(2, 16))
    assert p.tile((1, 1, 16)).unit_stride(2)  # within a panel row
    il = f32((1, 1, 16), interleaved(row_major(), 2, 16))
    assert not il.unit_stride(2)  # evens then odds: not consecutive
    assert f32((1, 1, 1)).unit_stride(0)


def _blocks(offsets, run):
    """How many blocks of ``run`` consecutive addresses cover the offsets (greedily; a padded last
    strip leaves holes inside a block, which is still one dense stretch of memory)."""
    count, end = 0, None
    for o in sorted(offsets):
        if end is None or o >= end:
            count, end = count + 1, o + run
    return count


@settings(max_examples=200, deadline=None)
@given(layouts(), shapes, st.data())
def test_contiguity_claims_hold_on_random_tiles(layout, shape, data):
    """A tile's claimed dense run really is dense: at tile-aligned origins its offsets fit in
    ceil(padded volume / run) blocks of ``run`` consecutive addresses (what cache_lines assumes), and a
    unit-stride claim means consecutive offsets."""
    parent = f32(shape, layout)
    tile = tuple(data.draw(st.integers(1, s)) for s in shape)
    t = parent.tile(tile)
    run = layout.contiguous_run(tile, t.contig)
    vol = prod(tile)
    for origin_idx in [tuple(0 for _ in shape), tuple((s // ts - 1) * ts for s, ts in zip(shape, tile))]:
        if any(o < 0 for o in origin_idx):
            continue
        if any(o + ts > s for o, ts, s in zip(origin_idx, tile, shape)):
            continue
        offs = [layout.offset(tuple(o + x for o, x in zip(origin_idx, c)), shape) for c in all_coords(tile)]
        if any(ts % layout.strip(d) and ts < s for d, (ts, s) in enumerate(zip(tile, shape))):
            continue  # tiles that cut a strip are never formed by the search (actions.respects_strips)
        claimed = -(-layout.buffer_elements(tile) // run)  # the runs cache_lines counts
        assert _blocks(offs, run) <= claimed, (layout.name, tile, t.contig, run)
    for d in range(3):
        if t.unit_stride(d):
            offs = [layout.offset(c, shape) for c in all_coords(tile)]
            assert sorted(offs) == list(range(min(offs), min(offs) + vol))


def test_canonical_drops_unit_digits_only():
    lay, contig = row_major().canonical((1, 1, 8), 3)
    assert [d.dim for d in lay.digits] == [2] and contig == 1
    lay, contig = row_major().canonical((1, 1, 1), 3)
    assert lay == Layout(()) and contig == 0
