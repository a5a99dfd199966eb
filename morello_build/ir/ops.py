"""Op definitions: each operation's facts in one record, so that the generic search, interpreter and
header generator ask the op instead of assuming matmul.

A record holds the op's iteration dims and their names, its operands (names, and which iteration dims
index each operand's three dims), its outputs and reduction dims, and its numpy semantics (run by
check/interpret.py on Kernel nodes, and in float64 for the reference result). An op a user may ask for
also says how the header presents it: the C++ loop variable of each iteration dim, and its template
(templates/op_<kind>.hpp.j2, extending header.hpp.j2 with the op's contract comment and its
``NAME_reference`` loop).

Adding an op: its record here, its Spec class in spec.py (which takes these facts from the record), its
kernels in target/; for a user-level op also its spec grammar and header template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class OpDef:
    kind: str
    iter_names: tuple[str, ...]
    operand_names: tuple[str, ...]
    operand_iter_dims: tuple[tuple[int, int, int], ...]  # which iteration dims index each operand's dims
    outputs: tuple[int, ...]  # operands the op writes
    reduction_dims: tuple[int, ...]  # iteration dims summed over (a loop over them splits the sum)
    # Semantics: evaluate(op, arrays, acc, extras) -> the new values of the outputs (in ``outputs`` order),
    # computed in the numpy dtype ``acc`` from the operands' arrays (numpy arrays in the spec's dtypes) and,
    # for an op with an epilogue, its tensors (``extras``, ir/epilogue.py); the caller rounds them to the
    # outputs' dtypes.
    evaluate: Callable
    cxx_vars: tuple[str, ...] = ()  # the reference loop's C++ variable for each iteration dim
    header_template: str | None = None  # None: an internal op (no user spec, no header of its own)

    def operand_dim_names(self, i: int) -> tuple[str, ...]:
        return tuple(self.iter_names[j] for j in self.operand_iter_dims[i])


def _finish(op, value, extras, acc):
    return op.epilogue.apply(value, extras).astype(acc) if op.epilogue else value


def _matmul(op, arrays, acc, extras=None):
    """C (+)= A @ B (then the epilogue), every product and sum in ``acc``."""
    a, b, c = arrays
    product = a.astype(acc) @ b.astype(acc)
    return (_finish(op, c.astype(acc) + product if op.accum else product, extras, acc),)


def _move(op, arrays, acc, extras=None):
    """A copy (with an epilogue: of the epilogue's result); storing it in the destination's dtype widens
    exactly or rounds to nearest even."""
    return (_finish(op, arrays[0].astype(acc), extras, acc),)


def _zero(op, arrays, acc, extras=None):
    import numpy as np

    return (np.zeros(arrays[0].shape, dtype=acc),)


def _gated(op, arrays, acc, extras=None):
    """C = act(A @ B1 + bias1) * (A @ B2 + bias2)."""
    a, b1, b2 = (x.astype(acc) for x in arrays[:3])
    return (op.epilogue.apply_pair(a @ b1, a @ b2, extras).astype(acc),)


def _pair(op, arrays, acc, extras=None):
    """C1 += A @ B1; C2 += A @ B2 (the gated pair's accumulation)."""
    a, b1, b2, c1, c2 = (x.astype(acc) for x in arrays)
    return (c1 + a @ b1, c2 + a @ b2)


def _gate(op, arrays, acc, extras=None):
    """C = act(X1 + bias1) * (X2 + bias2): the store of the gated pair's accumulators."""
    x1, x2, _ = (x.astype(acc) for x in arrays)
    return (op.epilogue.apply_pair(x1, x2, extras).astype(acc),)


MATMUL = OpDef(
    kind="matmul",
    iter_names=("batch", "m", "k", "n"),
    operand_names=("a", "b", "c"),
    operand_iter_dims=((0, 1, 2), (0, 2, 3), (0, 1, 3)),
    outputs=(2,),
    reduction_dims=(2,),
    evaluate=_matmul,
    cxx_vars=("bb", "i", "p", "j"),
    header_template="op_matmul.hpp.j2",
)
GATED = OpDef(
    kind="gated",
    iter_names=("batch", "m", "k", "n"),
    operand_names=("a", "b1", "b2", "c"),
    operand_iter_dims=((0, 1, 2), (0, 2, 3), (0, 2, 3), (0, 1, 3)),
    outputs=(3,),
    reduction_dims=(2,),
    evaluate=_gated,
    cxx_vars=("bb", "i", "p", "j"),
    header_template="op_gated.hpp.j2",
)
PAIR = OpDef(
    "pair",
    ("batch", "m", "k", "n"),
    ("a", "b1", "b2", "c1", "c2"),
    ((0, 1, 2), (0, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 3)),
    (3, 4),
    (2,),
    _pair,
)
GATE = OpDef("gate", ("batch", "row", "col"), ("x1", "x2", "dst"), ((0, 1, 2),) * 3, (2,), (), _gate)
MOVE = OpDef("move", ("batch", "row", "col"), ("src", "dst"), ((0, 1, 2), (0, 1, 2)), (1,), (), _move)
ZERO = OpDef("zero", ("batch", "row", "col"), ("dst",), ((0, 1, 2),), (0,), (), _zero)

OPS = {d.kind: d for d in (MATMUL, GATED, PAIR, GATE, MOVE, ZERO)}
