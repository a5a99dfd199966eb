"""Lowering an Impl tree to the C++ statements of the kernel body.

Every operand of the spec being lowered is *bound* to a root buffer: the user's pointer (GL), an
aligned stack array (L1), an array of vector registers (VRF) or of scalars (RF). A binding knows the
root's full shape and real layout (``MoveImpl.buffer``; the canonical layouts of child specs drop unit
digits and must never be used for addressing) and the origin of the current tile, one Affine per dim.

Loops whose variables would index a register array are unrolled here, at generation time, so that
every register index is a constant and the compiler keeps the arrays in registers. Other loops are
emitted as C loops; the outermost parallel loop goes through the parallel-for callable.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, replace
from math import ceil, prod

from morello_build.ir.affine import Affine, Expr, expr_c, layout_offset, paren
from morello_build.ir.formats import is_format
from morello_build.ir.impl import Accum, Kernel, Loop, MoveImpl, PairAccum, Seq
from morello_build.ir.layout import Layout
from morello_build.ir.levels import Alloc
from morello_build.ir.spec import DType, Level

F32, BF16 = DType.F32, DType.BF16


class CodegenError(RuntimeError):
    """The Impl tree asks for something the emitter cannot express (a synthesizer/codegen mismatch)."""


@dataclass(frozen=True)
class Binding:
    root: str  # C name of the root buffer
    shape: tuple[int, int, int]  # the root's full logical shape
    layout: Layout  # the root's real layout
    dtype: DType
    level: Level
    origin: tuple[Affine, Affine, Affine]
    lanes: int = 0  # VRF: f32 lanes per register
    count: int = 0  # register buffers: registers (VRF) or scalars (RF) allocated, for bounds checks

    def at(self, local) -> tuple[Affine, ...]:
        return tuple(o + int(x) if isinstance(x, int) else o + x for o, x in zip(self.origin, local))

    @property
    def addr_shape(self) -> tuple[int, int, int]:
        """The shape addressing is done in: VRF rows are padded to whole registers."""
        if self.level == Level.VRF:
            b, m, n = self.shape
            return (b, m, ceil(n / self.lanes) * self.lanes)
        return self.shape

    def offset(self, local, ranges=None) -> Expr:
        return layout_offset(self.layout, self.addr_shape, self.at(local), ranges)

    def moved(self, offsets: dict[int, Affine]) -> "Binding":
        return replace(self, origin=tuple(o + offsets[p] if p in offsets else o for p, o in enumerate(self.origin)))


def _address(pointer: str) -> str:
    """A pointer's address as an integer (the distance between two arrays is no pointer arithmetic)."""
    return f"reinterpret_cast<std::uintptr_t>({pointer})"


def const_offset(b: Binding, local) -> int:
    off = b.offset(local)
    if not isinstance(off, Affine) or not off.is_const:
        raise CodegenError(f"register operand {b.root} indexed by a non-constant {expr_c(off)}")
    return off.const


class Lowerer:
    """Walks an Impl tree and collects the kernel body's lines; kernel records call back into it (emit,
    open/close, fresh names, operand access) to write their statements."""

    error = CodegenError  # what a kernel's emitter raises when the tree asks for what it cannot express

    def __init__(self, target, rt: str):
        self.target = target
        self.rt = rt  # runtime namespace
        self.W = target.lanes
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.register_scope = 0  # >0 inside a MoveImpl with a register buffer
        self.used_parallel = False
        # Vector registers known to hold zero here (vzero'd, not written since): their first FMA is
        # emitted as a multiply, and the first trip of a rolled loop is peeled to reach it. Only
        # straight-line code keeps them: a rolled loop body is emitted with none.
        self.zero_regs: frozenset[str] = frozenset()
        # B's root -> (its tile's end, the other array's next columns), where a gated pair reads them next
        self.next_streams: dict[str, tuple] = {}
        self.kernel_jumps: dict[str, tuple] = {}  # B's root -> the kernel's jumps (kernel_streams)

    # -- output helpers ------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line if line else "")

    def open(self, line: str) -> None:
        self.emit(line)
        self.depth += 1

    def close(self, line: str = "}") -> None:
        self.depth -= 1
        self.emit(line)

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    # -- operand access ----------------------------------------------------------------------------
    def ptr(self, b: Binding, local) -> str:
        off = b.offset(local)
        if isinstance(off, Affine) and off == Affine():
            return b.root
        return f"{b.root} + {paren(off) if not isinstance(off, Affine) else off.c()}"

    def elem(self, b: Binding, local, ranges=None) -> str:
        """An lvalue/rvalue of one element of a memory or RF binding (stored type)."""
        off = b.offset(local, ranges)
        if b.level == Level.RF:
            i = const_offset(b, local)
            if not 0 <= i < b.count:
                raise CodegenError(f"{b.root}[{i}] is outside its {b.count} scalars")
            return f"{b.root}[{i}]"
        return f"{b.root}[{expr_c(off)}]"

    def unit_ptr(self, b: Binding, local) -> str:
        """A weight format's pointer to the addressing unit (ggml block, i4 byte) holding an element."""
        fmt = b.dtype
        if fmt.unit == 1:
            return self.ptr(b, local)
        off = b.offset(local)
        if isinstance(off, Affine) and off == Affine():
            return b.root
        return f"{b.root} + ({expr_c(off)}) / {fmt.unit} * {fmt.unit_size}"

    def group_index(self, b: Binding, local) -> str:
        """The index of an element's group in a weight format's scale (and zero-point) arrays."""
        return f"({expr_c(b.offset(local))}) / {b.dtype.group}"

    def read_f32(self, b: Binding, local) -> str:
        if is_format(b.dtype):
            return b.dtype.cxx_deq(self.rt, b.root, expr_c(b.offset(local)))
        e = self.elem(b, local)
        return f"{self.rt}::bf16_to_f32({e})" if b.dtype == BF16 else e

    def write(self, b: Binding, local, value_f32: str, ranges=None) -> str:
        e = self.elem(b, local, ranges)
        v = f"{self.rt}::f32_to_bf16({value_f32})" if b.dtype == BF16 else value_f32
        return f"{e} = {v};"

    def reg(self, b: Binding, local) -> tuple[str, int]:
        if b.level != Level.VRF:
            raise CodegenError(f"{b.root} is not in vector registers")
        reg, lane = divmod(const_offset(b, local), self.W)
        if not 0 <= reg < b.count:
            raise CodegenError(f"{b.root}[{reg}] is outside its {b.count} registers")
        return f"{b.root}[{reg}]", lane

    @staticmethod
    def step(b: Binding, local0, local1) -> Affine | None:
        """Constant distance between two elements of a binding, or None when not constant."""
        o0, o1 = b.offset(local0), b.offset(local1)
        if isinstance(o0, Affine) and isinstance(o1, Affine) and (o1 - o0).is_const:
            return (o1 - o0).const
        return None

    # -- tree walk ---------------------------------------------------------------------------------
    def walk(self, node, binds: tuple[Binding, ...]) -> None:
        if isinstance(node, Kernel):
            with self.kernel_streams(node, binds):
                self.target.kernel(node.name).emit(self, node, binds)  # each kernel record emits itself
        elif isinstance(node, Loop):
            self.loop(node, binds)
        elif isinstance(node, MoveImpl):
            self.move(node, binds)
        elif isinstance(node, Accum):
            self.emit("// to_accum: zero, then accumulate")
            self.walk(node.zero, (binds[node.spec.op.outputs[0]],))
            self.walk(node.body, binds)
        elif isinstance(node, PairAccum):
            self.pair_accum(node, binds)
        elif isinstance(node, Seq):
            a, b1, b2, c1, c2 = binds
            n = node.spec.op.iter_shape[3]
            self.emit("// split_pair: a·b1 into c1, then a·b2 into c2")
            # the columns after B1's tile are B2's first ones; after B2's, the next tile's of B1
            with self.streams_continue(b1, n, self.stream_points(b2, 0)):
                self.walk(node.first, (a, b1, c1))
            with self.streams_continue(b2, n, self.stream_points(b1, n)):
                self.walk(node.second, (a, b2, c2))
        else:
            raise CodegenError(f"unknown Impl node {type(node).__name__}")

    # -- streams of weight columns (the dot kernels' next-columns prefetches: quant_int_prefetch.py) --------
    def stream_points(self, b: Binding, n) -> tuple[str, ...] | None:
        """C pointers to column n of a weight format's arrays, in prefetch_streams' order (the values' first
        unit; separate scales' and zero points' first group); None for other dtypes."""
        if not is_format(b.dtype):
            return None
        local = (0, 0, n)
        extra = tuple(f"{b.root}_{suffix} + {self.group_index(b, local)}" for suffix, _ in b.dtype.extra_arrays())
        return (self.unit_ptr(b, local), *extra)

    @contextmanager
    def streams_continue(self, b: Binding, n: int, others: tuple[str, ...] | None):
        """Inside: the kernel whose columns of B end where its n-column tile ends reads ``others`` next."""
        ends = self.stream_points(b, n)
        if ends is None or others is None:
            yield
            return
        outer = self.next_streams
        self.next_streams = {**outer, b.root: (ends, others)}
        try:
            yield
        finally:
            self.next_streams = outer

    @contextmanager
    def kernel_streams(self, node, binds):
        """Around a kernel's emission: for each of its weight operands whose columns may continue in another
        array (streams_continue), per array of B the bytes from the end of the kernel's columns to where the
        loop reads next: 0, or, where the kernel's columns end the tile, to the other array's next columns.
        Declared before the kernel's block, once per call (a select per prefetch in the loop: 10% slower at
        M = 1 on 2 threads)."""
        outer = self.kernel_jumps
        self.kernel_jumps = dict(outer)
        n = node.spec.op.iter_shape[-1]
        for b in binds if node.spec.op.kind == "matmul" else ():  # the dot kernels (moves read no columns)
            if b.root in self.next_streams:
                names = []
                for at, end, other in zip(self.stream_points(b, n), *self.next_streams[b.root]):
                    names.append(self.fresh("jump"))
                    gap = f"std::ptrdiff_t({_address(other)} - {_address(at)})"
                    jump = gap if at == end else f"{at} == {end} ? {gap} : 0"  # the same text: the whole tile
                    self.emit(f"const std::ptrdiff_t {names[-1]} = {jump};")
                    self.emit(f"(void){names[-1]};")
                self.kernel_jumps[b.root] = tuple(names)
        try:
            yield
        finally:
            self.kernel_jumps = outer

    def stream_jumps(self, b: Binding) -> tuple[str, ...] | None:
        """The kernel_streams variables of B's arrays, or None where its columns continue after the kernel's."""
        return self.kernel_jumps.get(b.root)

    def move(self, node: MoveImpl, binds) -> None:
        op = node.spec.op
        i = node.operand
        name = op.operand_names[i]
        old = binds[i]
        if node.view:
            self.emit(f"// view {name}: {node.buffer.describe()} (no copy; cache-resident reuse)")
            self.walk(node.body, binds)
            return
        buf = node.buffer
        self.open("{")
        self.emit(f"// {node.label()}")
        level = buf.level
        new = self.register_buffer(buf) if level.is_register else self.memory_buffer(buf)
        if level.is_register:
            self.register_scope += 1
        if node.load is not None:
            self.walk(node.load, (old, new))
        self.walk(node.body, tuple(new if j == i else b for j, b in enumerate(binds)))
        if node.store is not None:
            self.walk(node.store, (new, old))
        if level.is_register:
            self.register_scope -= 1
        self.close()

    def memory_buffer(self, buf) -> Binding:
        """Declare a buffer in memory (an L1 array on the stack, or a scratch block) for ``buf``."""
        root = self.fresh("buf")
        n = buf.layout.buffer_elements(buf.shape)
        padded = n > prod(buf.shape)  # zeroed padding: deterministic, sanitizer-clean
        n = buf.dtype.storage_elems(n) if is_format(buf.dtype) else n  # quantized A's blocks (ir/aquant.py)
        if buf.level.alloc == Alloc.SCRATCH:  # too big for the stack of a pool's worker thread
            self.emit(f"{self.rt}::Scratch<{buf.dtype.ctype}> {root}_owner({n}, {str(padded).lower()});")
            self.emit(f"{buf.dtype.ctype}* const {root} = {root}_owner.data;")
        else:
            self.emit(f"alignas(64) {buf.dtype.ctype} {root}[{n}]{' = {}' if padded else ''};")
        return Binding(root, buf.shape, buf.layout, buf.dtype, buf.level, (Affine(),) * 3, self.W, 0)

    def register_buffer(self, buf) -> Binding:
        """Declare a register buffer (VRF: an array of vectors, RF: of floats) for ``buf``."""
        if buf.level == Level.VRF:
            root = self.fresh("vr")
            count = ceil(buf.shape[2] / self.W) * buf.shape[0] * buf.shape[1]  # kernels.registers()
            self.emit(f"{self.target.vtype} {root}[{count}];")
        else:
            root = self.fresh("rf")
            count = buf.layout.buffer_elements(buf.shape)
            self.emit(f"float {root}[{count}];")
        return Binding(root, buf.shape, buf.layout, buf.dtype, buf.level, (Affine(),) * 3, self.W, count)

    def pair_accum(self, node: PairAccum, binds) -> None:
        a, b1, b2, c = binds
        self.open("{")
        self.emit(f"// {node.label()}")
        registers = node.buffer.level.is_register
        declare = self.register_buffer if registers else self.memory_buffer
        acc1, acc2 = declare(node.buffer), declare(node.buffer)
        self.register_scope += registers
        self.walk(node.zero1, (acc1,))
        self.walk(node.zero2, (acc2,))
        self.walk(node.body, (a, b1, b2, acc1, acc2))
        self.walk(node.store, (acc1, acc2, c))
        self.register_scope -= registers
        self.close()

    def loop(self, node: Loop, binds) -> None:
        op = node.spec.op
        full = op.iter_shape
        touches_registers = any(
            b.level.is_register and any(d in node.dims for d in op.operand_iter_dims[i]) for i, b in enumerate(binds)
        )
        parallel = node.parallel and not touches_registers and self.register_scope == 0
        if node.parallel and not parallel:
            self.emit("// parallel loop run serially: it sits inside a register-resident tile")
        if parallel:
            self.parallel_loop(node, binds)
            return
        self.emit(f"// {node.label()}")
        for region in node.regions:
            mains = []  # (dim, trips, tile)
            offsets: dict[int, Affine] = {}
            for d, rem in zip(node.dims, region.remainder):
                t = node.tile[d]
                q = full[d] // t
                trips = node.main_trips(region, d)
                if rem:
                    offsets[d] = Affine(q * t)
                elif trips == 1:
                    offsets[d] = Affine(region.start * t)
                else:
                    mains.append((d, region.start, region.start + trips, t))
            if touches_registers:
                for idx in itertools.product(*(range(lo, hi) for _, lo, hi, _ in mains)):
                    offs = dict(offsets)
                    for (d, _, _, t), x in zip(mains, idx):
                        offs[d] = Affine(x * t)
                    self.walk(region.body, self.sub_bindings(op, binds, offs))
            else:
                self.rolled_loops(op, binds, region.body, mains, offsets)

    def rolled_loops(self, op, binds, body, mains, offsets) -> None:
        """C loops over ``mains`` (dim, first, end, tile) around ``body``. Registers known to be zero are
        not zero inside a loop body, so with some, a single loop's first trip is emitted before it."""
        peel = bool(self.zero_regs) and len(mains) == 1
        if peel:
            d, lo, hi, t = mains[0]
            self.emit("// first trip peeled: its FMAs into zeroed registers are multiplies")
            self.walk(body, self.sub_bindings(op, binds, {**offsets, d: Affine(lo * t)}))
            mains = [(d, lo + 1, hi, t)]
        if len(mains) == 1 and mains[0][2] - mains[0][1] == 1:
            d, lo, _, t = mains[0]
            self.walk(body, self.sub_bindings(op, binds, {**offsets, d: Affine(lo * t)}))
            return
        # The peeled trip wrote every register the body writes: what is still zero stays zero.
        zeros, self.zero_regs = self.zero_regs, frozenset()
        offs = dict(offsets)
        for d, lo, hi, t in mains:
            v = self.fresh("i")
            self.open(f"for (ix {v} = {lo}; {v} < {hi}; ++{v}) {{")
            offs[d] = Affine.var(v, t)
        self.walk(body, self.sub_bindings(op, binds, offs))
        for _ in mains:
            self.close()
        self.zero_regs = zeros if peel else frozenset()

    def parallel_loop(self, node: Loop, binds) -> None:
        op = node.spec.op
        full = op.iter_shape
        self.used_parallel = True
        total = sum(r.count for r in node.regions)
        task = self.fresh("task")
        self.emit(f"// {node.label()}: {total} tasks, one per tile")
        attr = f" {self.target.attr}" if self.target.attr else ""
        self.open(f"pf(std::size_t(0), std::size_t({total}), [&](std::size_t {task}){attr} {{")
        start = 0
        nreg = len(node.regions)
        for ri, region in enumerate(node.regions):
            end = start + region.count
            if nreg == 1:
                self.open("{")
            elif ri == 0:
                self.open(f"if ({task} < {end}) {{")
            elif ri < nreg - 1:
                self.close(f"}} else if ({task} < {end}) {{")
                self.depth += 1
            else:
                self.close("} else {")
                self.depth += 1
            local = f"{task} - {start}" if start else task
            offsets: dict[int, Affine] = {}
            stride = 1
            mains = []
            for d, rem in zip(node.dims, region.remainder):
                t = node.tile[d]
                q = full[d] // t
                if rem:
                    offsets[d] = Affine(q * t)
                elif q == 1:
                    offsets[d] = Affine()
                else:
                    mains.append((d, q, t))
            for d, q, t in reversed(mains):
                v = self.fresh("i")
                div = f"({local}) / {stride}" if stride > 1 else f"({local})"
                self.emit(f"const ix {v} = ix({div} % {q});")
                offsets[d] = Affine.var(v, t)
                stride *= q
            self.walk(region.body, self.sub_bindings(op, binds, offsets))
            start = end
        self.close("}")
        self.close("});")

    @staticmethod
    def sub_bindings(op, binds, offsets: dict[int, Affine]) -> tuple[Binding, ...]:
        out = []
        for b, dims in zip(binds, op.operand_iter_dims):
            out.append(b.moved({p: offsets[d] for p, d in enumerate(dims) if d in offsets}))
        return tuple(out)

    @property
    def v(self) -> str:
        return "mv"  # namespace alias of the ISA helpers inside the kernel function


def root_bindings(user, lanes: int) -> tuple[Binding, ...]:
    from morello_build.ir.layout import NAMED

    return tuple(
        Binding(name, shape, NAMED[lay], dt, Level.GL, (Affine(),) * 3, lanes)
        for name, shape, lay, dt in zip(
            user.definition.operand_names, user.operand_shapes(), user.operand_layouts(), user.operand_dtypes()
        )
    )


def lower(impl, user, target, rt: str) -> tuple[list[str], bool]:
    """The kernel body (lines) for ``impl``, and whether it uses the parallel-for callable."""
    lw = Lowerer(target, rt)
    lw.walk(impl, root_bindings(user, target.lanes))
    return lw.lines, lw.used_parallel
