"""Specs: immutable, hashable descriptions of what a (sub)program must compute.

Every tensor is rank 3, ``(batch, rows, cols)``: A is (B, M, K), B is (B, K, N), C is (B, M, N).
A spec is the operation (Matmul, Move or Zero) plus the memory still available at each level.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from functools import lru_cache
from math import prod

from morello_build.layout import NAMED, Layout, col_major, row_major


class SpecError(ValueError):
    """A user-facing problem with a spec string: the message is one line naming the bad token."""


class DType(Enum):
    F32 = "f32"
    BF16 = "bf16"

    @property
    def bytes(self) -> int:
        return {"f32": 4, "bf16": 2}[self.value]

    @property
    def ctype(self) -> str:
        return {"f32": "float", "bf16": "uint16_t"}[self.value]


class Level(IntEnum):
    """Memory levels, slowest first. VRF: vector registers; RF: scalar registers."""

    GL = 0
    L1 = 1
    VRF = 2
    RF = 3


@dataclass(frozen=True, order=True)
class TensorSpec:
    shape: tuple[int, int, int]
    dtype: DType
    layout: Layout
    level: Level = Level.GL
    contig: int = 3  # innermost layout digits over which this tile is dense (see layout.py)
    vector_size: int | None = None  # elements per vector register, when level is VRF

    def __post_init__(self):
        object.__setattr__(
            self, "_hash", hash((self.shape, self.dtype, self.layout, self.level, self.contig, self.vector_size))
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def bytes(self) -> int:
        return self.layout.buffer_elements(self.shape) * self.dtype.bytes

    @property
    def volume(self) -> int:
        return prod(self.shape)

    def tile(self, shape: tuple[int, int, int]) -> "TensorSpec":
        return _tile(self, tuple(shape))

    def canonical(self) -> "TensorSpec":
        return _canonical(self)

    def lines(self) -> int:
        return self.layout.cache_lines(self.shape, self.contig, self.dtype.bytes)

    def unit_stride(self, dim: int) -> bool:
        return self.layout.is_unit_stride_run(self.shape, self.contig, dim)

    def describe(self) -> str:
        s = "x".join(map(str, self.shape))
        vs = f"/{self.vector_size}" if self.vector_size else ""
        return f"{self.dtype.value}[{s}]{{{self.layout.name}}}@{self.level.name}{vs}"


@lru_cache(maxsize=1 << 18)
def _tile(t: TensorSpec, shape: tuple[int, int, int]) -> TensorSpec:
    contig = t.layout.tile_contiguity(shape, t.shape, t.contig)
    return TensorSpec(shape, t.dtype, t.layout, t.level, contig, t.vector_size)


@lru_cache(maxsize=1 << 18)
def _canonical(t: TensorSpec) -> TensorSpec:
    layout, contig = t.layout.canonical(t.shape, t.contig)
    vs = t.vector_size if t.level == Level.VRF else None
    return TensorSpec(t.shape, t.dtype, layout, t.level, contig, vs)


# -- operations ------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Matmul:
    """C (+)= A · B, batched over dim 0."""

    a: TensorSpec
    b: TensorSpec
    c: TensorSpec
    accum: bool = False
    serial: bool = False

    kind = "matmul"
    iter_names = ("batch", "m", "k", "n")
    operand_names = ("a", "b", "c")
    outputs = (2,)

    @property
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.a, self.b, self.c)

    @property
    def iter_shape(self) -> tuple[int, int, int, int]:
        """Iteration space (batch, m, k, n)."""
        b, m, k = self.a.shape
        return (b, m, k, self.c.shape[2])

    # Which iteration dims index each operand's three dims.
    operand_iter_dims = ((0, 1, 2), (0, 2, 3), (0, 1, 3))
    reduction_dims = (2,)

    def with_operands(self, ops, serial: bool | None = None) -> "Matmul":
        return Matmul(ops[0], ops[1], ops[2], self.accum, self.serial if serial is None else serial)


@dataclass(frozen=True, order=True)
class Move:
    """Copy ``src`` into ``dst`` (same shape; the dtype may widen bf16 -> f32 or round f32 -> bf16)."""

    src: TensorSpec
    dst: TensorSpec
    serial: bool = False

    kind = "move"
    iter_names = ("batch", "row", "col")
    operand_names = ("src", "dst")
    outputs = (1,)
    operand_iter_dims = ((0, 1, 2), (0, 1, 2))
    reduction_dims = ()
    accum = False

    @property
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.src, self.dst)

    @property
    def iter_shape(self) -> tuple[int, int, int]:
        return self.dst.shape

    def with_operands(self, ops, serial: bool | None = None) -> "Move":
        return Move(ops[0], ops[1], self.serial if serial is None else serial)


@dataclass(frozen=True, order=True)
class Zero:
    dst: TensorSpec
    serial: bool = False

    kind = "zero"
    iter_names = ("batch", "row", "col")
    operand_names = ("dst",)
    outputs = (0,)
    operand_iter_dims = ((0, 1, 2),)
    reduction_dims = ()
    accum = False

    @property
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.dst,)

    @property
    def iter_shape(self) -> tuple[int, int, int]:
        return self.dst.shape

    def with_operands(self, ops, serial: bool | None = None) -> "Zero":
        return Zero(ops[0], self.serial if serial is None else serial)


Op = Matmul | Move | Zero


@dataclass(frozen=True, order=True)
class MemoryLimits:
    """Bytes still available at L1, VRF and RF (GL is unbounded)."""

    l1: int
    vrf: int
    rf: int

    def get(self, level: Level) -> int | None:
        return {Level.GL: None, Level.L1: self.l1, Level.VRF: self.vrf, Level.RF: self.rf}[level]

    def minus(self, level: Level, nbytes: int) -> "MemoryLimits | None":
        if level == Level.GL:
            return self
        left = self.get(level) - nbytes
        if left < 0:
            return None
        return replace(self, **{level.name.lower(): left})

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.l1, self.vrf, self.rf)


@dataclass(frozen=True, order=True)
class Spec:
    op: Op
    limits: MemoryLimits = field(default=MemoryLimits(48 * 1024, 32 * 64, 16 * 4))

    def canonical(self) -> "Spec":
        return canonicalize(self)

    def describe(self) -> str:
        op = self.op
        args = ", ".join(t.describe() for t in op.operands)
        flags = (" accum" if op.accum else "") + (" serial" if op.serial else "")
        return f"{op.kind}({args}){flags}"


def canonicalize(spec: Spec) -> Spec:
    """Normal form for memoization: layouts stripped of unit digits, vector sizes only in VRF."""
    return Spec(spec.op.with_operands(tuple(_canonical(t) for t in spec.op.operands)), spec.limits)


# -- the spec string grammar (contract) -----------------------------------------------------------
_LAYOUTS = {"row": row_major(), "col": col_major()}
_DTYPES = {d.value: d for d in DType}
ACCEPTED = "matmul MxKxN [a=DTYPE[:LAYOUT]] [b=DTYPE[:LAYOUT]] [c=DTYPE[:LAYOUT]] [batch=B] [accum] [serial]"


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

    def to_spec(self, limits: MemoryLimits | None = None) -> Spec:
        shapes = ((self.batch, self.m, self.k), (self.batch, self.k, self.n), (self.batch, self.m, self.n))
        ops = tuple(
            TensorSpec(shape, dt, _LAYOUTS[lay]) for shape, dt, lay in zip(shapes, self.dtypes, self.layouts)
        )
        op = Matmul(*ops, accum=self.accum, serial=self.serial)
        return canonicalize(Spec(op, limits) if limits else Spec(op))

    def __str__(self) -> str:
        return format_spec(self)


def _bad(token: str, why: str) -> SpecError:
    return SpecError(f"bad spec token '{token}': {why}; accepted: {ACCEPTED}")


def _positive_int(token: str, text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise _bad(token, "expected a positive integer")
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
        raise _bad(tokens[1], "expected a shape MxKxN")
    m, k, n = (_positive_int(tokens[1], d) for d in dims)
    dtypes, layouts = [DType.F32] * 3, ["row"] * 3
    batch, accum, serial, seen = 1, False, False, set()
    for tok in tokens[2:]:
        key = tok.split("=", 1)[0]
        if key in seen:
            raise _bad(tok, "given twice")
        seen.add(key)
        if tok == "accum":
            accum = True
        elif tok == "serial":
            serial = True
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
    return UserSpec(m, k, n, tuple(dtypes), tuple(layouts), batch, accum, serial)


def format_spec(u: UserSpec) -> str:
    """The canonical spec string: defaults omitted, options in grammar order."""
    parts = ["matmul", f"{u.m}x{u.k}x{u.n}"]
    for name, dt, lay in zip("abc", u.dtypes, u.layouts):
        if dt != DType.F32 or lay != "row":
            parts.append(f"{name}={dt.value}" + (f":{lay}" if lay != "row" else ""))
    if u.batch != 1:
        parts.append(f"batch={u.batch}")
    if u.accum:
        parts.append("accum")
    if u.serial:
        parts.append("serial")
    return " ".join(parts)


assert set(_LAYOUTS) <= set(NAMED)
