"""Zeroing kernels: vector registers, scalar registers, a memory tile."""

from __future__ import annotations

import itertools

from morello_build.ir.spec import Level
from morello_build.synth.cost import Features
from morello_build.target.kernels.common import (
    BF16,
    KernelDef,
    dim_order,
    in_vrf,
    loop_nest,
    registers,
)


def _vzero_emit(lw, node, binds) -> None:
    (dst,) = binds
    bsz, m, n = node.spec.op.dst.shape
    regs = []
    for bb, r, s in itertools.product(range(bsz), range(m), range(0, n, lw.W)):
        name, lane = lw.reg(dst, (bb, r, s))
        if lane:
            raise lw.error("vzero of a tile that does not start a register")
        regs.append(name)
    lw.emit(" ".join(f"{x} = {lw.v}::zero();" for x in regs))
    lw.zero_regs |= frozenset(regs)  # their first FMA becomes a multiply (outer.py)


def _szero_emit(lw, node, binds) -> None:
    (dst,) = binds
    for local in itertools.product(*(range(s) for s in node.spec.op.dst.shape)):
        lw.emit(lw.write(dst, local, "0.0f"))


def _memzero_emit(lw, node, binds) -> None:
    (dst,) = binds
    shape = node.spec.op.dst.shape
    coords, opened = loop_nest(lw, shape, dim_order(dst))
    zero = "0" if dst.dtype == BF16 else "0.0f"
    lw.emit(f"{lw.elem(dst, coords)} = {zero};")
    for _ in range(opened):
        lw.close()


def _vzero_applies(op, target):
    return in_vrf(op.dst, target)


def _vzero_cost(op, target):
    return Features.of(vec_zero=registers(op.dst, target))


def _szero_applies(op, target):
    return op.dst.level == Level.RF


def _szero_cost(op, target):
    return Features.of(vec_zero=op.dst.volume)


def _memzero_applies(op, target):
    return op.dst.level.is_memory


def _memzero_cost(op, target):
    return Features.of(copy_elem=op.dst.volume * 0.5, vec_store=op.dst.lines())


VZERO = KernelDef(
    name="vzero",
    kind="zero",
    vector=True,
    applies=_vzero_applies,
    cost=_vzero_cost,
    emit=_vzero_emit,
    doc="zero vector registers",
    vector_regs=lambda op, target: registers(op.dst, target),
)
SZERO = KernelDef(
    name="szero",
    kind="zero",
    vector=False,
    applies=_szero_applies,
    cost=_szero_cost,
    emit=_szero_emit,
    doc="zero scalar registers",
)
MEMZERO = KernelDef(
    name="memzero",
    kind="zero",
    vector=False,
    applies=_memzero_applies,
    cost=_memzero_cost,
    emit=_memzero_emit,
    doc="zero a memory tile",
)
