"""Programs that overwrite C, derived from programs that add to it.

A loop over k of a matmul that does not accumulate is *peeled*: its first slice must overwrite C, the
others add to it. Rather than search the overwriting slice as a spec of its own (which doubles the
search), it is derived from the accumulating slice's program: where that program loads C into
registers, the overwriting one zeroes the registers instead, and an inner loop over k is peeled in
turn. The derived nodes keep their own features, and their costs are derived again by the one rule
(cost.recost): the derived program saves the loads it drops.
"""

from __future__ import annotations

from dataclasses import replace

from morello_build.ir.impl import Accum, Kernel, Loop, MoveImpl, Region
from morello_build.ir.spec import Spec, Zero, canonicalize
from morello_build.synth.cost import NONE, recost


def overwriting(impl, target):
    """The program for ``impl``'s spec without accumulation, or None when there is no cheap derivation
    (C is never loaded into registers, e.g. a bare kernel node)."""
    if isinstance(impl, Loop):
        return _loop(impl, target)
    if isinstance(impl, MoveImpl):
        return _move(impl, target)
    return None


def _overwrite_spec(spec: Spec) -> Spec:
    return replace(spec, op=replace(spec.op, accum=False))


def overwriting_loop(loop: Loop, target):
    """``loop`` (over k, of a spec that does not accumulate, with accumulating slices) with its first
    slice peeled and overwriting C; None if that slice's program has no overwriting derivation."""
    return _peel_first_slice(loop, loop.spec, target)


def _peel_first_slice(loop: Loop, spec: Spec, target):
    if len(loop.dims) > 1:
        return None
    main, rest = loop.regions[0], loop.regions[1:]
    assert not any(main.remainder) and main.start == 0, "loop_regions lists the main tiles first"
    first = overwriting(main.body, target)
    if first is None:
        return None
    later = (replace(main, count=main.count - 1, start=1),) if main.count > 1 else ()
    regions = (Region(main.remainder, 1, main.shape, first),) + later + rest
    return recost(replace(loop, spec=spec, regions=regions), target)


def _loop(loop: Loop, target):
    op = loop.spec.op
    if loop.parallel or not op.accum:
        return None
    if any(d in op.reduction_dims for d in loop.dims):
        return _peel_first_slice(loop, _overwrite_spec(loop.spec), target)
    bodies = [overwriting(r.body, target) for r in loop.regions]
    if any(b is None for b in bodies):
        return None
    regions = tuple(replace(r, body=b) for r, b in zip(loop.regions, bodies))
    return recost(replace(loop, spec=_overwrite_spec(loop.spec), regions=regions), target)


def _move(move: MoveImpl, target):
    op = move.spec.op
    if move.operand not in op.outputs:
        body = overwriting(move.body, target)
        if body is None:
            return None
        return recost(replace(move, spec=_overwrite_spec(move.spec), body=body), target)
    if not move.buffer.level.is_register:
        return None
    zero = _zero_registers(move.body.spec, target)
    if zero is None:
        return None
    inner = move.body
    body = recost(Accum(_overwrite_spec(inner.spec), zero, inner, 0.0, inner.peaks, NONE), target)
    return recost(replace(move, spec=_overwrite_spec(move.spec), load=None, body=body), target)


def _zero_registers(spec: Spec, target):
    """The catalog kernel that zeroes the register tile of C: the first zero kernel of the target's
    catalog that applies, built as Select builds it (overwrite.py may not import the actions, whose
    Tile imports it)."""
    (out,) = spec.op.outputs
    zspec = canonicalize(Spec(Zero(spec.op.operands[out], serial=spec.op.serial), spec.limits))
    for k in target.kernels():
        if k.kind == "zero" and k.applies(zspec.op, target):
            return recost(Kernel(zspec, k.name, 0.0, features=k.cost(zspec.op, target)), target)
    return None
