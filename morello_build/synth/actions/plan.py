"""What an action returns (a Plan, or a Refusal saying why it does not apply), and the loop helpers that
actions and codegen share."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Callable

from morello_build.ir.spec import DType, Spec, canonical_operands, operand_tiles
from morello_build.synth.cost import ZERO, overlap, split_refund


@dataclass(frozen=True)
class Plan:
    subspecs: tuple[Spec, ...]
    build: Callable[[tuple], object]
    weights: tuple[float, ...] | None = None  # how often each sub-spec runs (per thread), for bounds
    own: tuple[float, ...] | None = None  # cost.parts of the node's own features, for bounds (None: zero)

    @property
    def run_weights(self) -> tuple[float, ...]:
        """How often each sub-spec runs (per thread): ``weights``, once each where not given."""
        return self.weights or (1.0,) * len(self.subspecs)

    def lower_bound(self, bound: Callable[[Spec], tuple], done: list[float] | None = None, start: int = 0) -> float:
        """A cost no program of this plan can beat: the overlap rule over its own parts, ``done`` (the
        parts of the children already built: those before ``start``) and the bounds of its sub-specs from
        ``start`` on (``bound``: the nonzero parts of cost.bound_parts as (class index, cycles) pairs, two at
        most: added in place, cheaper than a sum over every class for every plan the search meets), all of the
        rest hidden behind the busiest class (a table that hides less only adds).
        Children built as phases (cost.move_phases) cost at least as much as counted here. A loop's
        refund (its own negative transfer: the reuse refunds) is taken off the result, not off
        the transfers: cost.combine gives it to the serial cost of its children's phases first, where it
        counts in full, while a transfer that does not bind would count it at less."""
        total, refund = split_refund(self.own or ZERO)
        if done is not None:
            total = [o + d for o, d in zip(total, done)]
        weights = self.run_weights
        for i in range(start, len(self.subspecs)):
            w = weights[i]
            for j, x in bound(self.subspecs[i]):
                total[j] += w * x
        return overlap(total) + refund


@dataclass(frozen=True)
class Refusal:
    """Why an action does not apply to a spec. ``code`` names the rule (stable: tests and tools test it);
    ``reason`` says it in one line. The search meets thousands of refusals and reads none, so the reason
    is a constant or a template filled from ``args`` only when read. ``short_of``: (level, bytes) where the
    action needs more of a limited level's memory (spec.limit_index) than the spec's limits leave, None where
    the refusal does not depend on the limits (the search's memo keeps the range of limits its answers hold
    over by these: Search)."""

    code: str
    template: str
    args: tuple = ()
    short_of: tuple[int, int] | None = None

    @property
    def reason(self) -> str:
        return self.template.format(*self.args) if self.args else self.template

    def __str__(self) -> str:
        return self.reason

    def __call__(self, *args, short_of: tuple[int, int] | None = None) -> "Refusal":
        """This refusal with its template's blanks filled."""
        return Refusal(self.code, self.template, args, short_of)


# -- helpers ---------------------------------------------------------------------------------------
def respects_strips(op, tile) -> bool:
    """Tiles may not cut a packed or interleaved strip (the kernels handle a ragged final strip)."""
    full = op.iter_shape
    return not any(tile[j] < full[j] and tile[j] % strip for j, strip in _strips(op))


@lru_cache(maxsize=1 << 16)  # size: tile._loop_shape
def _strips(op) -> tuple[tuple[int, int], ...]:
    """(iteration dim, strip) of every operand dim whose strip is not 1 (a tile of any size respects a
    strip of 1); once per op: the search plans a dozen tiles of each op."""
    pairs = ((j, t.layout.strip(p)) for t, dims in zip(op.operands, op.operand_iter_dims) for p, j in enumerate(dims))
    return tuple((j, strip) for j, strip in pairs if strip != 1)


@lru_cache(maxsize=1 << 14)
def loop_regions(full, tile, dims) -> tuple:
    """(remainder flags, tile count, region shape) for main tiles and ragged ends of each dim; once per shape, tile
    and dims (ops of other dtypes and layouts share them)."""
    return tuple(_loop_regions(full, tile, dims))


def _loop_regions(full, tile, dims):
    per_dim = []
    for d in dims:
        q, r = divmod(full[d], tile[d])
        per_dim.append([x for x in ((False, q, tile[d]), (True, 1, r)) if x[1] and x[2]])
    for combo in itertools.product(*per_dim):
        shape = list(full)
        for d, (_, _, size) in zip(dims, combo):
            shape[d] = size
        yield tuple(c[0] for c in combo), prod(c[1] for c in combo), tuple(shape)


def tile_op(op, shape, accum: bool = False, canonical: bool = False):
    """The op on one tile of the iteration space (accumulating if ``accum``); serial, since loops never
    nest parallel loops. ``canonical``: its operands as ``canonical_op`` makes them, without forming the
    uncanonical tile op first."""
    tiles = operand_tiles(op, shape)
    body = op.with_operands(canonical_operands(op.kind, tiles) if canonical else tiles, serial=True)
    return body.accumulating() if accum and not body.accum else body


def canonical_body(op, shape, accum: bool = False):
    """``canonical_op(tile_op(op, shape, accum))``, the body of a loop as the memo keys it (the search forms a
    body for every region of every tile it plans)."""
    return tile_op(op, shape, accum, canonical=True)


def rounds_partial_sums(op) -> bool:
    """A split of k would round C's partial sums after every slice: C is bf16 in memory (accumulate in
    f32 registers instead)."""
    return any(op.operands[i].dtype == DType.BF16 and op.operands[i].level.has_memory_buffers for i in op.outputs)


def indexes_registers(op, dims) -> bool:
    """A loop over ``dims`` addresses a register buffer: codegen unrolls it (register indices must be
    compile-time constants), so its trips cost no loop overhead."""
    return any(
        t.level.is_register and any(d in dims for d in op.operand_iter_dims[i]) for i, t in enumerate(op.operands)
    )
