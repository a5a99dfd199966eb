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
    # Semantics: evaluate(op, arrays, acc) -> the new values of the outputs (in ``outputs`` order), computed
    # in the numpy dtype ``acc`` from the operands' arrays (numpy arrays in the spec's dtypes); the caller
    # rounds them to the outputs' dtypes.
    evaluate: Callable
    cxx_vars: tuple[str, ...] = ()  # the reference loop's C++ variable for each iteration dim
    header_template: str | None = None  # None: an internal op (no user spec, no header of its own)

    def operand_dim_names(self, i: int) -> tuple[str, ...]:
        return tuple(self.iter_names[j] for j in self.operand_iter_dims[i])


def _matmul(op, arrays, acc):
    """C (+)= A @ B, every product and sum in ``acc``."""
    a, b, c = arrays
    product = a.astype(acc) @ b.astype(acc)
    return (c.astype(acc) + product if op.accum else product,)


def _move(op, arrays, acc):
    """A copy; storing it in the destination's dtype widens exactly or rounds to nearest even."""
    return (arrays[0].astype(acc),)


def _zero(op, arrays, acc):
    import numpy as np

    return (np.zeros(arrays[0].shape, dtype=acc),)


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
MOVE = OpDef("move", ("batch", "row", "col"), ("src", "dst"), ((0, 1, 2), (0, 1, 2)), (1,), (), _move)
ZERO = OpDef("zero", ("batch", "row", "col"), ("dst",), ((0, 1, 2),), (0,), (), _zero)

OPS = {d.kind: d for d in (MATMUL, MOVE, ZERO)}
