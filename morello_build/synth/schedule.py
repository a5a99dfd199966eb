"""Manual scheduling: pin the outer levels of a program yourself and let the search do the rest.

Each function applies one action (the same rewrites the search uses, ``synth/actions/``) to a spec and
returns the Impl node. Its *main child* (the loop body for the main tiles, the body of a move, the
accumulating body of ``to_accum``) is built by ``body(child_spec)`` when ``body`` is given, and by
synthesis otherwise; every other child (ragged-end regions of a loop, the load and store of a move, the
zeroing of ``to_accum``) is synthesized. An action that does not apply raises ``ValueError`` with the
action's own reason (its ``Refusal``); bad arguments (an unknown operand, level, kernel...) raise it too.

Example: a parallel loop over 2 x 32 output tiles, B packed in L1 in panels of 16 (widened from bf16),
and the rest synthesized::

    from morello_build.synth import schedule as S
    from morello_build.target import get_target

    t = get_target("avx512")
    spec = S.to_spec("matmul 4x64x64 b=bf16:col", t)
    impl = S.tile_out(spec, (2, 32), parallel=True, target=t,
                      body=lambda s: S.move(s, "b", "L1", layout=S.packed(2, 16), dtype="f32", target=t))
    print(format_tree(impl))          # morello_build.ir.impl.format_tree

``spec`` may be a ``Spec``, a spec string or a ``UserSpec`` (placed at main memory with the target's
limits); ``target`` a ``Target`` or an ISA name.
"""

from __future__ import annotations

from typing import Callable

from morello_build.ir.grammar import UserSpec, parse_spec
from morello_build.ir.layout import Layout, col_major, interleaved, packed, row_major  # noqa: F401 (re-exported)
from morello_build.ir.spec import DType, Level, Spec, canonicalize
from morello_build.synth.actions import (
    MoveOperand,
    Plan,
    Refusal,
    Select,
    Tile,
    ToAccum,
)
from morello_build.synth.actions.tile import NO_OVERWRITING_SLICE
from morello_build.synth.search import NoProgram, Search
from morello_build.target import Target, get_target

Builder = Callable[[Spec], object]

__all__ = [
    "to_spec",
    "tile_out",
    "split",
    "move",
    "to_accum",
    "select",
    "synthesize",
    "packed",
    "interleaved",
    "row_major",
    "col_major",
    "clear_cache",
]

_SEARCHES: dict[Target, Search] = {}


def clear_cache() -> None:
    """Forget the programs synthesized so far (one memo per target is kept between calls)."""
    _SEARCHES.clear()


def _target(target) -> Target:
    if target is None:
        raise ValueError("a target is required (a Target or an ISA name such as 'avx512')")
    return get_target(target) if isinstance(target, str) else target


def _search(target: Target) -> Search:
    s = _SEARCHES.get(target)
    if s is None:
        s = _SEARCHES[target] = Search(target)
    return s


def to_spec(spec, target) -> Spec:
    """A canonical ``Spec`` from a Spec, a spec string or a UserSpec (at GL, with the target's limits)."""
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if isinstance(spec, UserSpec):
        return spec.to_spec(_target(target).limits())
    if not isinstance(spec, Spec):
        raise ValueError(f"expected a Spec, a spec string or a UserSpec, got {type(spec).__name__}")
    return canonicalize(spec)


def _plan(spec: Spec, action, target: Target, what: str) -> Plan:
    """``action``'s plan for ``spec``; a ValueError with the action's reason if it does not apply."""
    plan = action.plan(spec, target)
    if isinstance(plan, Refusal):
        raise ValueError(f"{what} does not apply to {spec.describe()}: {plan.reason}")
    return plan


def _apply(spec: Spec, action, target: Target, what: str, main: int | None, body: Builder | None):
    """Plan ``action``, build child ``main`` with ``body`` (if given) and synthesize the others."""
    return _build(spec, _plan(spec, action, target, what), target, what, main, body)


def _build(spec: Spec, plan: Plan, target: Target, what: str, main: int | None, body: Builder | None):
    search = _search(target)
    children = []
    for i, sub in enumerate(plan.subspecs):
        if i == main and body is not None:
            child = body(sub)
            if child is None or getattr(child, "spec", None) != sub:
                got = getattr(getattr(child, "spec", None), "describe", lambda: repr(child))()
                raise ValueError(f"{what}: body must return a program for {sub.describe()}, got one for {got}")
        else:
            child = search.best(sub)
            if child is None:
                raise ValueError(f"{what}: no program fits the memory left for {sub.describe()}")
        children.append(child)
    impl = plan.build(tuple(children))
    if impl is None:  # the only refusal found while building (see Tile.plan)
        raise ValueError(f"{what} does not apply to {spec.describe()}: {NO_OVERWRITING_SLICE.reason}")
    return impl


def tile_out(spec, shape, *, parallel: bool = False, body: Builder | None = None, target=None):
    """Loop over tiles of the output: ``shape`` is the output tile, (rows, cols) or (batch, rows, cols)
    (for a move or zero spec, its 3-D tile). Sizes need not divide the output: ragged ends become
    remainder regions, which are synthesized. ``parallel`` spreads the tiles over the target's threads."""
    target = _target(target)
    spec = to_spec(spec, target)
    op = spec.op
    out_dims = op.operand_iter_dims[op.outputs[0]]
    shape = tuple(int(s) for s in shape)
    if len(shape) == 2:
        shape = (op.operands[op.outputs[0]].shape[0],) + shape
    if len(shape) != 3:
        raise ValueError(f"tile_out: expected an output tile of 2 or 3 sizes, got {shape}")
    out_shape = op.operands[op.outputs[0]].shape
    if any(s < 1 for s in shape) or any(s > f for s, f in zip(shape, out_shape)):
        raise ValueError(f"tile_out: tile {shape} must be between 1 and the output shape {out_shape}")
    tile = list(op.iter_shape)
    for d, s in zip(out_dims, shape):
        tile[d] = s
    what = f"tile_out {'x'.join(map(str, shape))}{' parallel' if parallel else ''}"
    return _apply(spec, Tile(tuple(tile), parallel), target, what, 0, body)


def split(spec, k: int, *, body: Builder | None = None, target=None):
    """Loop over slices of ``k`` along the reduction dim; ``body`` builds the slices' (accumulating)
    program. In a spec that does not accumulate, the first slice overwrites C: its program is derived
    from the others' (the load of C into registers becomes a zeroing; see overwrite.py)."""
    target = _target(target)
    spec = to_spec(spec, target)
    op = spec.op
    if op.kind != "matmul":
        raise ValueError(f"split: only matmul specs have a reduction dim, not {spec.describe()}")
    full = op.iter_shape
    if not 1 <= k < full[2]:
        raise ValueError(f"split: k={k} must be between 1 and {full[2] - 1} (K is {full[2]})")
    tile = (full[0], full[1], int(k), full[3])
    return _apply(spec, Tile(tile), target, f"split k by {k}", 0, body)


_LEVELS = {lv.name.lower(): lv for lv in Level}
_DTYPES = {d.value: d for d in DType}


def move(spec, operand, level, layout=None, dtype=None, *, body: Builder | None = None, target=None):
    """Give ``operand`` ('a', 'b', 'c'; 'src'/'dst' of a move) a new buffer at ``level`` ('GL', 'L2', 'L1',
    'VRF', 'RF' or a Level) with ``layout`` (a Layout, 'row' or 'col'; None keeps it: at L1 and L2 that is
    a cache view with no copy; at GL a layout is required: a dense scratch block) and ``dtype``
    ('f32'/'bf16' or a DType; registers always hold f32). Outputs are stored back after the body."""
    target = _target(target)
    spec = to_spec(spec, target)
    op = spec.op
    names = op.operand_names
    if isinstance(operand, str):
        if operand not in names:
            raise ValueError(f"move: unknown operand '{operand}' of {op.kind} (accepted: {', '.join(names)})")
        i = names.index(operand)
    else:
        i = int(operand)
        if not 0 <= i < len(names):
            raise ValueError(f"move: operand index {i} out of range for {op.kind}")
    if isinstance(level, str):
        if level.lower() not in _LEVELS:
            raise ValueError(f"move: unknown level '{level}' (accepted: {', '.join(lv.name for lv in Level)})")
        level = _LEVELS[level.lower()]
    level = Level(level)
    if isinstance(layout, str):
        named = {"row": row_major(), "col": col_major()}
        if layout not in named:
            raise ValueError(f"move: unknown layout '{layout}' (accepted: row, col, or a Layout)")
        layout = named[layout]
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ValueError(f"move: unknown dtype '{dtype}' (accepted: {', '.join(_DTYPES)})")
        dtype = _DTYPES[dtype]
    t = op.operands[i]
    what = f"move {names[i]} -> {level.name}"
    action = MoveOperand(i, level, layout, dtype)
    plan = _plan(spec, action, target, what)
    # The main child is the body, after the load of the operand's old contents (none for a view, or for
    # an output that is overwritten).
    is_output = i in op.outputs
    main = 1 if (not is_output or op.accum) and not action.is_view(t, action.buffer(t, target)) else 0
    return _build(spec, plan, target, what, main, body)


def to_accum(spec, *, body: Builder | None = None, target=None):
    """``C = A·B`` becomes ``C = 0; C += A·B``; ``body`` builds the accumulating matmul."""
    target = _target(target)
    spec = to_spec(spec, target)
    return _apply(spec, ToAccum(), target, "to_accum", 1, body)


def select(spec, kernel_name: str, target=None):
    """Implement ``spec`` with the catalog microkernel ``kernel_name`` (see target/kernels.py)."""
    target = _target(target)
    spec = to_spec(spec, target)
    return _apply(spec, Select(kernel_name), target, f"select {kernel_name}", None, None)


def synthesize(spec, target=None):
    """The best program for ``spec`` (the search); raises NoProgram if none fits its limits."""
    target = _target(target)
    spec = to_spec(spec, target)
    impl = _search(target).best(spec)
    if impl is None:
        raise NoProgram(f"no program implements '{spec.describe()}' within its memory limits")
    return impl
