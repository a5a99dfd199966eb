"""Rewrites of a spec into smaller specs: tile, split, move, to-accumulate, select a kernel.

Each action's ``plan`` returns the sub-specs it needs and a function that assembles their Impls into
its node (or None when it does not apply). The search and the manual scheduling API share them;
``policy`` decides which of them the search offers.
"""
from morello_build.synth.actions.accum import Select, ToAccum
from morello_build.synth.actions.move import MoveOperand
from morello_build.synth.actions.plan import (
                                              Plan,
                                              indexes_registers,
                                              loop_regions,
                                              respects_strips,
                                              rounds_partial_sums,
                                              tile_op,
)
from morello_build.synth.actions.policy import enumerate_actions
from morello_build.synth.actions.tile import Tile

__all__ = [
    "MoveOperand", "Plan", "Select", "Tile", "ToAccum", "enumerate_actions", "indexes_registers",
    "loop_regions", "respects_strips", "rounds_partial_sums", "tile_op",
]
