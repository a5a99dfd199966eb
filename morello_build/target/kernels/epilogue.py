"""An epilogue (ir/epilogue.py) inside the store kernels: what it costs and how its terms are emitted.

The stores that apply one write C's tile from registers into the user's C (the root binding ``c``, row
major), so every term's element follows from the tile's coordinates in C: a column's colscale and bias
at its n, the residual at C's own offset (same shape, row major). Their kernel arguments are named as
the terms (``scale``, ``colscale``, ``bias``, ``residual``).
"""

from __future__ import annotations

from dataclasses import replace

from morello_build.ir.affine import Affine
from morello_build.ir.layout import row_major
from morello_build.ir.spec import DType, Level
from morello_build.synth.cost import Features, lines_read


def applies(op) -> bool:
    """A store with an epilogue writes into main memory (the user's C)."""
    return not op.epilogue or op.dst.level == Level.GL


def cost(op, registers: int) -> Features:
    """The terms' loads and vector instructions for ``registers`` registers (their elements in a scalar
    store: one each), and the residual's lines (f32, the tile's shape)."""
    e = op.epilogue
    if not e:
        return Features.of()
    loads = registers * (e.colscale + e.bias + e.residual)
    ops = registers * (e.scale + e.colscale + e.bias + e.residual + (e.activation.vec_ops if e.act else 0))
    residual = lines_read(replace(op.dst, dtype=DType.F32)) if e.residual else Features.of()
    return Features.of(vec_load=loads, vec_op=ops) + residual


def column_binding(dst, root: str):
    """A binding of an N-value term at the columns of ``dst`` (a tile of the user's C)."""
    _, _, n = dst.shape
    return replace(dst, root=root, shape=(1, 1, n), layout=row_major(), origin=(Affine(), Affine(), dst.origin[2]))


def root_of_c(lw, dst) -> None:
    if dst.root != "c" or dst.level != Level.GL:
        raise lw.error(f"an epilogue stores into the user's C, not {dst.root}")


def emit_vector(lw, op, dst, first, reg: str, n: int) -> str:
    """Emit the epilogue of one register (``n`` lanes along C's row from ``first``) into a fresh value;
    returns its name."""
    root_of_c(lw, dst)
    e, v = op.epilogue, lw.v
    col = (0, 0, first[2])
    out = lw.fresh("e")
    lw.emit(f"{lw.target.vtype} {out} = {reg};")
    if e.scale:
        lw.emit(f"{out} = {v}::mul({out}, {v}::bcast(scale));")
    if e.colscale:
        lw.emit(f"{out} = {v}::mul({out}, {v}::load_f32({lw.ptr(column_binding(dst, 'colscale'), col)}, {n}));")
    if e.bias:
        lw.emit(f"{out} = {v}::add({out}, {v}::load_f32({lw.ptr(column_binding(dst, 'bias'), col)}, {n}));")
    if e.act:
        lw.emit(f"{out} = {v}::{e.activation.helper}({out});")
    if e.residual:
        res = replace(dst, root="residual", dtype=DType.F32)
        lw.emit(f"{out} = {v}::add({out}, {v}::load_f32({lw.ptr(res, first)}, {n}));")
    return out


def scalar_value(lw, op, dst, local, value: str) -> str:
    """The C++ expression of one element's epilogue applied to ``value`` (an f32 expression)."""
    root_of_c(lw, dst)
    e, y = op.epilogue, value
    col = (0, 0, local[2])
    if e.scale:
        y = f"{y} * scale"
    if e.colscale:
        y = f"{y} * {lw.elem(column_binding(dst, 'colscale'), col)}"
    if e.bias:
        y = f"{y} + {lw.elem(column_binding(dst, 'bias'), col)}"
    if e.act:
        y = f"::{lw.rt}::{e.activation.helper}({y})"
    if e.residual:
        y = f"{y} + {lw.elem(replace(dst, root='residual', dtype=DType.F32), local)}"
    return y
