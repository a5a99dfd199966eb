"""Rewrites of a spec into smaller specs: tile, split, move, to-accumulate, select a kernel.

Each action module holds its legality: ``plan`` returns the sub-specs the action needs and a function
that assembles their Impls into its node, or a ``Refusal`` saying why it does not apply (the search
ignores refusals; the manual scheduling API reports them). ``policy`` decides which actions the search
offers. Each action writes itself as a short decision text for the DB (``encode``), and ``decode`` reads
one back.
"""

from morello_build.synth.actions.accum import Select, ToAccum
from morello_build.synth.actions.move import MoveOperand
from morello_build.synth.actions.pair import PairToAccum, SplitPair
from morello_build.synth.actions.plan import (
    Plan,
    Refusal,
    indexes_registers,
    loop_regions,
    respects_strips,
    rounds_partial_sums,
    tile_op,
)
from morello_build.synth.actions.policy import enumerate_actions
from morello_build.synth.actions.tile import Tile

ACTIONS = (Select, Tile, MoveOperand, ToAccum, PairToAccum, SplitPair)
_BY_TAG = {cls.TAG: cls for cls in ACTIONS}


def decode(text: str, op):
    """The action that ``action.encode(op)`` wrote as ``text``."""
    cls = _BY_TAG.get(text[:1])
    if cls is None:
        raise ValueError(f"unknown decision {text!r}")
    return cls.decode(text, op)


__all__ = [
    "ACTIONS",
    "MoveOperand",
    "PairToAccum",
    "Plan",
    "Refusal",
    "Select",
    "SplitPair",
    "Tile",
    "ToAccum",
    "decode",
    "enumerate_actions",
    "indexes_registers",
    "loop_regions",
    "respects_strips",
    "rounds_partial_sums",
    "tile_op",
]
