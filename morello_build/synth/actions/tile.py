"""Tile: loop over tiles of the iteration space (split: over slices of the reduction)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from morello_build.ir.formats import is_format
from morello_build.ir.impl import Loop, Region, max_peaks
from morello_build.ir.spec import Spec
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import (
    Plan,
    Refusal,
    canonical_body,
    indexes_registers,
    loop_regions,
    respects_strips,
    rounds_partial_sums,
)
from morello_build.synth.overwrite import overwriting_loop

BAD_TILE = Refusal("bad-tile", "tile {} must be between 1 and the iteration shape {} in each dim")
NOTHING_TO_LOOP = Refusal("nothing-to-loop", "the tile is the whole iteration space: nothing to loop over")
CUTS_STRIP = Refusal("cuts-strip", "it would cut a packed or interleaved strip")
SERIAL = Refusal("serial", "the spec is serial (inside a loop, or over registers): no parallel loop")
ROUNDS_PARTIAL_SUMS = Refusal(
    "rounds-partial-sums",
    "C is bf16 in memory, so every slice would round the partial sums to bf16; move C to registers first",
)
EPILOGUE_SPLIT = Refusal(
    "epilogue-split", "the epilogue needs the whole sum over k: move C to registers before splitting k"
)
CUTS_GROUP = Refusal(
    "cuts-group", "a k tile of {} values would cut the {}-value groups of B's {} format (tile k by multiples of it)"
)
PARALLEL_SPLIT = Refusal("parallel-split", "a parallel loop over k would race on C")
PEEL_TILES_K_ONLY = Refusal(
    "peel-tiles-k-only", "a loop over k of a spec that overwrites C peels its first slice, and tiles k alone"
)
PEEL_IN_REGISTERS = Refusal(
    "peel-in-registers", "C is in registers, where zeroing is free: apply to_accum before splitting k"
)
ONE_TILE = Refusal("one-tile", "a parallel loop needs at least 2 tiles")
# Found when the plan is built, not before: the first slice's program decides (see overwrite.py).
NO_OVERWRITING_SLICE = Refusal(
    "no-overwriting-slice",
    "the first slice must overwrite C, and the slices' program never loads C into "
    "registers, so no overwriting program derives from it; apply to_accum first",
)


@dataclass(frozen=True)
class Tile:
    """Loop over tiles of the iteration space (output dims: tile; reduction dims: split, with the first
    slice peeled when the op overwrites its output)."""

    tile: tuple[int, ...]
    parallel: bool = False

    TAG: ClassVar[str] = "T"

    def plan(self, spec: Spec, target) -> Plan | Refusal:
        loop_shape = _loop_shape(self, spec.op, target)
        if isinstance(loop_shape, Refusal):
            return loop_shape
        dims, peel, regions = loop_shape.dims, loop_shape.peel, loop_shape.regions
        weights, own_parts, own = loop_shape.weights, loop_shape.parts, loop_shape.own
        subspecs = tuple(Spec(op, spec.limits) for op in loop_shape.body_ops)
        contended = costmodel.contention(tuple(n for _, n, _ in regions), self.parallel, target)

        def build(bodies):
            regs = tuple(Region(rem, n, shape, b) for (rem, n, shape), b in zip(regions, bodies))
            c, parts = costmodel.combine(own_parts, bodies, weights, hidden=target.costs.hidden, contended=contended)
            peaks = max_peaks(*(b.peaks for b in bodies))
            loop = Loop(spec, dims, self.tile, self.parallel, regs, c, peaks, own, parts)
            return overwriting_loop(loop, target) if peel else loop

        return Plan(subspecs, build, weights, own_parts)

    def own_features(self, op, target):
        """The loop's own features on ``op`` (cost.loop_features, as plan() counts them), or a Refusal."""
        loop_shape = _loop_shape(self, op, target)
        return loop_shape if isinstance(loop_shape, Refusal) else loop_shape.own

    # -- serialization (DB decisions): T:<s|p>:<tile dims, F for the full extent> ---------------------
    def encode(self, op) -> str:
        """Relative to ``op``'s shape (F: the full extent), so one decision answers neighbouring shapes."""
        dims = ",".join("F" if t == f else str(t) for t, f in zip(self.tile, op.iter_shape))
        return f"T:{'p' if self.parallel else 's'}:{dims}"

    @classmethod
    def decode(cls, text: str, op) -> "Tile":
        _, par, dims = text.split(":")
        tile = tuple(f if d == "F" else int(d) for d, f in zip(dims.split(","), op.iter_shape))
        return cls(tile, parallel=par == "p")


def _cuts_group(op, tile) -> Refusal | None:
    """A k tile must hold whole groups (blocks) of a B weight format: main tiles are multiples of the group,
    so the rest of k is too (k is one, formats.k_problem); or single values (scalar loads address any)."""
    if tile[2] == 1:
        return None
    for t in op.operands:
        if is_format(t.dtype) and t.dtype.group > 1 and tile[2] % t.dtype.group:
            return CUTS_GROUP(tile[2], t.dtype.group, t.dtype.value)
        if is_format(t.dtype) and tile[2] % t.dtype.unit:
            return CUTS_GROUP(tile[2], t.dtype.unit, t.dtype.value)
    return None


@dataclass(frozen=True)
class _LoopShape:
    """What a Tile makes of an op, whatever the limits: its regions, their canonical body ops, its own
    features and weights (computed once per op and tile: the search plans each op under several limits)."""

    dims: tuple[int, ...]
    peel: bool
    regions: tuple
    body_ops: tuple
    own: costmodel.Features
    weights: tuple[float, ...]
    parts: tuple[float, ...]  # cost.parts of its own features


# Bounded: each entry keeps its body ops alive (memory). 2^16 entries, ~60 MB in a 512^3 search, hold what a search of
# a large spec revisits: four cpp_tests-sized searches in one process took 0.91x the CPU time of 2^12 (medians of 3
# interleaved pairs, Zen 3), as did the smaller caches per op below at the same size.
@lru_cache(maxsize=1 << 16)
def _loop_shape(tile: Tile, op, target) -> _LoopShape | Refusal:
    full = op.iter_shape
    if len(tile.tile) != len(full) or any(t < 1 or t > f for t, f in zip(tile.tile, full)):
        return BAD_TILE(tile.tile, full)
    dims = tuple(d for d, (t, f) in enumerate(zip(tile.tile, full)) if t < f)
    if not dims:
        return NOTHING_TO_LOOP
    if not respects_strips(op, tile.tile):
        return CUTS_STRIP
    if tile.parallel and op.serial:
        return SERIAL
    splits = any(d in op.reduction_dims for d in dims)
    if splits and op.epilogue:
        return EPILOGUE_SPLIT
    if splits and rounds_partial_sums(op):
        return ROUNDS_PARTIAL_SUMS
    if splits and tile.parallel:
        return PARALLEL_SPLIT
    if splits and (why := _cuts_group(op, tile.tile)):
        return why
    peel = not op.accum and splits
    if peel and len(dims) > 1:
        return PEEL_TILES_K_ONLY
    if peel and op.c.level.is_register:
        return PEEL_IN_REGISTERS  # zeroing registers is free: peeling saves only the zeroing of C in memory
    regions = loop_regions(full, tile.tile, dims)
    if tile.parallel and sum(r[1] for r in regions) < 2:
        return ONE_TILE
    # Parallel loops only at the outermost loop level: one inside a serial loop would pay its
    # setup every trip, so every loop makes its body serial (tile_op, canonical_body). A peeled loop's slices
    # accumulate; the first one's program is derived from theirs (overwrite.py).
    body_ops = tuple(canonical_body(op, shape, accum=peel) for _, _, shape in regions)
    counts = tuple(r[1] for r in regions)
    bodies = tuple(Spec(o) for o in body_ops)  # loop_features reads ops only, not limits
    own = costmodel.loop_features(
        op, bodies, counts, dims, tile.tile, tile.parallel, indexes_registers(op, dims), target
    )
    weights = costmodel.thread_weights(counts, tile.parallel, tuple(r[2] for r in regions), target)
    return _LoopShape(dims, peel, regions, body_ops, own, weights, costmodel.parts(own, target.costs))
