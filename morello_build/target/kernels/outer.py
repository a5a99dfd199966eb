"""Outer-product kernels: C (+)= A·B one k step at a time, on a tile of C held in registers."""

from __future__ import annotations

from math import ceil

from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, fma_steps, lines_read
from morello_build.target.kernels.common import (
    F32,
    KernelDef,
    in_vrf,
    registers,
)


# -- mac_scalar: c += a * b on scalar registers -------------------------------------------------------
def _mac_applies(op, target):
    return (
        op.iter_shape == (1, 1, 1, 1) and op.accum and all(t.level == Level.RF and t.dtype == F32 for t in op.operands)
    )


def _mac_emit(lw, node, binds) -> None:
    a, b, c = binds
    z = (0, 0, 0)
    lw.emit(f"{lw.elem(c, z)} += {lw.elem(a, z)} * {lw.elem(b, z)};")


MAC_SCALAR = KernelDef(
    name="mac_scalar",
    kind="matmul",
    vector=False,
    applies=_mac_applies,
    cost=lambda op, t: Features.of(scalar_op=1),
    emit=_mac_emit,
    doc="c += a * b on scalar registers",
)


# -- fma_outer: C[m,n] += broadcast(A[m,0]) * B[0,n] ----------------------------------------------------
def _fma_outer_regs(op, target) -> int:
    """C's registers, one row of B, and two for broadcasts and temporaries."""
    n = op.iter_shape[3]
    return registers(op.c, target) + ceil(n / target.lanes) + 2


def _fma_outer_applies(op, target):
    b, m, k, n = op.iter_shape
    return (
        b == 1
        and k == 1
        and op.accum
        and target.lanes > 0
        and in_vrf(op.c, target)
        and in_vrf(op.b, target)
        and op.a.dtype == F32
        and op.a.level in (Level.GL, Level.L1, Level.RF)
        and _fma_outer_regs(op, target) <= target.vector_regs
    )


def _fma_outer_cost(op, target):
    _, m, _, n = op.iter_shape
    bcast = Features.of(vec_op=m) if op.a.level == Level.RF else Features.of(vec_load=m)
    # Each accumulator is updated once per step: with few of them, FMA latency, not throughput, binds.
    return fma_steps(m * ceil(n / target.lanes), target.costs) + bcast + lines_read(op.a)


def _fma_outer_emit(lw, node, binds) -> None:
    a, b, c = binds
    _, m, _, n = node.spec.op.iter_shape
    segs = range(0, n, lw.W)
    bregs = []
    for s in segs:
        name, lane = lw.reg(b, (0, 0, s))
        if lane:
            raise lw.error("fma_outer: B segment does not start a register")
        bregs.append(name)
    for r in range(m):
        av = lw.read_f32(a, (0, r, 0))
        bc = lw.fresh("bc")
        stmts = [f"const {lw.target.vtype} {bc} = {lw.v}::bcast({av});"]
        for s, bn in zip(segs, bregs):
            cn, lane = lw.reg(c, (0, r, s))
            if lane:
                raise lw.error("fma_outer: C segment does not start a register")
            if cn in lw.zero_regs:  # the register was just zeroed: multiply instead of adding to zero
                stmts.append(f"{cn} = {lw.v}::mul({bc}, {bn});")
                lw.zero_regs -= {cn}
            else:
                stmts.append(f"{cn} = {lw.v}::fma({bc}, {bn}, {cn});")
        lw.emit("{ " + " ".join(stmts) + " }")


FMA_OUTER = KernelDef(
    name="fma_outer",
    kind="matmul",
    vector=True,
    applies=_fma_outer_applies,
    cost=_fma_outer_cost,
    emit=_fma_outer_emit,
    doc="register tile C[m,n] += broadcast(A[m,0]) * B[0,n]: one FMA per C register",
    vector_regs=_fma_outer_regs,
)
