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
from operator import attrgetter, itemgetter

from morello_build.ir.dtypes import DType
from morello_build.ir.epilogue import GATE_DEFAULT, NO_EPILOGUE, Epilogue
from morello_build.ir.layout import Layout
from morello_build.ir.levels import Level
from morello_build.ir.machine import ALIAS_MAX, ALIAS_MIN, DEFAULT_LIMITS, L2_WAYS
from morello_build.ir.ops import GATE, GATED, MATMUL, MOVE, PAIR, ZERO


class _once:
    """functools.cached_property without its lock (Python 3.11 takes one on every first read, and the search
    creates hundreds of thousands of ops and tiles, each read once or twice): the value is stored in the
    instance's __dict__, which later reads find before this (non-data) descriptor. Ops and tiles are immutable,
    so a race computes the same value twice at worst."""

    def __init__(self, fn):
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


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

    @_once
    def bytes(self) -> int:
        return _elements(self) * self.dtype.bytes

    @property
    def volume(self) -> int:
        return prod(self.shape)

    def tile(self, shape: tuple[int, int, int]) -> "TensorSpec":
        return _tile(self, tuple(shape))

    def at_level(self, level: Level) -> "TensorSpec":
        """This tile relabelled as held at ``level`` (a cache view's buffer): dataclasses.replace's result, without
        its cost in the search's hot path."""
        return TensorSpec(self.shape, self.dtype, self.layout, level, self.contig, self.vector_size, self.alias)

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


def columns_unit_stride(b: TensorSpec) -> bool:
    """Each column of a (1, K, n) B tile is a dense run along K (B stored N×K, i.e. ``col``): what the dot kernels
    read (target/kernels), and what the cost model's refunds ask of weights (synth/loops.may_stream)."""
    _, k, _ = b.shape
    return b.tile((1, k, 1)).unit_stride(1) or k == 1


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


def _hash_once(self) -> int:
    """The dataclass's hash (of its fields' tuple), computed on first use: the memo and the search's
    caches hash the same ops and specs many times."""
    h = self.__dict__.get("_hash")
    if h is None:
        h = hash(self._hash_fields(self))
        object.__setattr__(self, "_hash", h)
    return h


def _hashed_once(cls):
    """Class decorator (after @dataclass(frozen=True)): its hash is computed once per object."""
    cls._hash_fields = attrgetter(*(f.name for f in fields(cls)))  # its fields' tuple (all have 2 or more)
    cls.__hash__ = _hash_once
    return cls


def _defined_by(definition):
    """Class decorator: the op class takes its facts from its OpDef (class attributes, so the search's
    hot paths read them without a property call), and for each operand the function picking its tile's shape (its 3
    dims' extents) from an iteration shape (operand_tiles); its hash is computed once."""

    def decorate(cls):
        cls.definition = definition
        for name in _FACTS:
            setattr(cls, name, getattr(definition, name))
        cls.operand_tile_shapes = tuple(itemgetter(*dims) for dims in definition.operand_iter_dims)
        return _hashed_once(cls)

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

    # Each op class's operands and iteration shape are computed once per op (_once: outside the dataclass's
    # fields, so equality, order and hash are unchanged), as the search's hot paths read them over and over.
    @_once
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.a, self.b, self.c)

    @_once
    def iter_shape(self) -> tuple[int, int, int, int]:
        """Iteration space (batch, m, k, n)."""
        b, m, k = self.a.shape
        return (b, m, k, self.c.shape[2])

    def with_operands(self, ops, serial: bool | None = None) -> "Matmul":
        return Matmul(ops[0], ops[1], ops[2], self.accum, self.serial if serial is None else serial, self.epilogue)

    def accumulating(self) -> "Matmul":
        """This op accumulating into C (C += A · B): dataclasses.replace's result, without its cost in the
        search's hot path (the body of every peeled loop)."""
        return Matmul(self.a, self.b, self.c, True, self.serial, self.epilogue)


@_defined_by(GATED)
@dataclass(frozen=True, order=True)
class Gated:
    """The gated pair: C = act(A · B1 + bias1) ⊙ (A · B2 + bias2) (its epilogue says which bias and act)."""

    a: TensorSpec
    b1: TensorSpec
    b2: TensorSpec
    c: TensorSpec
    serial: bool = False
    epilogue: Epilogue = GATE_DEFAULT

    accum = False

    @_once
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.a, self.b1, self.b2, self.c)

    @_once
    def iter_shape(self) -> tuple[int, int, int, int]:
        b, m, k = self.a.shape
        return (b, m, k, self.c.shape[2])

    def with_operands(self, ops, serial: bool | None = None) -> "Gated":
        return Gated(*ops, self.serial if serial is None else serial, self.epilogue)


@_defined_by(PAIR)
@dataclass(frozen=True, order=True)
class Pair:
    """C1 += A · B1; C2 += A · B2: the gated pair's accumulation, into two register buffers."""

    a: TensorSpec
    b1: TensorSpec
    b2: TensorSpec
    c1: TensorSpec
    c2: TensorSpec
    serial: bool = False

    accum = True
    epilogue = NO_EPILOGUE

    @_once
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.a, self.b1, self.b2, self.c1, self.c2)

    @_once
    def iter_shape(self) -> tuple[int, int, int, int]:
        b, m, k = self.a.shape
        return (b, m, k, self.c1.shape[2])

    def with_operands(self, ops, serial: bool | None = None) -> "Pair":
        return Pair(*ops, self.serial if serial is None else serial)


@_defined_by(GATE)
@dataclass(frozen=True, order=True)
class Gate:
    """dst = act(x1 + bias1) ⊙ (x2 + bias2): the store of the gated pair's accumulators (its epilogue)."""

    x1: TensorSpec
    x2: TensorSpec
    dst: TensorSpec
    serial: bool = False
    epilogue: Epilogue = GATE_DEFAULT

    accum = False

    @_once
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.x1, self.x2, self.dst)

    @_once
    def iter_shape(self) -> tuple[int, int, int]:
        return self.dst.shape

    def with_operands(self, ops, serial: bool | None = None) -> "Gate":
        return Gate(*ops, self.serial if serial is None else serial, self.epilogue)


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

    @_once
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.src, self.dst)

    @_once
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

    @_once
    def operands(self) -> tuple[TensorSpec, ...]:
        return (self.dst,)

    @_once
    def iter_shape(self) -> tuple[int, int, int]:
        return self.dst.shape

    def with_operands(self, ops, serial: bool | None = None) -> "Zero":
        return Zero(ops[0], self.serial if serial is None else serial)


Op = Matmul | Gated | Pair | Gate | Move | Zero


LIMITED_LEVELS = tuple(lv for lv in Level if lv.limited)  # in MemoryLimits' (and peaks') order


def limit_index(level: Level) -> int:
    """A limited level's place in LIMITED_LEVELS (and in MemoryLimits.as_tuple)."""
    return LIMITED_LEVELS.index(level)


def operand_tiles(op, iter_shape) -> tuple[TensorSpec, ...]:
    """Each operand's tile for a tile ``iter_shape`` of the op's iteration space."""
    return tuple(t.tile(shape(iter_shape)) for t, shape in zip(op.operands, op.operand_tile_shapes))


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
        return MemoryLimits(*(left if lv is level else x for lv, x in zip(LIMITED_LEVELS, self.as_tuple())))

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.l1, self.vrf, self.rf)


assert tuple(f.name for f in fields(MemoryLimits)) == tuple(lv.name.lower() for lv in LIMITED_LEVELS)


@_hashed_once
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


_ROLES = {"matmul": ("input", "input", "matmul"), "gated": ("input",) * 3 + ("matmul",), "zero": ("zero",)}
_ROLES |= {"pair": ("input",) * 3 + ("matmul",) * 2, "gate": ("move",) * 3, "move": ("move", "move")}


@lru_cache(maxsize=1 << 18)
def canonicalize(spec: Spec) -> Spec:
    """Normal form for memoization (see _canonical), without the stride classes that change no decision,
    so that specs differing only there share memo entries."""
    return Spec(canonical_op(spec.op), spec.limits)


@lru_cache(maxsize=1 << 18)
def canonical_op(op):
    """The op part of ``canonicalize`` (it does not depend on the limits)."""
    return op.with_operands(canonical_operands(op.kind, op.operands))


def canonical_operands(kind: str, operands) -> tuple[TensorSpec, ...]:
    """The operands of an op of ``kind`` as ``canonical_op`` makes them (actions.canonical_body: no op first)."""
    return tuple(map(_canonical_operand, operands, _ROLES[kind]))


@lru_cache(maxsize=1 << 18)
def _canonical_operand(t: TensorSpec, role: str) -> TensorSpec:
    """``role``: "input" (of a matmul), "matmul" (its output), "move" or "zero"."""
    if t.alias and (role in ("move", "zero") or (role == "matmul" and t.rows() <= OUTPUT_ALIAS_RUNS)):
        t = replace(t, alias=0)
    return _canonical(t)
