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
from dataclasses import dataclass, replace
from math import ceil, prod

from morello_build.codegen.affine import Affine, Expr, expr_c, layout_offset, paren
from morello_build.codegen.isa import IsaInfo
from morello_build.ir.impl import Accum, Kernel, Loop, MoveImpl
from morello_build.ir.layout import Layout
from morello_build.ir.spec import DType, Level

F32, BF16 = DType.F32, DType.BF16
REGISTER_LEVELS = (Level.VRF, Level.RF)


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


def const_offset(b: Binding, local) -> int:
    off = b.offset(local)
    if not isinstance(off, Affine) or not off.is_const:
        raise CodegenError(f"register operand {b.root} indexed by a non-constant {expr_c(off)}")
    return off.const


class Lowerer:
    def __init__(self, target, info: IsaInfo, rt: str):
        self.target = target
        self.info = info
        self.rt = rt  # runtime namespace
        self.W = info.lanes
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.register_scope = 0  # >0 inside a MoveImpl with a register buffer
        self.used_parallel = False
        # Vector registers known to hold zero here (vzero'd, not written since): their first FMA is
        # emitted as a multiply, and the first trip of a rolled loop is peeled to reach it. Only
        # straight-line code keeps them: a rolled loop body is emitted with none.
        self.zero_regs: frozenset[str] = frozenset()

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

    def read_f32(self, b: Binding, local) -> str:
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
            getattr(self, f"k_{node.name}")(node, binds)
        elif isinstance(node, Loop):
            self.loop(node, binds)
        elif isinstance(node, MoveImpl):
            self.move(node, binds)
        elif isinstance(node, Accum):
            self.emit("// to_accum: zero, then accumulate")
            self.walk(node.zero, (binds[node.spec.op.outputs[0]],))
            self.walk(node.body, binds)
        else:
            raise CodegenError(f"unknown Impl node {type(node).__name__}")

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
        count = 0
        if level == Level.VRF:
            root = self.fresh("vr")
            count = ceil(buf.shape[2] / self.W) * buf.shape[0] * buf.shape[1]  # kernels.registers()
            self.emit(f"{self.info.vtype} {root}[{count}];")
        elif level == Level.RF:
            root = self.fresh("rf")
            count = buf.layout.buffer_elements(buf.shape)
            self.emit(f"float {root}[{count}];")
        else:
            root = self.fresh("buf")
            n = buf.layout.buffer_elements(buf.shape)
            padded = n > prod(buf.shape)  # zeroed padding: deterministic, sanitizer-clean
            if level == Level.GL:  # a scratch block: too big for the stack of a pool's worker thread
                self.emit(f"{self.rt}::Scratch<{buf.dtype.ctype}> {root}_owner({n}, {str(padded).lower()});")
                self.emit(f"{buf.dtype.ctype}* const {root} = {root}_owner.data;")
            else:
                self.emit(f"alignas(64) {buf.dtype.ctype} {root}[{n}]{' = {}' if padded else ''};")
        new = Binding(root, buf.shape, buf.layout, buf.dtype, level, (Affine(),) * 3, self.W, count)
        if level in REGISTER_LEVELS:
            self.register_scope += 1
        if node.load is not None:
            self.walk(node.load, (old, new))
        self.walk(node.body, tuple(new if j == i else b for j, b in enumerate(binds)))
        if node.store is not None:
            self.walk(node.store, (new, old))
        if level in REGISTER_LEVELS:
            self.register_scope -= 1
        self.close()

    def loop(self, node: Loop, binds) -> None:
        op = node.spec.op
        full = op.iter_shape
        touches_registers = any(
            b.level in REGISTER_LEVELS and any(d in node.dims for d in op.operand_iter_dims[i])
            for i, b in enumerate(binds)
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
        attr = f" {self.info.attr}" if self.info.attr else ""
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

    # -- kernels: scalar -----------------------------------------------------------------------------
    def k_mac_scalar(self, node, binds) -> None:
        a, b, c = binds
        z = (0, 0, 0)
        self.emit(f"{self.elem(c, z)} += {self.elem(a, z)} * {self.elem(b, z)};")

    def k_scalar_load(self, node, binds) -> None:
        src, dst = binds
        z = (0, 0, 0)
        self.emit(self.write(dst, z, self.read_f32(src, z)))

    def k_scalar_store(self, node, binds) -> None:
        src, dst = binds
        z = (0, 0, 0)
        self.emit(self.write(dst, z, self.read_f32(src, z)))

    def k_szero(self, node, binds) -> None:
        (dst,) = binds
        for local in itertools.product(*(range(s) for s in node.spec.op.dst.shape)):
            self.emit(self.write(dst, local, "0.0f"))

    def _loop_nest(self, shape, order) -> tuple[list[Affine], int]:
        """Open C loops over ``shape`` (dims in ``order``, outermost first); returns coords, opened."""
        coords = [Affine()] * 3
        opened = 0
        for d in order:
            if shape[d] > 1:
                v = self.fresh("x")
                self.open(f"for (ix {v} = 0; {v} < {shape[d]}; ++{v}) {{")
                coords[d] = Affine.var(v)
                opened += 1
        return coords, opened

    @staticmethod
    def _dim_order(b: Binding, shape) -> list[int]:
        """Dims ordered so that the innermost loop walks the binding's innermost live digit."""
        order = []
        for d in b.layout.digits:
            if d.dim in order:
                order.remove(d.dim)
            order.append(d.dim)
        return order + [d for d in range(3) if d not in order]

    def k_memzero(self, node, binds) -> None:
        (dst,) = binds
        shape = node.spec.op.dst.shape
        coords, opened = self._loop_nest(shape, self._dim_order(dst, shape))
        zero = "0" if dst.dtype == BF16 else "0.0f"
        self.emit(f"{self.elem(dst, coords)} = {zero};")
        for _ in range(opened):
            self.close()

    def k_copy(self, node, binds) -> None:
        src, dst = binds
        shape = node.spec.op.src.shape
        self.emit(f"// copy {node.spec.op.src.describe()} -> {node.spec.op.dst.describe()}")
        nest = self._digit_nest(dst.layout, shape, self._dim_order(src, shape))
        if nest is None:  # walk the source's dims (dst digits that are not a mixed radix of their dim)
            coords, opened = self._loop_nest(shape, self._dim_order(src, shape))
            ranges, guards = None, ()
        else:
            coords, opened, ranges, guards = nest
        for g in guards:
            self.open(f"if ({g}) {{")
        if src.dtype == dst.dtype:
            self.emit(f"{self.elem(dst, coords, ranges)} = {self.elem(src, coords)};")
        else:
            self.emit(self.write(dst, coords, self.read_f32(src, coords), ranges))
        for _ in range(opened + len(guards)):
            self.close()

    def _digit_nest(self, layout, shape, src_order):
        """Loops over a packed/interleaved destination's digits, so that the innermost loop is
        unit-stride on both sides (a vectorizable copy, where walking dims made the compiler divide
        every index); the outer loops follow the source's dim order (``src_order``, outermost first), so
        that it is read in whole lines. Each dim is the sum of its digits (c = 16*p + q); a ragged last
        strip is guarded. None when a dim's digits are not a mixed radix of it."""
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
                v = self.fresh("x")
                self.open(f"for (ix {v} = 0; {v} < {extent}; ++{v}) {{")
                ranges[v] = extent
                coords[d.dim] = coords[d.dim] + Affine.var(v, d.div)
                opened += 1
        guards = tuple(f"{coords[k].c()} < {shape[k]}" for k in range(3)
                       if shape[k] > 1 and any(d.dim == k and d.div > 1 for d in layout.digits)
                       and shape[k] % max(d.div for d in layout.digits if d.dim == k))
        return coords, opened, ranges, guards

    # -- kernels: vector -----------------------------------------------------------------------------
    @property
    def v(self) -> str:
        return "mv"  # namespace alias of the ISA helpers inside the kernel function

    def k_vzero(self, node, binds) -> None:
        (dst,) = binds
        bsz, m, n = node.spec.op.dst.shape
        regs = []
        for bb, r, s in itertools.product(range(bsz), range(m), range(0, n, self.W)):
            name, lane = self.reg(dst, (bb, r, s))
            if lane:
                raise CodegenError("vzero of a tile that does not start a register")
            regs.append(name)
        self.emit(" ".join(f"{x} = {self.v}::zero();" for x in regs))
        self.zero_regs |= frozenset(regs)

    def _vector_groups(self, mem: Binding, regb: Binding, shape):
        """Elements of a ≤W-element tile grouped by register: [(reg, first mem local, count)]."""
        groups: dict[str, list] = {}
        for local in itertools.product(*(range(s) for s in shape)):
            name, lane = self.reg(regb, local)
            groups.setdefault(name, []).append((lane, local))
        out = []
        for name, elems in groups.items():
            lanes = [l for l, _ in elems]
            if lanes != list(range(len(lanes))):
                raise CodegenError(f"vector move: lanes {lanes} of {name} are not 0..n-1")
            first = elems[0][1]
            for j, (_, local) in enumerate(elems[1:], 1):
                if self.step(mem, first, local) != j:
                    raise CodegenError(f"vector move: {mem.root} elements are not contiguous")
            out.append((name, first, len(elems)))
        return out

    def k_vload(self, node, binds) -> None:
        src, dst = binds
        fn = "load_bf16" if src.dtype == BF16 else "load_f32"
        for name, first, n in self._vector_groups(src, dst, node.spec.op.src.shape):
            self.emit(f"{name} = {self.v}::{fn}({self.ptr(src, first)}, {n});")
            self.zero_regs -= {name}

    def k_vstore(self, node, binds) -> None:
        src, dst = binds
        fn = "store_bf16" if dst.dtype == BF16 else "store_f32"
        for name, first, n in self._vector_groups(dst, src, node.spec.op.src.shape):
            self.emit(f"{self.v}::{fn}({self.ptr(dst, first)}, {name}, {n});")

    def k_fma_outer(self, node, binds) -> None:
        a, b, c = binds
        _, m, _, n = node.spec.op.iter_shape
        segs = range(0, n, self.W)
        bregs = []
        for s in segs:
            name, lane = self.reg(b, (0, 0, s))
            if lane:
                raise CodegenError("fma_outer: B segment does not start a register")
            bregs.append(name)
        for r in range(m):
            av = self.read_f32(a, (0, r, 0))
            bc = self.fresh("bc")
            stmts = [f"const {self.info.vtype} {bc} = {self.v}::bcast({av});"]
            for s, bn in zip(segs, bregs):
                cn, lane = self.reg(c, (0, r, s))
                if lane:
                    raise CodegenError("fma_outer: C segment does not start a register")
                if cn in self.zero_regs:
                    stmts.append(f"{cn} = {self.v}::mul({bc}, {bn});")
                    self.zero_regs -= {cn}
                else:
                    stmts.append(f"{cn} = {self.v}::fma({bc}, {bn}, {cn});")
            self.emit("{ " + " ".join(stmts) + " }")

    # -- dot products ------------------------------------------------------------------------------
    # C (1x1xn, scalar registers) += A (1xK) . B (Kxn, columns contiguous along K). Each column keeps
    # ``u`` vector accumulators (chunk j of K goes to accumulator j % u) so that few columns still have
    # enough independent FMA chains; they are added pairwise in a fixed order, then summed horizontally.
    def _dot_setup(self, node, binds, kind: str, chains: int):
        a, b, c = binds
        _, _, k, n = node.spec.op.iter_shape
        if c.level != Level.RF:
            raise CodegenError("dot kernels accumulate into scalar registers")
        for j in range(n):
            if k > 1 and self.step(b, (0, 0, j), (0, 1, j)) != 1:
                raise CodegenError("dot kernel: a B column is not contiguous along K")
        if kind != "widen" and k > 1 and self.step(a, (0, 0, 0), (0, 0, 1)) != 1:
            raise CodegenError("dot kernel: A is not contiguous along K")
        step = self.W if kind == "f32" else 2 * self.W
        full = k // step
        u = max(1, min(4, chains // n, full))
        self.open("{")
        self.emit(f"// {node.name}: {n} column(s), K = {k}, {u} accumulator(s) per column")
        accs = [[self.fresh("acc") for _ in range(u)] for _ in range(n)]
        flat = [x for col in accs for x in col]
        self.emit(f"{self.info.vtype} " + ", ".join(f"{x} = {self.v}::zero()" for x in flat) + ";")
        ap = self.fresh("ap")
        self.emit(f"const {a.dtype.ctype}* {ap} = {self.ptr(a, (0, 0, 0))};")
        bps = [self.fresh("bp") for _ in range(n)]
        for j, bp in enumerate(bps):
            self.emit(f"const {b.dtype.ctype}* {bp} = {self.ptr(b, (0, 0, j))};")
        return a, b, c, k, n, accs, ap, bps, u

    def _chunks(self, full: int, u: int, body) -> None:
        """Call body(chunk expression, accumulator index) for chunks 0..full-1, u per loop trip."""
        trips = full // u
        if trips == 1:
            for j in range(u):
                body(str(j), j)
        elif trips > 1:
            ch = self.fresh("ch")
            self.open(f"for (ix {ch} = 0; {ch} < {trips * u}; {ch} += {u}) {{")
            for j in range(u):
                body(f"({ch} + {j})" if j else ch, j)
            self.close()
        for j in range(full - trips * u):
            body(str(trips * u + j), j)

    def _dot_finish(self, c, accs) -> None:
        for j, col in enumerate(accs):
            terms = list(col)
            while len(terms) > 1:  # pairwise, fixed order
                terms = [f"{self.v}::add({x}, {y})" if y else x
                         for x, y in itertools.zip_longest(terms[0::2], terms[1::2])]
            self.emit(f"{self.elem(c, (0, 0, j))} += {self.v}::hsum({terms[0]});")
        self.close()

    def k_dot_f32(self, node, binds) -> None:
        a, b, c, k, n, accs, ap, bps, u = self._dot_setup(node, binds, "f32", chains=8)
        W = self.W
        full, tail = divmod(k, W)

        def body(chunk: str, j: int, cnt: int = W):
            off = f"{chunk} * {W}"
            av = self.fresh("av")
            self.emit(f"const {self.info.vtype} {av} = {self.v}::load_f32({ap} + {off}, {cnt});")
            for col, bp in zip(accs, bps):
                acc = col[j]
                self.emit(f"{acc} = {self.v}::fma({av}, {self.v}::load_f32({bp} + {off}, {cnt}), {acc});")

        self._chunks(full, u, body)
        if tail:
            body(str(full), 0, tail)
        self._dot_finish(c, accs)

    def k_dot_bf16_dp(self, node, binds) -> None:
        a, b, c, k, n, accs, ap, bps, u = self._dot_setup(node, binds, "dp", chains=8)
        step = 2 * self.W
        full, tail = divmod(k, step)

        def body(chunk: str, j: int, cnt: int = step):
            off = f"{chunk} * {step}"
            for col, bp in zip(accs, bps):
                acc = col[j]
                self.emit(f"{acc} = {self.v}::dp_bf16({acc}, {ap} + {off}, {bp} + {off}, {cnt});")

        self._chunks(full, u, body)
        if tail:
            body(str(full), 0, tail)
        self._dot_finish(c, accs)

    def k_dot_bf16_widen(self, node, binds) -> None:
        a, b, c, k, n, accs, ap, bps, u = self._dot_setup(node, binds, "widen", chains=4)
        W = self.W
        step = 2 * W
        full, tail = divmod(k, step)

        def strip_layout(k0: int, cnt: int):
            """(evens offset, odds offset) of the strip starting at k0 relative to ap, checked dense."""
            base = (0, 0, k0)
            ev = self.step(a, (0, 0, 0), base)
            od = self.step(a, (0, 0, 0), (0, 0, k0 + 1)) if cnt > 1 else 0
            if ev is None or od is None:
                raise CodegenError("dot_bf16_widen: A strip offsets are not constant")
            for j in range(1, (cnt + 1) // 2):
                if self.step(a, base, (0, 0, k0 + 2 * j)) != j:
                    raise CodegenError("dot_bf16_widen: A evens are not contiguous")
            for j in range(1, cnt // 2):
                if self.step(a, (0, 0, k0 + 1), (0, 0, k0 + 1 + 2 * j)) != j:
                    raise CodegenError("dot_bf16_widen: A odds are not contiguous")
            return ev, od

        def emit_strip(aoff: str, boff: str, odd_delta: int, cnt: int, j: int):
            ae, ao = self.fresh("ae"), self.fresh("ao")
            ne, no = (cnt + 1) // 2, cnt // 2
            self.emit(f"const {self.info.vtype} {ae} = {self.v}::load_f32({ap} + {aoff}, {ne});")
            if no:
                self.emit(f"const {self.info.vtype} {ao} = {self.v}::load_f32({ap} + {aoff} + {odd_delta}, {no});")
            for col, bp in zip(accs, bps):
                acc = col[j]
                be, bo = self.fresh("be"), self.fresh("bo")
                self.emit(f"{self.info.vtype} {be}, {bo}; {self.v}::load_bf16_pairs({bp} + {boff}, {cnt}, {be}, {bo});")
                self.emit(f"{acc} = {self.v}::fma({ae}, {be}, {acc});")
                if no:
                    self.emit(f"{acc} = {self.v}::fma({ao}, {bo}, {acc});")

        if full:
            ev0, od0 = strip_layout(0, step)
            sstride = strip_layout(step, step)[0] if full > 1 else step
            if ev0 != 0:
                raise CodegenError("dot_bf16_widen: A does not start its first strip")

            def body(chunk: str, j: int):
                emit_strip(f"{chunk} * {sstride}", f"{chunk} * {step}", od0, step, j)

            self._chunks(full, u, body)
        if tail:
            ev, od = strip_layout(full * step, tail)
            emit_strip(str(ev), str(full * step), od - ev, tail, 0)
        self._dot_finish(c, accs)


def root_bindings(user, lanes: int) -> tuple[Binding, ...]:
    from morello_build.ir.layout import NAMED

    shapes = ((user.batch, user.m, user.k), (user.batch, user.k, user.n), (user.batch, user.m, user.n))
    return tuple(
        Binding(name, shape, NAMED[lay], dt, Level.GL, (Affine(),) * 3, lanes)
        for name, shape, lay, dt in zip("abc", shapes, user.layouts, user.dtypes)
    )


def lower(impl, user, target, info: IsaInfo, rt: str) -> tuple[list[str], bool]:
    """The kernel body (lines) for ``impl``, and whether it uses the parallel-for callable."""
    lw = Lowerer(target, info, rt)
    lw.walk(impl, root_bindings(user, info.lanes))
    return lw.lines, lw.used_parallel
