"""The kernel record and the predicates several kernel families share."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import ceil
from typing import Callable

from morello_build.ir.spec import DType, Level, TensorSpec, columns_unit_stride  # noqa: F401 (re-exported)

F32, BF16 = DType.F32, DType.BF16


@dataclass(frozen=True)
class KernelDef:
    """One microkernel: applicability, cost, register use and emitter in one place."""

    name: str
    kind: str  # the op kind it implements
    vector: bool  # needs vector registers (any target with lanes > 0)
    applies: Callable  # (op, target) -> bool
    cost: Callable  # (op, target) -> cost.Features: the counts its cost is made of (cost.py prices them)
    emit: Callable  # (lowerer, node, bindings) -> None: appends its C++ statements
    doc: str
    features: frozenset[str] = frozenset()  # ISA features it needs beyond vector registers (e.g. avx512bf16)
    vector_regs: Callable = lambda op, target: 0  # (op, target) -> vector registers it occupies
    epilogue: bool = False  # applies an op's epilogue (ir/epilogue.py) too

    def available_on(self, target) -> bool:
        return (target.lanes > 0 or not self.vector) and self.features <= target.features

    def __str__(self) -> str:
        return self.name


def in_vrf(t: TensorSpec, target) -> bool:
    return t.level == Level.VRF and t.dtype == F32 and t.vector_size == target.lanes


def registers(t: TensorSpec, target) -> int:
    """Vector registers a VRF tile occupies: one per row segment of at most W lanes."""
    b, m, n = t.shape
    return b * m * ceil(n / target.lanes)


def single_run_dim(t: TensorSpec) -> int:
    """The one dim with extent > 1 (2 when there is none)."""
    dims = [i for i, s in enumerate(t.shape) if s > 1]
    return dims[0] if len(dims) == 1 else (2 if not dims else -1)


def interleaved_for(a: TensorSpec, lanes: int) -> bool:
    """A's K strips store evens then odds in halves of ``lanes`` (layout.interleaved, strip 2W)."""
    ds = a.layout.digits
    return (
        len(ds) >= 2
        and (ds[-2].dim, ds[-2].div, ds[-2].mod) == (2, 1, 2)
        and (ds[-1].dim, ds[-1].div, ds[-1].mod) == (2, 2, lanes)
        and a.contig >= min(3, len(ds))
    )


# -- emitter helpers shared by families ---------------------------------------------------------------
def loop_nest(lw, shape, order):
    """Open C loops over ``shape`` (dims in ``order``, outermost first); returns (coords, loops opened)."""
    from morello_build.ir.affine import Affine

    coords = [Affine()] * 3
    opened = 0
    for d in order:
        if shape[d] > 1:
            v = lw.fresh("x")
            lw.open(f"for (ix {v} = 0; {v} < {shape[d]}; ++{v}) {{")
            coords[d] = Affine.var(v)
            opened += 1
    return coords, opened


def dim_order(b) -> list[int]:
    """Dims ordered so that the innermost loop walks the binding's innermost live digit."""
    order = []
    for d in b.layout.digits:
        if d.dim in order:
            order.remove(d.dim)
        order.append(d.dim)
    return order + [d for d in range(3) if d not in order]


# -- shared by the dot-product emitters (dot, rows, quant, quant_rows, quant_pair, quant_int) ----------------
def check_dot_operands(lw, name: str, a, bs, cs, m: int, k: int, n: int) -> None:
    """The layout a dot-product emitter assumes (its applicability already implies it; this guards codegen):
    accumulators C in scalar registers, each of the n columns of every B and each of A's first m rows
    contiguous along K (m = 0: A's layout is the kernel's own business)."""
    if any(c.level != Level.RF for c in cs):
        raise lw.error(f"{name} accumulates into scalar registers")
    if k <= 1:
        return
    for b in bs:
        for j in range(n):
            if lw.step(b, (0, 0, j), (0, 1, j)) != 1:
                raise lw.error(f"{name}: a B column is not contiguous along K")
    for i in range(m):
        if lw.step(a, (0, i, 0), (0, i, 1)) != 1:
            raise lw.error(f"{name}: a row of A is not contiguous along K")


def pairwise_sum(lw, terms) -> str:
    """The sum of vector terms (a C expression), added pairwise in a fixed order: deterministic results, and
    a shallower dependency chain than a left fold."""
    terms = list(terms)
    while len(terms) > 1:
        terms = [f"{lw.v}::add({x}, {y})" if y else x for x, y in itertools.zip_longest(terms[0::2], terms[1::2])]
    return terms[0]
