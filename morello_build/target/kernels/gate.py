"""Gate kernels: the store of the gated pair's accumulators, act(x1 + bias1) * (x2 + bias2) into C.

Like the epilogue stores (kernels/epilogue.py) they write the user's C (row major), so a column's
biases are at its n (kernel arguments ``bias1`` and ``bias2``).
"""

from __future__ import annotations

from morello_build.ir.spec import Level
from morello_build.synth.cost import Features
from morello_build.target.kernels.common import BF16, KernelDef, in_vrf, single_run_dim
from morello_build.target.kernels.epilogue import column_binding, root_of_c
from morello_build.target.kernels.moves import vector_groups


def _terms(op, registers: int) -> Features:
    e = op.epilogue
    ops = registers * (1 + 2 * e.bias + e.activation.vec_ops)  # the product, the biases, the activation
    writeback = op.dst.lines() if op.dst.level == Level.GL else 0
    bf16 = 2 if op.dst.dtype == BF16 else 0
    return Features.of(vec_load=registers * 2 * e.bias, vec_op=ops + bf16 * registers, vec_store=1, gl_line=writeback)


def _vgate_applies(op, target):
    d = single_run_dim(op.dst)
    return (
        target.lanes > 0
        and op.dst.level == Level.GL
        and in_vrf(op.x1, target)
        and in_vrf(op.x2, target)
        and d == 2
        and op.dst.shape[2] <= target.lanes
        and op.dst.unit_stride(2)
        and op.x1.unit_stride(2)
    )


def _vgate_emit(lw, node, binds) -> None:
    x1, x2, dst = binds
    op, v = node.spec.op, lw.v
    root_of_c(lw, dst)
    fn = "store_bf16" if dst.dtype == BF16 else "store_f32"
    shape = op.dst.shape
    for (r1, first, n), (r2, _, _) in zip(vector_groups(lw, dst, x1, shape), vector_groups(lw, dst, x2, shape)):
        g, u = lw.fresh("g"), lw.fresh("u")
        lw.emit(f"{lw.target.vtype} {g} = {r1};")
        lw.emit(f"{lw.target.vtype} {u} = {r2};")
        if op.epilogue.bias:
            col = (0, 0, first[2])
            lw.emit(f"{g} = {v}::add({g}, {v}::load_f32({lw.ptr(column_binding(dst, 'bias1'), col)}, {n}));")
            lw.emit(f"{u} = {v}::add({u}, {v}::load_f32({lw.ptr(column_binding(dst, 'bias2'), col)}, {n}));")
        lw.emit(f"{v}::{fn}({lw.ptr(dst, first)}, {v}::mul({v}::{op.epilogue.activation.helper}({g}), {u}), {n});")


def _sgate_applies(op, target):
    return (
        op.iter_shape == (1, 1, 1) and op.x1.level == Level.RF and op.x2.level == Level.RF and op.dst.level == Level.GL
    )


def _sgate_emit(lw, node, binds) -> None:
    x1, x2, dst = binds
    op, z = node.spec.op, (0, 0, 0)
    root_of_c(lw, dst)
    g, u = lw.read_f32(x1, z), lw.read_f32(x2, z)
    if op.epilogue.bias:
        g = f"{g} + {lw.elem(column_binding(dst, 'bias1'), z)}"
        u = f"{u} + {lw.elem(column_binding(dst, 'bias2'), z)}"
    lw.emit(lw.write(dst, z, f"::{lw.rt}::{op.epilogue.activation.helper}({g}) * ({u})"))


VGATE = KernelDef(
    name="vgate",
    kind="gate",
    vector=True,
    applies=_vgate_applies,
    cost=lambda op, target: _terms(op, 1),
    emit=_vgate_emit,
    doc="the gated pair's store from two registers: act(x1 + bias1) * (x2 + bias2) (masked tail)",
    vector_regs=lambda op, target: 2,
    epilogue=True,
)
SGATE = KernelDef(
    name="sgate",
    kind="gate",
    vector=False,
    applies=_sgate_applies,
    cost=lambda op, target: _terms(op, 1),
    emit=_sgate_emit,
    doc="the gated pair's store of one element from two scalar registers",
    epilogue=True,
)
