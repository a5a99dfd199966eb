"""Rewrites of a spec into smaller specs: tile, split, move, to-accumulate, select a kernel.

Each action's ``plan`` returns the sub-specs it needs and a function that assembles their Impls into
its node (or None when it does not apply). The search and the manual scheduling API share them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from math import ceil, prod
from typing import Callable

from morello_build import cost as costmodel
from morello_build.impl import Accum, Kernel, Loop, MoveImpl, Region, add_peak, max_peaks
from morello_build.layout import Layout, interleaved, packed, row_major
from morello_build.overwrite import overwriting_loop
from morello_build.spec import (DType, Level, Matmul, MemoryLimits, Move, Spec, TensorSpec, Zero, canonicalize,
                                operand_tiles)
from morello_build.target.kernels import BY_NAME, columns_unit_stride, registers

CACHES = (Level.L2, Level.L1)  # levels whose buffers may be views of slower memory
L1_GRANULE = 4096  # L1 limits are kept in whole 4 KiB so that similar specs share memo entries


@dataclass(frozen=True)
class Plan:
    subspecs: tuple[Spec, ...]
    build: Callable[[tuple], object]
    weights: tuple[float, ...] | None = None  # how often each sub-spec runs (per core), for bounds
    credit: float = 0.0  # what the node's cost subtracts from its children's (L2 reuse), for bounds

    def lower_bound(self, bound: Callable[[Spec], float]) -> float:
        weights = self.weights or (1.0,) * len(self.subspecs)
        return sum(w * bound(s) for w, s in zip(weights, self.subspecs)) - self.credit


# -- helpers ---------------------------------------------------------------------------------------
def respects_strips(op, tile) -> bool:
    """Tiles may not cut a packed or interleaved strip (the kernels handle a ragged final strip)."""
    full = op.iter_shape
    for t, dims in zip(op.operands, op.operand_iter_dims):
        for p, j in enumerate(dims):
            if tile[j] < full[j] and tile[j] % t.layout.strip(p):
                return False
    return True


def loop_regions(full, tile, dims):
    """(remainder flags, tile count, region shape) for main tiles and ragged ends of each dim."""
    per_dim = []
    for d in dims:
        q, r = divmod(full[d], tile[d])
        per_dim.append([x for x in ((False, q, tile[d]), (True, 1, r)) if x[1] and x[2]])
    for combo in itertools.product(*per_dim):
        shape = list(full)
        for d, (_, _, size) in zip(dims, combo):
            shape[d] = size
        yield tuple(c[0] for c in combo), prod(c[1] for c in combo), tuple(shape)


def tile_op(op, shape, accum: bool = False):
    """The op on one tile of the iteration space (accumulating if ``accum``); serial, since loops never
    nest parallel loops."""
    body = op.with_operands(operand_tiles(op, shape), serial=True)
    return replace(body, accum=True) if accum and not body.accum else body


def rounds_partial_sums(op) -> bool:
    """A split of k would round C's partial sums after every slice: C is bf16 in memory (accumulate in
    f32 registers instead)."""
    return op.c.dtype == DType.BF16 and op.c.level in (Level.GL, Level.L1)


def round_limits(limits: MemoryLimits) -> MemoryLimits:
    return replace(limits, l1=limits.l1 - limits.l1 % L1_GRANULE)


def indexes_registers(op, dims) -> bool:
    """A loop over ``dims`` addresses a register buffer: codegen unrolls it (register indices must be
    compile-time constants), so its trips cost no loop overhead."""
    return any(
        t.level in (Level.VRF, Level.RF) and any(d in dims for d in op.operand_iter_dims[i])
        for i, t in enumerate(op.operands)
    )


# -- actions ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tile:
    """Loop over tiles of the iteration space (output dims: tile; reduction dims: split, with the first
    slice peeled when the op overwrites its output)."""

    tile: tuple[int, ...]
    parallel: bool = False

    def plan(self, spec: Spec, target) -> Plan | None:
        op, full = spec.op, spec.op.iter_shape
        dims = tuple(d for d, (t, f) in enumerate(zip(self.tile, full)) if t < f)
        if not dims or any(t < 1 for t in self.tile) or not respects_strips(op, self.tile):
            return None
        splits = any(d in op.reduction_dims for d in dims)
        if splits and rounds_partial_sums(op):
            return None
        peel = not op.accum and splits
        if peel and (self.parallel or len(dims) > 1 or op.c.level in (Level.VRF, Level.RF)):
            return None  # zeroing registers is free: peeling saves only the zeroing of C in memory
        regions = list(loop_regions(full, self.tile, dims))
        if self.parallel and sum(r[1] for r in regions) < 2:
            return None
        # Parallel loops only at the outermost loop level: one inside a serial loop would pay its
        # setup every trip, so every loop makes its body serial (tile_op). A peeled loop's slices
        # accumulate; the first one's program is derived from theirs (overwrite.py).
        subspecs = tuple(
            canonicalize(Spec(tile_op(op, shape, accum=peel), spec.limits)) for _, _, shape in regions
        )

        tiles = sum(r[1] for r in regions)
        reuse = 0.0 if self.parallel else costmodel.l2_reuse_credit(subspecs[0], dims, tiles, target)
        runs = costmodel.short_runs_cost(op, self.tile, dims, tiles, target)

        def build(bodies):
            regs = tuple(Region(rem, n, shape, b) for (rem, n, shape), b in zip(regions, bodies))
            c = costmodel.loop_cost(regs, self.parallel, target, unrolled=indexes_registers(op, dims)) - reuse + runs
            loop = Loop(spec, dims, self.tile, self.parallel, regs, c, max_peaks(*(b.peaks for b in bodies)))
            return overwriting_loop(loop, target) if peel else loop

        share = ceil(tiles / min(target.cores, tiles)) / tiles if self.parallel else 1.0
        return Plan(subspecs, build, tuple(r[1] * share for r in regions), reuse)


@dataclass(frozen=True)
class MoveOperand:
    """Give one operand a new buffer at ``level``. With no layout or dtype change, L2 and L1 buffers are
    cache views (the data, now cache-resident; L2 views only of dense tiles); a layout at GL makes a
    scratch block (a dense copy in main memory, at most ``target.scratch_bytes``)."""

    operand: int
    level: Level
    layout: Layout | None = None  # None: keep the operand's layout (a view, or registers)
    dtype: DType | None = None

    def buffer(self, t: TensorSpec, target) -> TensorSpec:
        if self.level in CACHES and self.layout is None and self.dtype in (None, t.dtype):
            return replace(t, level=self.level)
        layout = self.layout or (packed(2, target.lanes) if self.level == Level.VRF else row_major())
        vs = target.lanes if self.level == Level.VRF else None
        dtype = DType.F32 if self.level in (Level.VRF, Level.RF) else (self.dtype or t.dtype)
        return TensorSpec(t.shape, dtype, layout, self.level, len(layout.digits), vs)

    @staticmethod
    def is_view(t: TensorSpec, buf: TensorSpec) -> bool:
        """Whether moving ``t`` into ``buf`` only relabels memory data as cache-resident (no copy)."""
        return (
            buf.layout == t.layout and buf.dtype == t.dtype and buf.level in CACHES
            and t.level in (Level.GL, Level.L2) and t.level < buf.level
        )

    def buffer_bytes(self, buf: TensorSpec, target) -> int:
        if buf.level == Level.VRF:
            return registers(buf, target) * target.vector_bytes
        if buf.level == Level.L1:  # a view keeps its source's stride class (new buffers are dense)
            return costmodel.view_footprint(buf, target)
        return buf.bytes

    def refusal(self, t: TensorSpec, buf: TensorSpec, target) -> str | None:
        """Why this buffer is never worth it, whatever the limits (None: it may be)."""
        view = self.is_view(t, buf)
        if buf.level == Level.L2 and not view:
            return "L2 holds views only (copies go to L1, or to GL as a scratch block)"
        if buf.level == Level.L2 and t.runs() > 1:
            return f"an L2 view of {t.runs()} strided runs is not modelled; pack it"
        if buf.level == Level.L2 and not costmodel.fits_l2(t, target):
            return f"an L2 view holds at most {target.l2_block_bytes} bytes, this one {t.bytes}"
        if view and costmodel.view_evicts(t, target):
            if t.alias:
                return f"a cache view of its {t.runs()} rows {t.alias} bytes apart would evict itself or the L1 buffers; pack it"
            return f"a cache view of its {t.runs()} strided runs (more than the {target.l1_ways} L1 ways) could evict itself; pack it"
        if buf.level == Level.GL and buf.bytes > target.scratch_bytes:
            return f"a scratch block holds at most {target.scratch_bytes} bytes, this one {buf.bytes}"
        if not view and buf.level in (Level.GL, Level.L1) and buf.layout == t.layout and buf.dtype == t.dtype and (
            buf.level == Level.L1 or t.runs() == 1
        ):
            return "the copy would change nothing (same layout and dtype)"
        return None

    def view_streams(self, op, t: TensorSpec) -> int:
        """How many interleaved streams the body's first reads of a view make: a B stored N×K is only read
        by the dot kernels, a column per stream side by side (so a view is no way around their cost)."""
        if isinstance(op, Matmul) and self.operand == 1 and t.shape[1] > 1 and columns_unit_stride(t):
            return t.shape[2]
        return 1

    def goes_faster(self, t: TensorSpec) -> bool:
        """Moves go to faster levels, except a new layout in main memory or L1 (a repacking copy)."""
        repack = self.layout is not None and t.level == self.level and t.level in (Level.GL, Level.L1)
        return t.level < self.level or repack

    def plan(self, spec: Spec, target) -> Plan | None:
        op, i = spec.op, self.operand
        t = op.operands[i]
        if not self.goes_faster(t):
            return None
        if self.level == Level.VRF and target.lanes == 0:
            return None
        buf = self.buffer(t, target)
        if self.refusal(t, buf, target) is not None:
            return None
        view = self.is_view(t, buf)
        nbytes = self.buffer_bytes(buf, target)
        limits = spec.limits.minus(self.level, nbytes)
        if limits is None:
            return None
        # No rounding of the L1 left (round_limits): the memo reuses a program for any limits above its
        # peaks, which is only sound if feasibility depends on peaks alone (see test_search's memo tests).
        # Registers belong to one thread: a body working on a register buffer must be serial.
        serial = True if self.level in (Level.VRF, Level.RF) else None
        inner = canonicalize(replace(spec, op=op.with_operands(
            tuple(buf if j == i else u for j, u in enumerate(op.operands)), serial=serial), limits=limits))
        is_output = i in op.outputs
        load = store = None
        if not view:
            if not is_output or op.accum:
                load = canonicalize(Spec(Move(t, buf, serial=op.serial), limits))
            if is_output:
                store = canonicalize(Spec(Move(buf, t, serial=op.serial), limits))
        subspecs = tuple(s for s in (load, inner, store) if s is not None)

        def build(impls):
            it = iter(impls)
            li = next(it) if load else None
            body = next(it)
            si = next(it) if store else None
            parts = [x for x in (li, body, si) if x is not None]
            c = sum(p.cost for p in parts) + (costmodel.view_cost(t, target, self.view_streams(op, t)) if view else 0.0)
            peaks = add_peak(max_peaks(*(p.peaks for p in parts)), self.level, nbytes)
            return MoveImpl(spec, i, buf, view, li, body, si, c, peaks)

        return Plan(subspecs, build)


@dataclass(frozen=True)
class ToAccum:
    """C = A·B  becomes  C = 0; C += A·B."""

    def plan(self, spec: Spec, target) -> Plan | None:
        op = spec.op
        if not isinstance(op, Matmul) or op.accum:
            return None
        zero = canonicalize(Spec(Zero(op.c, serial=op.serial), spec.limits))
        body = canonicalize(replace(spec, op=replace(op, accum=True)))

        def build(impls):
            z, b = impls
            return Accum(spec, z, b, z.cost + b.cost, max_peaks(z.peaks, b.peaks))

        return Plan((zero, body), build)


@dataclass(frozen=True)
class Select:
    """Implement the spec with a catalog microkernel."""

    kernel: str

    def plan(self, spec: Spec, target) -> Plan | None:
        k = BY_NAME.get(self.kernel)
        if k is None or k.kind != spec.op.kind or not k.features <= target.features:
            return None
        if not k.applies(spec.op, target):
            return None
        return Plan((), lambda _: Kernel(spec, k.name, k.cost(spec.op, target)))


# -- enumeration for the search --------------------------------------------------------------------
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
    is_output = i in op.outputs
    opts = []
    if t.level == Level.GL and not is_output:
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
        if i == 0 and w and op.b.dtype == DType.BF16 and op.iter_shape[2] > 1:
            opts.append(MoveOperand(i, Level.L1, interleaved(row_major(), 2, 2 * w), DType.F32))
        if i == 0 and _worth_a_block(op, target):
            # GotoBLAS's A block: rows of a stride class evict each other in L2 (and L1); a dense copy in
            # main memory (L2-resident) lets the loops around it reuse the block (B is packed per panel).
            opts.append(MoveOperand(i, Level.GL, row_major()))
        if i == 1 and w and _worth_b_panels(op, target):
            opts.append(MoveOperand(i, Level.GL, packed(2, w)))
    if t.level in (Level.GL, Level.L2, Level.L1):
        if target.lanes and (is_output or (i == 1 and isinstance(op, Matmul) and op.iter_shape[2] == 1)):
            opts.append(MoveOperand(i, Level.VRF))
        if t.volume * 4 <= target.limits().rf and (is_output or t.volume == 1):
            opts.append(MoveOperand(i, Level.RF))
    return opts


def _worth_an_l2_view(op, target) -> bool:
    """A dense tile of B in panels of W columns (see _worth_b_panels), too big to sit in L1 beside the
    other operands (over half of it), that fits an L2 block: the kernels read each panel as one
    sequential stream, which the L1 prefetcher fetches ahead from L2 (k x 64 with k of 256 or more).
    Only where the rows of A reuse it more than one register tile can hold (the view is for the loop
    over them): views for fewer rows would add subtrees to the search that never win."""
    b = op.b
    return (
        b.runs() == 1 and b.layout.strip(2) >= target.lanes > 0 and op.iter_shape[1] > max(target.accumulator_rows, default=0)
        and target.l1_bytes // 2 < b.bytes and costmodel.fits_l2(b, target)
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
        costmodel.l2_evicts(a, target) and target.l2_block_bytes // 4 <= a.bytes <= target.l2_block_bytes
        and n >= m and b.level == Level.GL and not b.alias and b.layout.strip(2) == 1
    )


def _worth_b_panels(op, target) -> bool:
    """Whether to offer GotoBLAS's packed B: one k slice of B (rows of a stride class) copied once into
    panels of W columns, larger than an L2 block but within the scratch budget, and read by at least
    two A blocks (A's slice is larger than an L2 block). Its panels are dense: kernels stream them from
    L2 views (see _worth_an_l2_view)."""
    a, b = op.a, op.b
    return (
        costmodel.l2_evicts(b, target) and target.l2_block_bytes < b.bytes <= target.scratch_bytes
        and a.bytes > target.l2_block_bytes
    )


def enumerate_actions(spec: Spec, target):
    op = spec.op
    for k in target.kernels():
        if k.kind == op.kind:
            yield Select(k.name)
    full = op.iter_shape
    if isinstance(op, Matmul):
        if not op.accum:
            yield ToAccum()
            if op.c.level in (Level.VRF, Level.RF):
                return  # zeroing registers is free: the accumulating spec's programs are as good
        out_dims = (0, 1, 3)
        for tile in _tiles_one_dim(full, out_dims, {1: target.accumulator_rows}):
            yield Tile(tile)
        if not op.serial and target.cores > 1:
            for tile in _parallel_tiles(full, out_dims):
                yield Tile(tile, parallel=True)
        for tile in _tiles_one_dim(full, (2,)):  # peeled when the op does not accumulate
            yield Tile(tile)
        for i in range(3):
            yield from _move_options(op, i, target)
    else:
        for tile in _tiles_one_dim(full, (0, 1, 2)):
            yield Tile(tile)
