"""Search policy: which actions the search offers for a spec (data, not a free-for-all, to bound it)."""

from __future__ import annotations

import itertools
from functools import lru_cache

from morello_build.ir import aquant
from morello_build.ir.layout import interleaved, packed, row_major
from morello_build.ir.spec import DType, Level, Matmul, Spec
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.accum import Select, ToAccum
from morello_build.synth.actions.move import MoveOperand
from morello_build.synth.actions.pair import PairToAccum, SplitPair
from morello_build.synth.actions.tile import Tile
from morello_build.target.kernels import columns_unit_stride
from morello_build.target.kernels.quant_lut import offers_interleaved_a
from morello_build.target.kernels.rows import MAX_ROWS


def _pow2_below(n: int):
    p = 1
    while p < n:
        yield p
        p *= 2


def _tiles_one_dim(full, dims, extra=None):
    """Powers of two below the full size; ``extra`` maps a dim to more sizes (register-tile rows)."""
    for d in dims:
        sizes = sorted(set(_pow2_below(full[d])) | {s for s in (extra or {}).get(d, ()) if s < full[d]})
        for size in sizes:
            yield tuple(size if j == d else f for j, f in enumerate(full))


def _parallel_tiles(full, dims):
    yield from _tiles_one_dim(full, dims)
    for d1, d2 in itertools.combinations(dims, 2):
        for s1 in _pow2_below(full[d1]):
            for s2 in _pow2_below(full[d2]):
                yield tuple(s1 if j == d1 else s2 if j == d2 else f for j, f in enumerate(full))


def _move_options(op, i, target):
    """Which buffers are worth trying for operand i (data, not a free-for-all, to bound the search)."""
    t = op.operands[i]
    if i == 0 and aquant.is_quantized_a(t.dtype):
        return _quantizing_moves(t)
    is_output = i in op.outputs
    opts = []
    if t.level == Level.GL and not is_output and _view_pays(op, i):
        opts.append(MoveOperand(i, Level.L1))  # cache view (L2 views are streamed: see _worth_an_l2_view)
    if i == 1 and t.level == Level.GL and isinstance(op, Matmul) and _worth_an_l2_view(op, target):
        opts.append(MoveOperand(i, Level.L2))
    # Packing copies read from main memory only: copying a copy (or a view) again never pays.
    if isinstance(op, Matmul) and not is_output and t.level == Level.GL:
        if t.dtype == DType.BF16:
            opts.append(MoveOperand(i, Level.L1, row_major(), DType.F32))
        w = target.lanes
        if i == 1 and w and op.iter_shape[3] > w:
            opts.append(MoveOperand(i, Level.L1, packed(2, w), DType.F32))
        if i == 0 and w and (op.b.dtype == DType.BF16 and op.iter_shape[2] > 1 or offers_interleaved_a(op, target)):
            opts.append(MoveOperand(i, Level.L1, interleaved(row_major(), 2, 2 * w), DType.F32))
        if i == 0 and _worth_a_block(op, target):
            # GotoBLAS's A block: rows of a stride class evict each other in L2 (and L1); a dense copy in
            # main memory (L2-resident) lets the loops around it reuse the block (B is packed per panel).
            opts.append(MoveOperand(i, Level.GL, row_major()))
        if i == 1 and w and _worth_b_panels(op, target):
            opts.append(MoveOperand(i, Level.GL, packed(2, w)))
    if t.level.is_memory:
        if target.lanes and (is_output or (i == 1 and isinstance(op, Matmul) and op.iter_shape[2] == 1)):
            opts.append(MoveOperand(i, Level.VRF))
        if t.volume * 4 <= target.limits().rf and (is_output or t.volume == 1):
            opts.append(MoveOperand(i, Level.RF))
    return opts


def _view_pays(op, i) -> bool:
    """Whether a cache view of operand i may pay. Not for the B stored N x K of a GEMV or of a small batch
    (the rows kernels' M = 2..8): its columns are read once, by the dot kernels only (move.view_streams),
    so the view would only hide from them that B streams from main memory, which they prefetch ahead."""
    return not (isinstance(op, Matmul) and i == 1 and _small_batch_of_columns(op))


def _small_batch_of_columns(op) -> bool:
    """A GEMV or small batch (the rows kernels' M <= 8) whose B (or B1) is stored N x K: columns along K."""
    return op.iter_shape[1] <= MAX_ROWS and columns_unit_stride(op.operands[1])


def _quantizing_moves(a) -> list:
    """aquant=i8 (ir/aquant.py): A is only ever read through its quantized copy, in an L1 buffer or in a
    scratch block (where it outgrows L1); the search places the copy (outside the loop over N, ideally)."""
    if a.level != Level.GL:
        return []
    return [MoveOperand(0, Level.L1, row_major(), aquant.Q8A), MoveOperand(0, Level.GL, row_major(), aquant.Q8A)]


def _worth_an_l2_view(op, target) -> bool:
    """A dense tile of B in panels of W columns (see _worth_b_panels), too big to sit in L1 beside the
    other operands (over half of it), that fits an L2 block: the kernels read each panel as one
    sequential stream, which the L1 prefetcher fetches ahead from L2 (k x 64 with k of 256 or more).
    Only where the rows of A reuse it more than one register tile can hold (the view is for the loop
    over them): views for fewer rows would add subtrees to the search that never win."""
    b = op.b
    return (
        b.runs() == 1
        and b.layout.strip(2) >= target.lanes > 0
        and op.iter_shape[1] > max(target.accumulator_rows, default=0)
        and target.l1_bytes // 2 < b.bytes
        and costmodel.fits_l2(b, target)
    )


def _worth_a_block(op, target) -> bool:
    """Whether to offer a scratch copy of A: its rows evict each other in L2, it fills a quarter to all
    of an L2 block (smaller blocks waste L2), and the columns of C reuse it at least as often as it has
    rows (the copy costs a pass over the block). Only while B is in main memory as the caller stored it,
    without a stride class: an aliased B gets panels instead (_worth_b_panels), whose loops stream A.
    Offering both, or A blocks under the panels, doubled the search of 1024^3 (45,580 specs instead of
    23,139) for the same program: each offer is a subtree of the search."""
    a, b, (_, m, _, n) = op.a, op.b, op.iter_shape
    return (
        costmodel.l2_evicts(a, target)
        and target.l2_block_bytes // 4 <= a.bytes <= target.l2_block_bytes
        and n >= m
        and b.level == Level.GL
        and not b.alias
        and b.layout.strip(2) == 1
    )


def _worth_b_panels(op, target) -> bool:
    """Whether to offer GotoBLAS's packed B: one k slice of B (rows of a stride class) copied once into
    panels of W columns, larger than an L2 block but within the scratch budget, and read by at least
    two A blocks (A's slice is larger than an L2 block). Its panels are dense: kernels stream them from
    L2 views (see _worth_an_l2_view)."""
    a, b = op.a, op.b
    return (
        costmodel.l2_evicts(b, target)
        and target.l2_block_bytes < b.bytes <= target.scratch_bytes
        and a.bytes > target.l2_block_bytes
    )


def enumerate_actions(spec: Spec, target) -> tuple:
    """The actions the search tries for ``spec``, in tie-break order (they depend on its op only)."""
    return _offered(spec.op, target)


@lru_cache(maxsize=1 << 16)  # the search meets each op under several limits (size: tile._loop_shape)
def _offered(op, target) -> tuple:
    return tuple(_actions(op, target))


def _actions(op, target):
    # Only the kernels that implement the op: a refused Select would be planned again under every limits the
    # search meets the op with (three in five of the actions it planned for 7x13x29 on AVX2).
    yield from (s for s in _selects(op.kind, target) if s.refusal(op, target) is None)
    full = op.iter_shape
    if isinstance(op, Matmul):
        if not op.accum and not op.epilogue:
            yield ToAccum()
            if op.c.level.is_register:
                return  # zeroing registers is free: the accumulating spec's programs are as good
        yield from _output_tiles(op, full, target)
        if not op.epilogue:  # an epilogue needs the whole sum (tile.EPILOGUE_SPLIT)
            yield from _k_splits(full)  # peeled when the op does not accumulate
        for i in range(3):
            yield from _move_options(op, i, target)
    elif op.kind == "gated":
        yield from _gated_actions(op, full, target)
    elif op.kind == "pair":
        yield SplitPair()
        if op.c1.level.is_memory:
            return  # accumulators in L1: each matmul tiles itself (tiling both first only multiplied the search)
        yield from (Tile(tile) for tile in _tiles_one_dim(full, (0, 1, 3, 2)))
        if op.a.level == Level.GL:
            yield MoveOperand(0, Level.L1)
    else:
        for tile in _tiles_one_dim(full, (0, 1, 2)):
            yield Tile(tile)
        if op.kind == "gate" and target.lanes:  # accumulators in L1 (PairToAccum) come to registers to be gated
            yield from (MoveOperand(i, Level.VRF) for i in (0, 1) if op.operands[i].level.is_memory)


@lru_cache(maxsize=64)
def _selects(kind: str, target) -> tuple:
    """A Select of each of the target's kernels for ops of ``kind``, in catalog order (once per target:
    the search meets thousands of ops, and filtering the whole catalog for each showed in profiles)."""
    return tuple(Select(k.name) for k in target.kernels() if k.kind == kind)


def _output_tiles(op, full, target):
    """Loops over a matmul's (or gated pair's) output dims (batch, m, n): serial tiles, with the register
    tile's rows among m's sizes and, for the small batches of the rows kernels, 3 among n's (A's chunk
    loaded once for 3 columns: Mx2048x16384 from DRAM, Zen 4, 1 thread, against 2 columns: bf16 M = 4
    4.41 -> 3.72 ms, M = 8 7.6 -> 6.65, f16 M = 4 4.36 -> 3.60, q8_0 4.15 -> 3.65; 4 columns lose to
    the register budget), and parallel ones unless the spec is serial."""
    rows_kernels = _small_batch_of_columns(op) and full[2] > 1 and op.operands[1].level == Level.GL
    return _loops_over_outputs(full, target.accumulator_rows, rows_kernels, not op.serial and target.threads > 1)


# The loops depend on the iteration shape only (and the register tiles' rows): ops of one shape share them (the
# search meets each op once or twice, but many ops of each shape: its operands' levels and layouts vary).
@lru_cache(maxsize=1 << 12)
def _loops_over_outputs(full, rows: tuple[int, ...], three_columns: bool, parallel: bool) -> tuple[Tile, ...]:
    """_output_tiles' loops: serial ones over each output dim, then parallel ones over one or two."""
    out_dims = (0, 1, 3)
    extra = {1: rows, 3: (3,) if three_columns else ()}
    serial = tuple(Tile(tile) for tile in _tiles_one_dim(full, out_dims, extra))
    return serial + tuple(Tile(tile, parallel=True) for tile in _parallel_tiles(full, out_dims)) if parallel else serial


@lru_cache(maxsize=1 << 12)
def _k_splits(full) -> tuple[Tile, ...]:
    """Loops over slices of k (powers of two below it), as _loops_over_outputs for the output dims."""
    return tuple(Tile(tile) for tile in _tiles_one_dim(full, (2,)))


def _gated_actions(op, full, target):
    """The gated pair: its accumulators in registers where C's tile fits them, or in L1 tiles that each
    matmul fills with its own kernels (small batches, 4x2560x10240 from DRAM, Zen 4, 1 thread: bf16 7.9 ->
    6.4 ms, f16 8.3 -> 6.3, q4_0 aquant 8.2 -> 2.8; M = 1 alike), loops over the output (not over k: the
    gate needs whole sums), and A's buffers as for a matmul with B1."""
    if target.lanes:
        yield PairToAccum(Level.VRF)
    if op.c.volume * 4 * 2 <= target.limits().rf:
        yield PairToAccum(Level.RF)
    yield PairToAccum(Level.L1)
    yield from _output_tiles(op, full, target)
    yield from _move_options(Matmul(op.a, op.b1, op.c, serial=op.serial), 0, target)  # A: as for A·B1
