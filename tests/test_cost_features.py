"""The cost model's features: each surcharge is one named count, priced by the CostTable, and every
node's cost follows the rules of synth/cost.py: its parts (cycles per port class) are its own features'
plus Σ weight × child parts, and its cost is the overlap rule over them. The tests check counts and the
rules, not prices."""

from __future__ import annotations

import dataclasses
from dataclasses import fields

import pytest

from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Kernel, format_tree, walk
from morello_build.ir.layout import interleaved, packed, row_major
from morello_build.ir.spec import DType, Level, Matmul, Move, Spec, TensorSpec, canonicalize
from morello_build.synth import cost
from morello_build.synth.actions import Tile, indexes_registers, loop_regions, tile_op
from morello_build.synth.cost import (
    FEATURES,
    Features,
    copy_live_runs,
    copy_thrashes,
    fma_steps,
    l2_evicts,
    l2_reuse_lines,
    lines_read,
    long_bursts,
    lost_streams,
    shared_lines,
    short_runs,
    view_evicts,
    view_features,
    view_footprint,
)
from morello_build.synth.search import Search
from morello_build.target import TARGETS, CostTable
from morello_build.target.kernels import BY_NAME

AVX2, AVX512 = TARGETS["avx2"], TARGETS["avx512"]
# The rules' tests: every non-binding cycle hidden (ECM's full overlap); the built-in table hides half.
FULL = dataclasses.replace(AVX2, costs=dataclasses.replace(AVX2.costs, overlap_percent=100))


def _spec(text, target=AVX2):
    return parse_spec(text).to_spec(target.limits())


def _loop_features(spec, tile, parallel=False, target=AVX2) -> Features:
    """The own features of the loop that Tile(tile) makes of ``spec`` (and its plan's exact own cost)."""
    op = spec.op
    plan = Tile(tile, parallel).plan(spec, target)
    dims = tuple(d for d, (t, f) in enumerate(zip(tile, op.iter_shape)) if t < f)
    counts = tuple(n for _, n, _ in loop_regions(op.iter_shape, tile, dims))
    own = cost.loop_features(op, plan.subspecs, counts, dims, tile, parallel, indexes_registers(op, dims), target)
    assert plan.own == cost.parts(own, target.costs) and own == Features.of(**dict(own))  # canonical order
    return own


# -- the value and the table -----------------------------------------------------------------------
def test_features_add_scale_and_price():
    a = Features.of(vec_load=2, gl_line=3, vec_fma=0)
    assert a == Features.of(gl_line=3, vec_load=2) and list(a) == [("gl_line", 3), ("vec_load", 2)]
    assert a + Features.of(vec_load=1, hsum=1) == Features.of(gl_line=3, vec_load=3, hsum=1)
    assert a * 0.5 == Features.of(gl_line=1.5, vec_load=1) and a * 0 == Features.of()
    assert sum([a, a]) == a + a and a.get("hsum") == 0
    c = CostTable()
    assert a.dot(c) == 3 * c.gl_line + 2 * c.vec_load
    assert a.describe() == "gl_line 3, vec_load 2" and Features.of().describe() == "none"
    with pytest.raises(KeyError):
        Features.of(cycles=1)


def test_features_keep_one_order():
    every = {n: 1 for n in reversed(FEATURES)}
    assert list(Features.of(**every)) == [(n, 1) for n in FEATURES]
    assert Features.ordered(*((n, 1) for n in FEATURES)) == Features.of(**every)


def test_every_feature_is_priced_by_the_cost_table():
    prices = [f.name for f in fields(CostTable) if f.type == "float"]
    assert set(prices) <= set(FEATURES)
    c = CostTable()
    for name in FEATURES:
        assert isinstance(getattr(c, name), float), name
    assert c.l2_reuse_line == c.l2_line - c.gl_line < 0  # a refund


def _price(features, target=FULL) -> float:
    """A node with these own features and no children, priced by the rules."""
    return cost.combine(cost.parts(features, target.costs), (), (), hidden=target.costs.hidden)[0]


def test_fma_latency_binds_small_outer_products():
    c = AVX2.costs
    assert fma_steps(2, c) == Features.of(vec_fma=2, fma_latency=1)  # the FMA ports and one link of the chain
    assert _price(fma_steps(2, c)) == c.fma_latency  # 2 FMAs take 1 cycle, the latency 4
    assert _price(fma_steps(12, c)) == 12 * c.vec_fma  # 6x16: 12 independent accumulators
    a = TensorSpec((1, 6, 1), DType.F32, row_major(), Level.L1)
    b = TensorSpec((1, 1, 16), DType.F32, packed(2, 8), Level.VRF, 4, 8)
    cc = TensorSpec((1, 6, 16), DType.F32, packed(2, 8), Level.VRF, 4, 8)
    own = BY_NAME["fma_outer"].cost(Matmul(a, b, cc, True), AVX2)
    assert own == Features.of(vec_load=6, vec_fma=12, fma_latency=1)


# -- the port rule and the overlap rule ------------------------------------------------------------
def test_a_kernel_costs_its_busiest_port_not_the_sum():
    """FMAs, loads and stores issue on different ports in the same cycles: the busiest binds."""
    c = AVX2.costs
    assert _price(Features.of(vec_fma=12, vec_load=8)) == 12 * c.vec_fma  # a 6x16 k-step: FMA-bound
    assert _price(Features.of(vec_fma=4, vec_load=10)) == 10 * c.vec_load  # more loads than FMAs: the loads
    assert _price(Features.of(vec_store=6, vec_op=2)) == 6 * c.vec_store
    narrow = dataclasses.replace(FULL, costs=dataclasses.replace(FULL.costs, dispatch=1))  # a 1-wide front end
    assert _price(Features.of(vec_fma=12, vec_load=8), narrow) == 20  # dispatch binds: one instruction a cycle


def test_the_k_step_of_a_register_tile_costs_its_busiest_port():
    """The k loop of a 1x16 tile in registers, A and B in L1: each step loads two B vectors and a
    broadcast of A for 2 FMAs, one per accumulator, so the FMA latency chain binds (4 cycles), not the
    sum of loads, FMAs and loop trips."""
    c = AVX2.costs
    a = TensorSpec((1, 1, 64), DType.F32, row_major(), Level.L1)
    b = TensorSpec((1, 64, 16), DType.F32, row_major(), Level.L1)
    cc = TensorSpec((1, 1, 16), DType.F32, packed(2, 8), Level.VRF, 4, 8)
    impl = Search(FULL).best(canonicalize(Spec(Matmul(a, b, cc, accum=True, serial=True), FULL.limits())))
    (step,) = [n for n in walk(impl) if n.label() == "for k by 1"]
    assert step.cost == pytest.approx(64 * c.fma_latency), format_tree(impl, features=True)
    summed = sum(n.features.dot(c) * (64 if n is not step else 1) for n in walk(step))
    assert summed > 1.5 * step.cost  # the additive model's price


def test_transfers_overlap_the_core_but_not_the_l1_ports():
    """ECM: a body whose lines dominate costs its lines (plus the L1 loads that move them), not the sum
    with its FMAs; a body whose FMAs dominate costs its FMAs."""
    c = AVX2.costs
    lines = Features.of(gl_line=10, vec_fma=8, vec_load=2)
    assert _price(lines) == 10 * c.gl_line + 2 * c.vec_load < lines.dot(c)
    assert _price(Features.of(gl_line=1, vec_fma=40)) == 40 * c.vec_fma
    assert _price(Features.of(gl_line=1, vec_fma=40, hsum=1)) == 40 * c.vec_fma + c.hsum  # serial adds


def test_the_table_says_how_much_of_the_rest_the_core_hides():
    """overlap_percent: 100 hides all but the busiest class, 0 is the sum (the additive model), 50 between."""
    c = AVX2.costs
    step = Features.of(vec_fma=12, vec_load=8, gl_line=1)
    busiest, total = 8 * c.vec_load + c.gl_line, step.dot(c)
    for percent, price in ((100, busiest), (0, total), (50, (busiest + total) / 2)):
        table = dataclasses.replace(AVX2, costs=dataclasses.replace(c, overlap_percent=percent))
        assert _price(step, table) == pytest.approx(price)
    assert c.overlap_percent == 50


def test_a_packing_copy_is_a_phase_of_its_own():
    """A copy into an L1 buffer finishes before the body starts: its cost adds to the body's, while a
    view's lines overlap the body's FMAs. A loop's L2 refund reaches a copy's lines first."""
    c = AVX2.costs
    copy = cost.recost(Kernel(None, "copy", 0.0, features=Features.of(gl_line=4, copy_elem=64)), FULL)
    body = cost.recost(Kernel(None, "fma", 0.0, features=Features.of(vec_fma=200)), FULL)
    assert copy.cost == 4 * c.gl_line
    assert cost.combine(cost.ZERO, (copy, body), (1, 1), phases=(0,))[0] == copy.cost + body.cost
    assert cost.combine(cost.ZERO, (copy, body), (1, 1))[0] == body.cost  # not a phase: hidden
    assert cost.move_phases(False, Level.L1, True, False) == (0,)  # (load, body)
    assert cost.move_phases(False, Level.L1, False, True) == (1,)  # (body, store)
    assert cost.move_phases(False, Level.VRF, True, True) == ()  # registers: the body's instructions
    assert cost.move_phases(True, Level.L1, True, False) == ()  # a view copies nothing
    refund = cost.parts(Features.of(l2_reuse_line=2), c)
    _, p = cost.combine(refund, (copy, body), (1, 1), phases=(0,))
    assert p[cost.SERIAL] == copy.cost + 2 * c.l2_reuse_line and p[cost.TRANSFER] == 0


# -- one feature per surcharge ---------------------------------------------------------------------
def test_gl_short_run_counts_page_short_runs_a_loop_starts():
    """Weights read once (m = 1): a 256-column tile of them (of 1024), stepped 8 rows at a time, starts
    8 new runs of 512 bytes on each of its 8 trips."""
    spec = _spec("matmul 1x64x1024 a=f32 b=bf16 c=f32 accum")
    columns = canonicalize(Spec(tile_op(spec.op, (1, 1, 64, 256)), spec.limits))
    assert _loop_features(columns, (1, 1, 8, 256)).get("gl_short_run") == 8 * 8
    assert _loop_features(spec, (1, 1, 8, 1024)).get("gl_short_run") == 0  # whole rows: one dense run
    gemm = _spec("matmul 4x64x1024 a=f32 b=bf16 c=f32 accum")  # B reused by 4 rows: from the caches
    assert short_runs(gemm.op, (1, 4, 8, 256), (2, 3), 32, AVX2) == 0


def test_gl_short_run_counts_the_pieces_of_streams_the_prefetchers_lose():
    """Stepping n continues the body's runs, so each row of its tile is a stream: up to prefetch_streams (8)
    of them side by side count nothing; 64 rows of 256-byte pieces count every piece of every row."""
    spec = _spec("matmul 1x64x1024 a=f32 b=bf16 c=f32 accum")
    assert AVX2.costs.prefetch_streams == 8
    rows64 = canonicalize(Spec(tile_op(spec.op, (1, 1, 64, 256)), spec.limits))
    assert _loop_features(rows64, (1, 1, 64, 128)).get("gl_short_run") == 2 * 64
    rows8 = canonicalize(Spec(tile_op(spec.op, (1, 1, 8, 256)), spec.limits))
    assert _loop_features(rows8, (1, 1, 8, 128)).get("gl_short_run") == 0
    wide = _spec("matmul 1x64x8192 a=f32 b=bf16 c=f32 accum")  # pieces of a page: each is a run of its own
    assert _loop_features(wide, (1, 1, 64, 2048)).get("gl_short_run") == 0
    gemm = _spec("matmul 4x64x1024 a=f32 b=bf16 c=f32 accum")  # B reused by 4 rows: from the caches
    assert lost_streams(gemm.op, (1, 4, 64, 128), (3,), 8, AVX2) == 0


def test_gl_burst_line_counts_the_lines_of_each_rows_piece_past_the_burst():
    """Stepping n over 8 rows of K x N weights reads each trip's piece of each row in one burst: past
    stream_burst_bytes (256) its lines count, on every trip; a view of the rows in L1 (its loops read
    them from main memory as they go) counts the same; one row (one stream), more rows than the
    prefetchers follow (gl_short_run's), N x K weights and GEMM operands count none."""
    assert AVX2.costs.stream_burst_bytes == 256
    spec = _spec("matmul 1x64x1024 a=f32 b=bf16 c=f32 accum")
    rows8 = canonicalize(Spec(tile_op(spec.op, (1, 1, 8, 1024)), spec.limits))
    assert _loop_features(rows8, (1, 1, 8, 256)).get("gl_burst_line") == 4 * 8 * (512 - 256) / 64
    assert _loop_features(rows8, (1, 1, 8, 128)).get("gl_burst_line") == 0  # 256-byte pieces
    wide = _spec("matmul 1x64x4096 a=f32 b=bf16 c=f32 accum")  # a view of 8 rows' first 1024 columns
    part = canonicalize(Spec(tile_op(wide.op, (1, 1, 8, 1024)), wide.limits)).op
    view = part.with_operands((part.a, dataclasses.replace(part.b, level=Level.L1), part.c))
    assert _loop_features(Spec(view, wide.limits), (1, 1, 8, 256)).get("gl_burst_line") == 4 * 8 * 4
    row1 = canonicalize(Spec(tile_op(spec.op, (1, 1, 1, 1024)), spec.limits))
    assert _loop_features(row1, (1, 1, 1, 512)).get("gl_burst_line") == 0
    rows64 = canonicalize(Spec(tile_op(spec.op, (1, 1, 64, 1024)), spec.limits))
    assert _loop_features(rows64, (1, 1, 64, 512)).get("gl_burst_line") == 0
    cols = _spec("matmul 1x1024x64 a=f32 b=bf16:col c=f32 accum")
    assert _loop_features(cols, (1, 1, 1024, 8)).get("gl_burst_line") == 0
    gemm = _spec("matmul 4x64x1024 a=f32 b=bf16 c=f32 accum")  # B reused by 4 rows: from the caches
    assert long_bursts(gemm.op, (1, 4, 8, 256), (3,), 4, AVX2) == 0


def test_gl_interleaved_counts_lines_of_interleaved_streams():
    """A dot kernel reads 4 columns of B side by side from main memory: 4 streams."""
    spec = _spec("matmul 1x64x4 b=f32:col accum")
    op = spec.op
    c_rf = TensorSpec((1, 1, 4), DType.F32, row_major(), Level.RF)
    feats = BY_NAME["dot_f32"].cost(op.with_operands((op.a, op.b, c_rf)), AVX2)
    assert feats.get("gl_interleaved") == op.b.lines() and feats.get("gl_line") == op.a.lines() + op.b.lines()
    one = op.b.tile((1, 64, 1))
    assert view_features(op.b, streams=4) == Features.of(gl_line=op.b.lines(), gl_interleaved=op.b.lines())
    assert view_features(one) == Features.of(gl_line=one.lines())


def test_gl_two_streams_counts_one_column_of_each_of_the_pair():
    """The pair kernel reading one column of B1 beside one of B2: two streams of separate operands
    (gl_two_streams); two columns of each: four streams (gl_interleaved); two columns of one B: as before."""
    from morello_build.ir.spec import Pair

    op = _spec("matmul 1x64x2 b=f32:col accum").op
    rf = TensorSpec((1, 1, 1), DType.F32, row_major(), Level.RF)
    one = op.b.tile((1, 64, 1))
    feats = BY_NAME["dot_f32_pair"].cost(Pair(op.a, one, one, rf, rf), AVX2)
    assert (feats.get("gl_two_streams"), feats.get("gl_interleaved")) == (2 * one.lines(), 0)
    rf2 = TensorSpec((1, 1, 2), DType.F32, row_major(), Level.RF)
    feats = BY_NAME["dot_f32_pair"].cost(Pair(op.a, op.b, op.b, rf2, rf2), AVX2)
    assert (feats.get("gl_two_streams"), feats.get("gl_interleaved")) == (0, 2 * op.b.lines())
    feats = BY_NAME["dot_f32"].cost(op.with_operands((op.a, op.b, rf2)), AVX2)
    assert (feats.get("gl_two_streams"), feats.get("gl_interleaved")) == (0, op.b.lines())


def test_shared_line_counts_output_runs_of_parallel_tasks():
    """Column blocks of C share the edge lines of each row between the tasks; row blocks share none."""
    spec = _spec("matmul 64x64x64")
    columns = _loop_features(spec, (1, 64, 64, 32), parallel=True)
    rows = _loop_features(spec, (1, 32, 64, 64), parallel=True)
    # Two tasks of 64 (or 1) runs each, on two threads: each thread's share is one task.
    assert columns.get("shared_line") == 64 and rows.get("shared_line") == 1
    assert columns.get("parallel_setup") == 1 and columns.get("loop_iter") == 1
    c_tile = dataclasses.replace(
        spec, op=spec.op.with_operands((spec.op.a, spec.op.b.tile((1, 64, 32)), spec.op.c.tile((1, 64, 32))))
    )
    assert shared_lines(c_tile) == 64


def test_l2_reuse_counts_lines_later_trips_read_from_l2():
    """A loop over n re-reads the same A block: from L2 after the first trip."""
    spec = _spec("matmul 64x128x256 accum", AVX512)
    own = _loop_features(spec, (1, 64, 128, 64), target=AVX512)
    a_block = spec.op.a  # the loop does not index A: the whole of it, 4 trips
    assert own.get("l2_reuse_line") == 3 * a_block.lines()
    assert _loop_features(spec, (1, 64, 128, 64), parallel=True, target=AVX512).get("l2_reuse_line") == 0
    big = _spec("matmul 4096x128x256 accum", AVX512)  # does not fit in L2
    assert _loop_features(big, (1, 4096, 128, 64), target=AVX512).get("l2_reuse_line") == 0


def test_l1_reuse_counts_lines_later_trips_find_in_l1():
    """A loop whose trips' tiles fit in L1 together finds on later trips the lines earlier trips brought in:
    the inputs it does not index, the lines its trips' tiles share, and a split's output (loaded again),
    refunded down to L1's price, not L2's; but not the output of a GEMV, whose weights stream."""
    spec = _spec("matmul 32x32x32", AVX512)
    a, b, c = spec.op.a, spec.op.b, spec.op.c
    rows = _loop_features(spec, (1, 4, 32, 32), target=AVX512)  # 8 trips, each all of B
    assert rows.get("l1_reuse_line") == 7 * b.lines() and rows.get("l2_reuse_line") == 0
    split = _loop_features(spec, (1, 32, 2, 32), target=AVX512)  # 16 trips of 2 values of each A row
    # A: 16 trips x 32 rows' lines, 64 lines in all; B: 16 x 4 lines = its 64; C: loaded again
    assert split.get("l1_reuse_line") == (16 * 32 - a.lines()) + 15 * c.lines()
    assert split.get("l2_reuse_line") == 0
    gemv = _spec("matmul 1x256x1024 b=bf16", AVX512)  # K x N weights read once: C stays with L2's refund
    kxn = _loop_features(gemv, (1, 1, 4, 1024), target=AVX512)
    assert kxn.get("l1_reuse_line") == 64 - gemv.op.a.lines()  # A's line shared by 4 trips: still refunded
    assert kxn.get("l2_reuse_line") == 63 * gemv.op.c.lines()
    assert _loop_features(spec, (1, 4, 32, 32), parallel=True, target=AVX512).get("l1_reuse_line") == 0
    big = _spec("matmul 64x128x256 accum", AVX512)  # a trip's tiles fill more than half of L1: L2 reuse
    own = _loop_features(big, (1, 64, 128, 64), target=AVX512)
    assert own.get("l1_reuse_line") == 0 and own.get("l2_reuse_line") > 0


def test_a_copy_that_reads_its_source_at_a_stride_counts_gather_elements():
    """Interleaving A into evens and odds reads every other element: not vectorized, a gather element each;
    packing B's rows into panels reads along the rows: a vectorized copy."""
    a = TensorSpec((1, 1, 2048), DType.F32, row_major(3), Level.GL, 3)
    strips = interleaved(row_major(3), 2, 32)
    gather = BY_NAME["copy"].cost(Move(a, TensorSpec(a.shape, DType.F32, strips, Level.L1, len(strips.digits))), AVX512)
    assert gather.get("copy_gather_elem") == 2048 and gather.get("copy_elem") == 0
    b = TensorSpec((1, 64, 64), DType.F32, row_major(3), Level.GL, 3)
    panels = TensorSpec(b.shape, DType.F32, packed(2, 16), Level.L1, len(packed(2, 16).digits))
    plain = BY_NAME["copy"].cost(Move(b, panels), AVX512)
    assert plain.get("copy_elem") == 64 * 64 and plain.get("copy_gather_elem") == 0


def test_refunds_of_weights_read_as_streams_are_kept_apart():
    """Lines of B stored N x K, which the dot kernels may have read as one of several streams (at a stream
    adjustment that a calibration may make negative), are refunded as l1_reuse_stream_line, from the least
    line price; B stored K x N (and A, C) as l1_reuse_line, from gl_line, what the body charged them."""
    kxn = _loop_features(_spec("matmul 32x32x32", AVX512), (1, 4, 32, 32), target=AVX512)
    assert kxn.get("l1_reuse_line") == 7 * _spec("matmul 32x32x32").op.b.lines() and not kxn.get("l1_reuse_stream_line")
    nxk_spec = _spec("matmul 32x32x32 b=f32:col", AVX512)
    nxk = _loop_features(nxk_spec, (1, 4, 32, 32), target=AVX512)  # 8 trips of 4 rows, each all of B
    assert nxk.get("l1_reuse_stream_line") == 7 * nxk_spec.op.b.lines() and not nxk.get("l1_reuse_line")
    c = AVX512.costs
    assert c.l1_reuse_stream_line == c.l1_reuse_line  # the built-in table has no negative adjustment


def test_stride_classes_take_ways_and_save_no_l2_reuse():
    """Rows 4 KiB apart map to the same sets: a view of 6 takes 6 whole ways of L1 (6 x 4 KiB), 13
    evict each other; a block of 512 such rows does not stay in L2, so loops save none of its lines."""
    t = AVX512
    a = _spec("matmul 512x1024x256 accum", t).op.a
    six = a.tile((1, 6, 128)).canonical()
    assert six.alias == 4096 and view_footprint(six, t) == 6 * 4096
    assert not view_evicts(six, t) and view_evicts(a.tile((1, 13, 8)).canonical(), t)
    block = a.tile((1, 512, 128))
    assert l2_evicts(block, t) and not l2_evicts(a.tile((1, 64, 128)), t)
    spec = _spec("matmul 512x1024x256 accum", t)
    body = canonicalize(
        Spec(Matmul(block, spec.op.b.tile((1, 128, 64)), spec.op.c.tile((1, 512, 64)), True, True), spec.limits)
    )
    dense = canonicalize(Spec(dataclasses.replace(body.op, a=dataclasses.replace(body.op.a, alias=0)), spec.limits))
    assert l2_reuse_lines(body, (3,), 4, t) == (0, 0) and l2_reuse_lines(dense, (3,), 4, t) == (3 * block.lines(), 0)


def test_l2_stream_counts_lines_kernels_stream_from_l2_views():
    panel = TensorSpec((1, 64, 16), DType.F32, packed(2, 16), Level.L2, len(packed(2, 16).digits))
    assert lines_read(panel) == Features.of(l2_stream=panel.lines())
    assert lines_read(dataclasses.replace(panel, level=Level.GL)) == Features.of(gl_line=panel.lines())
    assert lines_read(dataclasses.replace(panel, level=Level.L1)) == Features.of()
    row = TensorSpec((1, 1, 16), DType.F32, row_major(), Level.L2)
    reg = TensorSpec((1, 1, 16), DType.F32, packed(2, 16), Level.VRF, 4, 16)
    assert BY_NAME["vload"].cost(Move(row, reg), AVX512) == Features.of(vec_load=1, l2_stream=1)
    assert view_features(panel) == Features.of(l2_line=panel.lines())  # a view of it, copied to L1


# -- the one rule ----------------------------------------------------------------------------------
def _check_rule(impl, target):
    for node in walk(impl):
        own = cost.parts(node.features, target.costs)
        priced = cost.overlap(node.parts, target.costs.hidden)
        assert node.cost == pytest.approx(priced, rel=1e-12), format_tree(node, features=True)
        phases, kids = cost.phases(node), list(enumerate(zip(cost.weights(node, target), node.children)))
        summed = [sum(w * c.parts[j] for i, (w, c) in kids if i not in phases) for j in range(len(cost.CLASSES))]
        serial = sum(w * c.cost for i, (w, c) in kids if i in phases)
        # The sum over classes: own + children's, each phase counted by its cost (a refund moves, never vanishes).
        total = sum(own) + sum(summed) + serial - own[cost.PHASED] - summed[cost.PHASED]
        assert sum(node.parts) - node.parts[cost.PHASED] == pytest.approx(total, rel=1e-9, abs=1e-6)
        again = cost.recost(node, target)
        assert again.cost == node.cost and again.parts == node.parts


@pytest.mark.parametrize("text", ["matmul 16x16x16", "matmul 1x64x40 b=bf16:col", "matmul 64x64x64"])
def test_every_cost_is_own_features_plus_weighted_children(text):
    impl = Search(AVX2).best(_spec(text))
    _check_rule(impl, AVX2)
    assert any(n.features for n in walk(impl))


def test_overwriting_programs_follow_the_rule():
    """A peeled split of k: the first slice's program is derived (no subtraction), its cost re-derived."""
    spec = _spec("matmul 6x64x16 serial")
    loop = Search(AVX2).apply(spec, Tile((1, 6, 16, 16)))
    assert loop is not None and loop.peeled and loop.regions[0].count == 1
    _check_rule(loop, AVX2)


def test_explain_features_adds_lines_and_nothing_else(capsys):
    from morello_build.tools.cli import main

    args = ["explain", "matmul 8x8x8 serial", "--db", "none", "--isa", "avx2"]
    assert main(args) == 0
    plain = capsys.readouterr().out.splitlines()[1:]  # the header has the time
    assert main(args + ["--features"]) == 0
    rich = capsys.readouterr().out.splitlines()[1:]
    assert [x for x in rich if not x.lstrip().startswith(("features: ", "by class: "))] == plain
    assert any("features: " in x and "added up: " in x for x in rich)
    by_class = [x for x in rich if x.lstrip().startswith("by class: ")]
    assert len(by_class) == len(plain) and all("; cost = " in x and "fma " in x for x in by_class[:1])


def test_a_transposing_copy_of_runs_in_one_l1_set_is_refused():
    """bf16 N x K weights with K = 2048: the columns are 4 KiB apart, all in one L1 set, so a copy that
    transposes 16 (or 8) of them side by side fetches every line again per element (4x2048x16384 on one
    Zen 3 thread: 124 ms against 13.8 for M = 1). Four columns, columns 5 KiB apart (K = 2560) and a copy
    that walks along the columns are fine."""
    from morello_build.synth.actions.move import COPY_ALIASES, MoveOperand

    def copy_b(text, layout):  # the refusal's code, if any (a whole-K panel may also need too much L1)
        return getattr(MoveOperand(1, Level.L1, layout, DType.F32).plan(_spec(text), AVX2), "code", None)

    for layout in (row_major(), packed(2, 8)):
        assert copy_b("matmul 4x2048x16 b=bf16:col", layout) == COPY_ALIASES.code
        assert copy_b("matmul 4x2560x16 b=bf16:col", layout) != COPY_ALIASES.code
    assert copy_b("matmul 4x2048x4 b=bf16:col", row_major()) != COPY_ALIASES.code
    b = _spec("matmul 4x2048x16 b=bf16:col").op.operands[1]
    along = TensorSpec(b.shape, DType.F32, b.layout, Level.L1)
    assert copy_live_runs(b, along) == 1 and not copy_thrashes(b, along, AVX2)
    assert copy_live_runs(b, TensorSpec(b.shape, DType.F32, row_major(), Level.L1)) == 16
