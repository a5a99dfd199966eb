"""Specs: immutable, hashable descriptions of what a (sub)program must compute.

Every tensor is rank 3, ``(batch, rows, cols)``: A is (B, M, K), B is (B, K, N), C is (B, M, N).
A spec is the operation (Matmul, Move or Zero) plus the memory still available at each level. The
operations' facts are op definitions (ops.py), the levels' facts live on the levels (levels.py), and the
memory-system values the spec algebra needs before a target is chosen are in machine.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from math import prod

from morello_build.ir.dtypes import DType
from morello_build.ir.epilogue import ACTIVATIONS, NO_EPILOGUE, Epilogue
from morello_build.ir.layout import NAMED, Layout, col_major, row_major
from morello_build.ir.levels import Level
from morello_build.ir.machine import ALIAS_MAX, ALIAS_MIN, DEFAULT_LIMITS, L2_WAYS
from morello_build.ir.ops import MATMUL, MOVE, ZERO
from morello_build.ir.sizes import operand_bytes_problem, size_problem


class SpecError(ValueError):
    """A user-facing problem with a spec string: the message is one line naming the bad token."""


@dataclass(frozen=True, order=True)
class TensorSpec:
    shape: tuple[int, int, int]
    dtype: DType
    layout: Layout
    level: Level = Level.GL
    contig: int = 3  # innermost layout digits over which this tile is dense (see layout.py)
    vector_size: int | None = None  # elements per vector register, when level is VRF
    alias: int = 0  # stride class of the tile's runs in memory (see alias_stride)

    def __post_init__(self):
        object.__setattr__(
            self,
            "_hash",
            hash((self.shape, self.dtype, self.layout, self.level, self.contig, self.vector_size, self.alias)),
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def bytes(self) -> int:
        return _elements(self) * self.dtype.bytes

    @property
    def volume(self) -> int:
        return prod(self.shape)

    def tile(self, shape: tuple[int, int, int]) -> "TensorSpec":
        return _tile(self, tuple(shape))

    def canonical(self) -> "TensorSpec":
        return _canonical(self)

    def lines(self) -> int:
        return _lines(self)

    def unit_stride(self, dim: int) -> bool:
        return self.layout.is_unit_stride_run(self.shape, self.contig, dim)

    def runs(self) -> int:
        """How many separate contiguous runs the tile is made of (1 for a dense tile)."""
        return _runs(self)

    def rows(self) -> int:
        """Lines along the innermost digit of extent > 1 (so unit digits, which canonical forms strip,
        change nothing): the runs a tile of this tile can have, except that the elements of a column
        one element wide are runs of their own, and count as one row here."""
        inner = [d for d, e in zip(self.layout.digits, self.layout.extents(self.shape)) if e > 1]
        return self.volume // self.shape[inner[-1].dim] if inner else 1

    def describe(self) -> str:
        s = "x".join(map(str, self.shape))
        vs = f"/{self.vector_size}" if self.vector_size else ""
        alias = f"~{self.alias // 1024}K" if self.alias else ""
        return f"{self.dtype.value}[{s}]{{{self.layout.name}}}@{self.level.name}{vs}{alias}"


# Cached per tile: the search asks for the same tiles' sizes many times.
@lru_cache(maxsize=1 << 18)
def _elements(t: TensorSpec) -> int:
    return t.layout.buffer_elements(t.shape)


@lru_cache(maxsize=1 << 18)
def _lines(t: TensorSpec) -> int:
    return t.layout.cache_lines(t.shape, t.contig, t.dtype.bytes)


@lru_cache(maxsize=1 << 18)
def _runs(t: TensorSpec) -> int:
    return -(-_elements(t) // t.layout.contiguous_run(t.shape, t.contig))


def alias_stride(run_stride_bytes: int) -> int:
    """The stride class of a tensor whose runs (rows) start ``run_stride_bytes`` apart: the largest power
    of two dividing the stride, when that is at least ``ALIAS_MIN`` (else 0). Runs whose addresses
    differ by a multiple of 2^j share cache sets in every cache whose set period divides 2^j, so this
    is what the cost model needs to tell a self-evicting tile (rows of a 1024-wide f32 matrix, 4 KiB
    apart) from a benign one (256 wide, 1 KiB apart); the stride itself would split the memo for no gain."""
    p = run_stride_bytes & -run_stride_bytes
    return min(p, ALIAS_MAX) if p >= ALIAS_MIN else 0


@lru_cache(maxsize=1 << 18)
def _tile(t: TensorSpec, shape: tuple[int, int, int]) -> TensorSpec:
    contig = t.layout.tile_contiguity(shape, t.shape, t.contig)
    return TensorSpec(shape, t.dtype, t.layout, t.level, contig, t.vector_size, t.alias)


@lru_cache(maxsize=1 << 18)
def _canonical(t: TensorSpec) -> TensorSpec:
    """Layouts without unit digits, vector sizes only in VRF, stride classes only in main memory on
    tiles of several rows (runs of the innermost dim: a single row's tiles never have a stride)."""
    layout, contig = t.layout.canonical(t.shape, t.contig)
    vs = t.vector_size if t.level == Level.VRF else None
    alias = t.alias if t.level == Level.GL and t.rows() > 1 else 0
    return TensorSpec(t.shape, t.dtype, layout, t.level, contig, vs, alias)


# -- operations ------------------------------------------------------------------------------------
_FACTS = ("kind", "iter_names", "operand_names", "outputs", "operand_iter_dims", "reduction_dims")


def _defined_by(definition):
    """Class decorator: the op class takes its facts from its OpDef (class attributes, so the search's
    hot paths read them without a property call)."""

    def decorate(cls):
        cls.definition = definition
        for name in _FACTS:
            setattr(cls, name, getattr(definition, name))
        return cls

    return decorate


@_defined_by(MATMUL)
@dataclass(frozen=True, order=True)
class Matmul:
    """C (+)= A · B, batched over dim 0; with an epilogue, C = epilogue(A · B) (ir/epilogue.py)."""

    a: TensorSpec
    b: TensorSpec
    c: TensorSpec
    accum: bool = False
    serial: bool = False
    epilogue: Epilogue = NO_EPILOGUE

    @property
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.a, self.b, self.c)

    @property
    def iter_shape(self) -> tuple[int, int, int, int]:
        """Iteration space (batch, m, k, n)."""
        b, m, k = self.a.shape
        return (b, m, k, self.c.shape[2])

    def with_operands(self, ops, serial: bool | None = None) -> "Matmul":
        return Matmul(ops[0], ops[1], ops[2], self.accum, self.serial if serial is None else serial, self.epilogue)


@_defined_by(MOVE)
@dataclass(frozen=True, order=True)
class Move:
    """Copy ``src`` into ``dst`` (same shape; the dtype may widen bf16 -> f32 or round f32 -> bf16). With an
    epilogue (the store of a matmul's accumulators into C), dst = epilogue(src)."""

    src: TensorSpec
    dst: TensorSpec
    serial: bool = False
    epilogue: Epilogue = NO_EPILOGUE

    accum = False

    @property
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.src, self.dst)

    @property
    def iter_shape(self) -> tuple[int, int, int]:
        return self.dst.shape

    def with_operands(self, ops, serial: bool | None = None) -> "Move":
        return Move(ops[0], ops[1], self.serial if serial is None else serial, self.epilogue)


@_defined_by(ZERO)
@dataclass(frozen=True, order=True)
class Zero:
    dst: TensorSpec
    serial: bool = False

    accum = False
    epilogue = NO_EPILOGUE

    @property
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.dst,)

    @property
    def iter_shape(self) -> tuple[int, int, int]:
        return self.dst.shape

    def with_operands(self, ops, serial: bool | None = None) -> "Zero":
        return Zero(ops[0], self.serial if serial is None else serial)


Op = Matmul | Move | Zero


LIMITED_LEVELS = tuple(lv for lv in Level if lv.limited)  # in MemoryLimits' (and peaks') order


def operand_tiles(op, iter_shape) -> tuple[TensorSpec, ...]:
    """Each operand's tile for a tile ``iter_shape`` of the op's iteration space."""
    return tuple(t.tile(tuple(iter_shape[j] for j in dims)) for t, dims in zip(op.operands, op.operand_iter_dims))


@dataclass(frozen=True, order=True)
class MemoryLimits:
    """Bytes still available at L1, VRF and RF (GL is unbounded; L2 buffers are bounded one by one)."""

    l1: int
    vrf: int
    rf: int

    def get(self, level: Level) -> int | None:
        return getattr(self, level.name.lower()) if level.limited else None

    def minus(self, level: Level, nbytes: int) -> "MemoryLimits | None":
        if not level.limited:
            return self
        left = self.get(level) - nbytes
        if left < 0:
            return None
        return replace(self, **{level.name.lower(): left})

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.l1, self.vrf, self.rf)


assert tuple(f.name for f in fields(MemoryLimits)) == tuple(lv.name.lower() for lv in LIMITED_LEVELS)


@dataclass(frozen=True, order=True)
class Spec:
    op: Op
    limits: MemoryLimits = field(default=MemoryLimits(*DEFAULT_LIMITS))

    def canonical(self) -> "Spec":
        return canonicalize(self)

    def describe(self) -> str:
        op = self.op
        args = ", ".join(t.describe() for t in op.operands)
        flags = (" accum" if op.accum else "") + (" serial" if op.serial else "")
        flags += f" [{op.epilogue.describe()}]" if op.epilogue else ""
        return f"{op.kind}({args}){flags}"


# A stride class matters to a matmul's output only through L2 reuse (cost.l2_evicts), which needs more
# runs than half the ways of an L2 set (machine.L2_WAYS, Target.l2_ways), and not at all to moves and
# zeroing. A tile of at most this many rows has no tile with more runs.
OUTPUT_ALIAS_RUNS = L2_WAYS // 2


_ROLES = {"matmul": ("input", "input", "matmul"), "move": ("move", "move"), "zero": ("zero",)}


@lru_cache(maxsize=1 << 18)
def canonicalize(spec: Spec) -> Spec:
    """Normal form for memoization (see _canonical), without the stride classes that change no decision,
    so that specs differing only there share memo entries."""
    op = spec.op
    return Spec(op.with_operands(tuple(map(_canonical_operand, op.operands, _ROLES[op.kind]))), spec.limits)


@lru_cache(maxsize=1 << 18)
def _canonical_operand(t: TensorSpec, role: str) -> TensorSpec:
    """``role``: "input" (of a matmul), "matmul" (its output), "move" or "zero"."""
    if t.alias and (role in ("move", "zero") or (role == "matmul" and t.rows() <= OUTPUT_ALIAS_RUNS)):
        t = replace(t, alias=0)
    return _canonical(t)


# -- the spec string grammar (contract) -----------------------------------------------------------
_LAYOUTS = {"row": row_major(), "col": col_major()}
_DTYPES = {d.value: d for d in DType}
ACCEPTED = (
    "matmul MxKxN [a=DTYPE[:LAYOUT]] [b=DTYPE[:LAYOUT]] [c=DTYPE[:LAYOUT]] [batch=B] "
    f"[scale] [colscale] [bias] [act={'|'.join(ACTIVATIONS)}] [residual] [accum] [serial]"
)
_EPILOGUE_FLAGS = ("scale", "colscale", "bias", "residual")


@dataclass(frozen=True)
class UserSpec:
    """What a spec string says, before it becomes a Spec at GL."""

    m: int
    k: int
    n: int
    dtypes: tuple[DType, DType, DType] = (DType.F32, DType.F32, DType.F32)
    layouts: tuple[str, str, str] = ("row", "row", "row")
    batch: int = 1
    accum: bool = False
    serial: bool = False
    epilogue: Epilogue = NO_EPILOGUE

    definition = MATMUL  # the grammar names matmuls only

    @property
    def iter_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.k, self.n)

    def operand_shapes(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(tuple(self.iter_shape[j] for j in dims) for dims in self.definition.operand_iter_dims)

    def to_spec(self, limits: MemoryLimits | None = None) -> Spec:
        shapes = self.operand_shapes()
        ops = tuple(
            TensorSpec(shape, dt, _LAYOUTS[lay], alias=alias_stride(shape[1 if lay == "col" else 2] * dt.bytes))
            for shape, dt, lay in zip(shapes, self.dtypes, self.layouts)
        )
        op = Matmul(*ops, accum=self.accum, serial=self.serial, epilogue=self.epilogue)
        return canonicalize(Spec(op, limits) if limits else Spec(op))

    def __str__(self) -> str:
        return format_spec(self)


def _bad(token: str, why: str) -> SpecError:
    return SpecError(f"bad spec token '{token}': {why}; accepted: {ACCEPTED}")


def _positive_int(token: str, text: str) -> int:
    if why := size_problem(text):
        raise _bad(token, why)
    return int(text)


def parse_spec(text: str) -> UserSpec:
    """Parse the spec string grammar of DESIGN.md; raise SpecError naming the first bad token."""
    tokens = text.split()
    if not tokens:
        raise SpecError(f"empty spec; accepted: {ACCEPTED}")
    if tokens[0] != "matmul":
        raise _bad(tokens[0], "unknown operation (only 'matmul')")
    if len(tokens) < 2:
        raise SpecError(f"spec is missing its MxKxN shape; accepted: {ACCEPTED}")
    dims = tokens[1].split("x")
    if len(dims) != 3:
        raise _bad(tokens[1], "expected a shape MxKxN (three sizes separated by the letter x)")
    m, k, n = (_positive_int(tokens[1], d) for d in dims)
    dtypes, layouts = [DType.F32] * 3, ["row"] * 3
    batch, accum, serial, seen, epi = 1, False, False, set(), {}
    for tok in tokens[2:]:
        key = tok.split("=", 1)[0]
        if key in seen:
            raise _bad(tok, "given twice")
        seen.add(key)
        if tok == "accum":
            accum = True
        elif tok == "serial":
            serial = True
        elif tok in _EPILOGUE_FLAGS:
            epi[tok] = True
        elif key == "act" and "=" in tok:
            epi["act"] = _activation(tok)
        elif key == "batch" and "=" in tok:
            batch = _positive_int(tok, tok.split("=", 1)[1])
        elif key in ("a", "b", "c") and "=" in tok:
            i = "abc".index(key)
            dt, colon, lay = tok.split("=", 1)[1].partition(":")
            if dt not in _DTYPES:
                raise _bad(tok, f"unknown dtype '{dt}' (accepted: {', '.join(_DTYPES)})")
            if colon and lay not in _LAYOUTS:
                raise _bad(tok, f"unknown layout '{lay}' (accepted: {', '.join(_LAYOUTS)})")
            dtypes[i], layouts[i] = _DTYPES[dt], lay if colon else "row"
        else:
            raise _bad(tok, "unknown option")
    epilogue = Epilogue(**epi)
    if epilogue and accum:
        raise _bad("accum", "an epilogue overwrites C (pass the old C as the residual instead)")
    if epilogue and layouts[2] != "row":
        raise _bad(f"c={dtypes[2].value}:{layouts[2]}", "an epilogue needs C row-major")
    user = UserSpec(m, k, n, tuple(dtypes), tuple(layouts), batch, accum, serial, epilogue)
    if why := operand_bytes_problem(user.operand_shapes(), dtypes):
        raise SpecError(f"spec '{' '.join(tokens)}' is too large: {why}")
    return user


def _activation(tok: str) -> str:
    name = tok.split("=", 1)[1]
    if name not in ACTIVATIONS:
        raise _bad(tok, f"unknown activation '{name}' (accepted: {', '.join(ACTIVATIONS)})")
    return name


def format_spec(u: UserSpec) -> str:
    """The canonical spec string: defaults omitted, options in grammar order."""
    parts = ["matmul", f"{u.m}x{u.k}x{u.n}"]
    for name, dt, lay in zip("abc", u.dtypes, u.layouts):
        if dt != DType.F32 or lay != "row":
            parts.append(f"{name}={dt.value}" + (f":{lay}" if lay != "row" else ""))
    if u.batch != 1:
        parts.append(f"batch={u.batch}")
    if u.epilogue:
        parts.append(u.epilogue.describe())
    if u.accum:
        parts.append("accum")
    if u.serial:
        parts.append("serial")
    return " ".join(parts)


assert set(_LAYOUTS) <= set(NAMED)
