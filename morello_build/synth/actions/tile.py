"""Tile: loop over tiles of the iteration space (split: over slices of the reduction)."""
from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir.impl import Loop, Region, max_peaks
from morello_build.ir.spec import Level, Spec, canonicalize
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import (
    Plan,
    indexes_registers,
    loop_regions,
    respects_strips,
    rounds_partial_sums,
    tile_op,
)
from morello_build.synth.overwrite import overwriting_loop


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

        counts = tuple(r[1] for r in regions)
        own = costmodel.loop_features(op, subspecs, counts, dims, self.tile, self.parallel,
                                      indexes_registers(op, dims), target)
        weights = costmodel.loop_weights(counts, self.parallel, target.cores)
        price = own.dot(target.costs)

        def build(bodies):
            regs = tuple(Region(rem, n, shape, b) for (rem, n, shape), b in zip(regions, bodies))
            c = costmodel.combine(price, bodies, weights)
            loop = Loop(spec, dims, self.tile, self.parallel, regs, c, max_peaks(*(b.peaks for b in bodies)), own)
            return overwriting_loop(loop, target) if peel else loop

        return Plan(subspecs, build, weights, price)


