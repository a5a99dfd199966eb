"""Move kernels: vector and scalar loads and stores between memory and registers, and packing copies."""

from __future__ import annotations

from morello_build.ir.aquant import is_quantized_a
from morello_build.ir.formats import is_format
from morello_build.ir.spec import Level, TensorSpec
from morello_build.synth.cost import Features, lines_from, lines_read
from morello_build.target.kernels import epilogue
from morello_build.target.kernels.common import (
    BF16,
    F32,
    KernelDef,
    dim_order,
    in_vrf,
    loop_nest,
    single_run_dim,
)


# -- vload / vstore: one register's worth (masked tail; bf16 widened / rounded) ---------------------------
def _vector_move_shape(mem: TensorSpec, reg: TensorSpec, target) -> bool:
    d = single_run_dim(mem)
    return (
        target.lanes > 0
        and in_vrf(reg, target)
        and d >= 0
        and mem.shape[d] <= target.lanes
        and mem.unit_stride(d)
        and reg.unit_stride(d)
    )


def _vload_applies(op, target):
    return op.src.level.is_memory and _vector_move_shape(op.src, op.dst, target)


def _vload_cost(op, target):
    widen = 1 if op.src.dtype == BF16 else 0
    return Features.of(vec_load=1, vec_op=widen) + lines_read(op.src)


def _vstore_applies(op, target):
    return (
        op.dst.level.is_memory
        and _vector_move_shape(op.dst, op.src, target)
        and epilogue.applies(op)
        and (not op.epilogue or single_run_dim(op.dst) == 2)  # a run along C's row: the terms' lanes
    )


def _vstore_cost(op, target):
    """A store into main memory dirties its lines, which are written back: C tiles stored once per k slice
    cost that traffic every slice (1024^3: k slices of 512 instead of 256 ran 13.7 ms instead of 14.2)."""
    writeback = op.dst.lines() if op.dst.level == Level.GL else 0
    store = Features.of(vec_store=1, vec_op=2 if op.dst.dtype == BF16 else 0, gl_line=writeback)
    return store + epilogue.cost(op, 1)


def vector_groups(lw, mem, regb, shape):
    """Elements of a ≤W-element tile grouped by register: [(reg, first mem local, count)]."""
    import itertools

    groups: dict[str, list] = {}
    for local in itertools.product(*(range(s) for s in shape)):
        name, lane = lw.reg(regb, local)
        groups.setdefault(name, []).append((lane, local))
    out = []
    for name, elems in groups.items():
        lanes = [la for la, _ in elems]
        if lanes != list(range(len(lanes))):
            raise lw.error(f"vector move: lanes {lanes} of {name} are not 0..n-1")
        first = elems[0][1]
        for j, (_, local) in enumerate(elems[1:], 1):
            if lw.step(mem, first, local) != j:
                raise lw.error(f"vector move: {mem.root} elements are not contiguous")
        out.append((name, first, len(elems)))
    return out


def _vload_emit(lw, node, binds) -> None:
    src, dst = binds
    fn = "load_bf16" if src.dtype == BF16 else "load_f32"
    for name, first, n in vector_groups(lw, src, dst, node.spec.op.src.shape):
        lw.emit(f"{name} = {lw.v}::{fn}({lw.ptr(src, first)}, {n});")
        lw.zero_regs -= {name}


def _vstore_emit(lw, node, binds) -> None:
    src, dst = binds
    fn = "store_bf16" if dst.dtype == BF16 else "store_f32"
    op = node.spec.op
    for name, first, n in vector_groups(lw, dst, src, op.src.shape):
        value = epilogue.emit_vector(lw, op, dst, first, name, n) if op.epilogue else name
        lw.emit(f"{lw.v}::{fn}({lw.ptr(dst, first)}, {value}, {n});")


VLOAD = KernelDef(
    name="vload",
    kind="move",
    vector=True,
    applies=_vload_applies,
    cost=_vload_cost,
    emit=_vload_emit,
    doc="vector load into a register (masked tail; bf16 widened to f32)",
    vector_regs=lambda op, target: 1,  # one register (at most W elements)
)
VSTORE = KernelDef(
    name="vstore",
    kind="move",
    vector=True,
    applies=_vstore_applies,
    cost=_vstore_cost,
    emit=_vstore_emit,
    doc="vector store from a register (masked tail; f32 rounded to bf16, nearest-even), with an epilogue",
    vector_regs=lambda op, target: 1,  # one register (at most W elements)
    epilogue=True,
)


# -- scalar_load / scalar_store: one element ------------------------------------------------------------
def _scalar_load_applies(op, target):
    return op.iter_shape == (1, 1, 1) and op.src.level.is_memory and op.dst.level == Level.RF and op.dst.dtype == F32


def _scalar_store_applies(op, target):
    return op.iter_shape == (1, 1, 1) and op.src.level == Level.RF and op.dst.level.is_memory and epilogue.applies(op)


def _scalar_move_cost(op, target):
    return Features.of(scalar_op=1) + lines_read(op.src) + epilogue.cost(op, 1)  # registers read no lines


def _scalar_move_emit(lw, node, binds) -> None:
    src, dst = binds
    z = (0, 0, 0)
    value = lw.read_f32(src, z)
    op = node.spec.op
    lw.emit(lw.write(dst, z, epilogue.scalar_value(lw, op, dst, z, value) if op.epilogue else value))


SCALAR_LOAD = KernelDef(
    name="scalar_load",
    kind="move",
    vector=False,
    applies=_scalar_load_applies,
    cost=_scalar_move_cost,
    emit=_scalar_move_emit,
    doc="one element into a scalar register (bf16 widened)",
)
SCALAR_STORE = KernelDef(
    name="scalar_store",
    kind="move",
    vector=False,
    applies=_scalar_store_applies,
    cost=_scalar_move_cost,
    emit=_scalar_move_emit,
    doc="one element from a scalar register (rounded to bf16 if needed), with an epilogue",
    epilogue=True,
)


# -- copy: a packing copy into an L1 buffer or a scratch block -----------------------------------------
def _copy_applies(op, target):
    # dtypes without an element-wise f32 value to copy (quantized A) have their own kernels (quant_int)
    plain = not is_quantized_a(op.src.dtype) and not is_format(op.dst.dtype)
    return op.src.level.is_memory and op.dst.level.is_memory and plain


def _copy_cost(op, target):
    spill = op.dst.lines() if op.dst.level == Level.GL else 0  # a scratch block's lines leave L1
    elems = Features.of(copy_gather_elem=op.src.volume) if _gathers(op) else Features.of(copy_elem=op.src.volume)
    return elems + lines_from(op.src) + Features.of(l2_line=spill)


def _gathers(op) -> bool:
    """Whether a copy's innermost loop (the destination's last digit, _digit_nest) reads its source at a
    stride: A interleaved into evens and odds, a transposed tile. The compiler does not vectorize that loop."""
    dst, src = _live_digits(op.dst), _live_digits(op.src)
    if not dst or not src:
        return False
    return (dst[-1].dim, dst[-1].div) != (src[-1].dim, 1) or src[-1].div != 1


def _live_digits(t):
    return [d for d, e in zip(t.layout.digits, t.layout.extents(t.shape)) if e > 1]


def _digit_nest(lw, layout, shape, src_order):
    """Loops over a packed/interleaved destination's digits, so that the innermost loop is unit-stride on
    both sides (a vectorizable copy, where walking dims made the compiler divide every index); the outer
    loops follow the source's dim order (``src_order``, outermost first), so that it is read in whole
    lines. Each dim is the sum of its digits (c = 16*p + q); a ragged last strip is guarded. None when a
    dim's digits are not a mixed radix of it."""
    from morello_build.ir.affine import Affine

    by_dim: dict[int, list] = {}
    for d in layout.digits:
        by_dim.setdefault(d.dim, []).append(d)
    for digits in by_dim.values():
        digits.sort(key=lambda d: d.div)
        for lo, hi in zip(digits, digits[1:]):
            if lo.mod is None or lo.div * lo.mod != hi.div:
                return None
        if digits[0].div != 1 or digits[-1].mod is not None:
            return None
    coords = [Affine()] * 3
    ranges, opened = {}, 0
    nest = list(zip(layout.digits, layout.extents(shape)))
    outer = sorted(nest[:-1], key=lambda de: (src_order.index(de[0].dim), -de[0].div))
    for d, extent in outer + nest[-1:]:
        if extent > 1:
            v = lw.fresh("x")
            lw.open(f"for (ix {v} = 0; {v} < {extent}; ++{v}) {{")
            ranges[v] = extent
            coords[d.dim] = coords[d.dim] + Affine.var(v, d.div)
            opened += 1
    guards = tuple(
        f"{coords[k].c()} < {shape[k]}"
        for k in range(3)
        if shape[k] > 1
        and any(d.dim == k and d.div > 1 for d in layout.digits)
        and shape[k] % max(d.div for d in layout.digits if d.dim == k)
    )
    return coords, opened, ranges, guards


def _copy_emit(lw, node, binds) -> None:
    src, dst = binds
    shape = node.spec.op.src.shape
    lw.emit(f"// copy {node.spec.op.src.describe()} -> {node.spec.op.dst.describe()}")
    nest = _digit_nest(lw, dst.layout, shape, dim_order(src))
    if nest is None:  # walk the source's dims (dst digits that are not a mixed radix of their dim)
        coords, opened = loop_nest(lw, shape, dim_order(src))
        ranges, guards = None, ()
    else:
        coords, opened, ranges, guards = nest
    for g in guards:
        lw.open(f"if ({g}) {{")
    if src.dtype == dst.dtype:
        lw.emit(f"{lw.elem(dst, coords, ranges)} = {lw.elem(src, coords)};")
    else:
        lw.emit(lw.write(dst, coords, lw.read_f32(src, coords), ranges))
    for _ in range(opened + len(guards)):
        lw.close()


COPY = KernelDef(
    name="copy",
    kind="move",
    vector=False,
    applies=_copy_applies,
    cost=_copy_cost,
    emit=_copy_emit,
    doc="packing copy into an L1 buffer or a scratch block: new layout and/or dtype (loop nest)",
)
