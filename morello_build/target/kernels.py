"""The microkernel catalog: for each kernel, the specs it implements, the ISA features it needs and the
cost features it counts (synth/cost.py prices them: kernels count, they never price).

Kernels are generic over the vector width: codegen picks the AVX2, AVX-512 or Highway template for the
target. Registers hold f32 only (bf16 is widened on the way in and rounded on the way out).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Callable

from morello_build.ir.spec import DType, Level, Matmul, TensorSpec
from morello_build.synth.cost import (
    Features,
    fma_steps,
    lines_from,
    lines_read,
    streams_read,
)

F32, BF16 = DType.F32, DType.BF16
MEMORY = (Level.GL, Level.L2, Level.L1)


@dataclass(frozen=True)
class KernelDef:
    name: str
    kind: str  # the op kind it implements
    features: frozenset[str]
    applies: Callable  # (op, target) -> bool
    cost: Callable  # (op, target) -> cost.Features: the counts its cost is made of
    doc: str

    def __str__(self) -> str:
        return self.name


# -- predicates shared by several kernels ----------------------------------------------------------
def in_vrf(t: TensorSpec, target) -> bool:
    return t.level == Level.VRF and t.dtype == F32 and t.vector_size == target.lanes


def registers(t: TensorSpec, target) -> int:
    """Vector registers a VRF tile occupies: one per row segment of at most W lanes."""
    b, m, n = t.shape
    return b * m * ceil(n / target.lanes)


def single_run_dim(t: TensorSpec) -> int:
    """The one dim with extent > 1 (2 when there is none)."""
    dims = [i for i, s in enumerate(t.shape) if s > 1]
    return dims[0] if len(dims) == 1 else (2 if not dims else -1)


def columns_unit_stride(b: TensorSpec) -> bool:
    """Each column of a (1, K, n) B tile is a dense run along K (B stored N×K, i.e. ``col``)."""
    _, k, _ = b.shape
    return b.tile((1, k, 1)).unit_stride(1) or k == 1


def interleaved_for(a: TensorSpec, lanes: int) -> bool:
    """A's K strips store evens then odds in halves of ``lanes`` (layout.interleaved, strip 2W)."""
    ds = a.layout.digits
    return (
        len(ds) >= 2
        and (ds[-2].dim, ds[-2].div, ds[-2].mod) == (2, 1, 2)
        and (ds[-1].dim, ds[-1].div, ds[-1].mod) == (2, 2, lanes)
        and a.contig >= min(3, len(ds))
    )


def _dot_shape(op: Matmul, target, max_cols: int) -> bool:
    b, m, k, n = op.iter_shape
    return (
        b == 1 and m == 1 and n <= max_cols and op.accum and target.lanes >= 8
        and op.c.level == Level.RF and op.c.dtype == F32
        and op.a.level in MEMORY and op.b.level in MEMORY
        and columns_unit_stride(op.b)
    )


# -- matmul kernels --------------------------------------------------------------------------------
def _mac_applies(op, target):
    return op.iter_shape == (1, 1, 1, 1) and op.accum and all(
        t.level == Level.RF and t.dtype == F32 for t in op.operands
    )


def _fma_outer_applies(op, target):
    b, m, k, n = op.iter_shape
    return (
        b == 1 and k == 1 and op.accum and target.lanes > 0
        and in_vrf(op.c, target) and in_vrf(op.b, target)
        and op.a.dtype == F32 and op.a.level in (Level.GL, Level.L1, Level.RF)
        and registers(op.c, target) + ceil(n / target.lanes) + 2 <= target.vector_regs
    )


def _fma_outer_cost(op, target):
    _, m, _, n = op.iter_shape
    bcast = Features.of(vec_op=m) if op.a.level == Level.RF else Features.of(vec_load=m)
    # Each accumulator is updated once per step: with few of them, FMA latency, not throughput, binds.
    return fma_steps(m * ceil(n / target.lanes), target.costs) + bcast + lines_read(op.a)


def _max_dot_cols(target, accumulators_per_col):
    # At most 4 B columns at once (B in main memory pays for interleaved streams, see cost.streams_read; with
    # K*2 = 4 KiB rows on Zen 5: 10.5 GB/s with 8 columns, 22.6 GB/s with 4).
    return max(1, min(4, (target.vector_regs - 4) // accumulators_per_col))


def _dot_f32_applies(op, target):
    return (
        _dot_shape(op, target, _max_dot_cols(target, 1))
        and op.a.dtype == F32 and op.b.dtype == F32 and op.a.unit_stride(2)
    )


def _dot_f32_cost(op, target):
    _, _, k, n = op.iter_shape
    steps = ceil(k / target.lanes)
    return (
        Features.of(vec_fma=steps * n, vec_load=steps * (n + 1), hsum=n)
        + lines_read(op.a) + streams_read(op.b, n)
    )


def _dot_widen_applies(op, target):
    return (
        _dot_shape(op, target, _max_dot_cols(target, 2))
        and op.a.dtype == F32 and op.b.dtype == BF16 and interleaved_for(op.a, target.lanes)
    )


def _dot_widen_cost(op, target):
    _, _, k, n = op.iter_shape
    steps = ceil(k / (2 * target.lanes))
    return (
        Features.of(vec_load=steps * (2 + n), vec_op=steps * n * 2 + n, vec_fma=steps * n * 2, hsum=n)
        + lines_read(op.a) + streams_read(op.b, n)
    )


def _dot_dp_applies(op, target):
    return (
        _dot_shape(op, target, _max_dot_cols(target, 1))
        and op.a.dtype == BF16 and op.b.dtype == BF16 and op.a.unit_stride(2)
    )


def _dot_dp_cost(op, target):
    _, _, k, n = op.iter_shape
    steps = ceil(k / (2 * target.lanes))
    return (
        Features.of(vec_load=steps * (1 + n), vec_fma=steps * n, hsum=n)
        + lines_read(op.a) + streams_read(op.b, n)
    )


# -- moves -----------------------------------------------------------------------------------------
def _vector_move_shape(mem: TensorSpec, reg: TensorSpec, target) -> bool:
    d = single_run_dim(mem)
    return (
        target.lanes > 0 and in_vrf(reg, target) and d >= 0
        and mem.shape[d] <= target.lanes and mem.unit_stride(d) and reg.unit_stride(d)
    )


def _vload_applies(op, target):
    return op.src.level in MEMORY and _vector_move_shape(op.src, op.dst, target)


def _vload_cost(op, target):
    widen = 1 if op.src.dtype == BF16 else 0
    return Features.of(vec_load=1, vec_op=widen) + lines_read(op.src)


def _vstore_applies(op, target):
    return op.dst.level in MEMORY and _vector_move_shape(op.dst, op.src, target)


def _vstore_cost(op, target):
    """A store into main memory dirties its lines, which are written back: C tiles stored once per k slice
    cost that traffic every slice (1024^3: k slices of 512 instead of 256 ran 13.7 ms instead of 14.2)."""
    writeback = op.dst.lines() if op.dst.level == Level.GL else 0
    return Features.of(vec_store=1, vec_op=2 if op.dst.dtype == BF16 else 0, gl_line=writeback)


def _scalar_load_applies(op, target):
    return op.iter_shape == (1, 1, 1) and op.src.level in MEMORY and op.dst.level == Level.RF and op.dst.dtype == F32


def _scalar_store_applies(op, target):
    return op.iter_shape == (1, 1, 1) and op.src.level == Level.RF and op.dst.level in MEMORY


def _scalar_move_cost(op, target):
    return Features.of(scalar_op=1) + lines_read(op.src)  # a register source reads no lines


def _copy_applies(op, target):
    return op.src.level in MEMORY and op.dst.level in MEMORY


def _copy_cost(op, target):
    spill = op.dst.lines() if op.dst.level == Level.GL else 0  # a scratch block's lines leave L1
    return Features.of(copy_elem=op.src.volume) + lines_from(op.src) + Features.of(l2_line=spill)


# -- zeroing ---------------------------------------------------------------------------------------
def _vzero_applies(op, target):
    return in_vrf(op.dst, target)


def _vzero_cost(op, target):
    return Features.of(vec_zero=registers(op.dst, target))


def _szero_applies(op, target):
    return op.dst.level == Level.RF


def _szero_cost(op, target):
    return Features.of(vec_zero=op.dst.volume)


def _memzero_applies(op, target):
    return op.dst.level in MEMORY


def _memzero_cost(op, target):
    return Features.of(copy_elem=op.dst.volume * 0.5, vec_store=op.dst.lines())


_VEC = frozenset({"avx2"})
CATALOG = (
    KernelDef("mac_scalar", "matmul", frozenset(), _mac_applies, lambda op, t: Features.of(scalar_op=1),
              "c += a * b on scalar registers"),
    KernelDef("fma_outer", "matmul", _VEC, _fma_outer_applies, _fma_outer_cost,
              "register tile C[m,n] += broadcast(A[m,0]) * B[0,n]: one FMA per C register"),
    KernelDef("dot_f32", "matmul", _VEC, _dot_f32_applies, _dot_f32_cost,
              "n f32 dot products over K (B stored N×K), vector accumulators, one horizontal sum each"),
    KernelDef("dot_bf16_widen", "matmul", _VEC, _dot_widen_applies, _dot_widen_cost,
              "f32 A (odd/even interleaved) times bf16 B columns: widen by shift and mask, FMA in f32"),
    KernelDef("dot_bf16_dp", "matmul", frozenset({"avx512bf16"}), _dot_dp_applies, _dot_dp_cost,
              "bf16 A times bf16 B columns with vdpbf16ps (pairs along K), f32 accumulators"),
    KernelDef("vload", "move", _VEC, _vload_applies, _vload_cost,
              "vector load into a register (masked tail; bf16 widened to f32)"),
    KernelDef("vstore", "move", _VEC, _vstore_applies, _vstore_cost,
              "vector store from a register (masked tail; f32 rounded to bf16, nearest-even)"),
    KernelDef("scalar_load", "move", frozenset(), _scalar_load_applies, _scalar_move_cost,
              "one element into a scalar register (bf16 widened)"),
    KernelDef("scalar_store", "move", frozenset(), _scalar_store_applies, _scalar_move_cost,
              "one element from a scalar register (rounded to bf16 if needed)"),
    KernelDef("copy", "move", frozenset(), _copy_applies, _copy_cost,
              "packing copy into an L1 buffer or a scratch block: new layout and/or dtype (loop nest)"),
    KernelDef("vzero", "zero", _VEC, _vzero_applies, _vzero_cost, "zero vector registers"),
    KernelDef("szero", "zero", frozenset(), _szero_applies, _szero_cost, "zero scalar registers"),
    KernelDef("memzero", "zero", frozenset(), _memzero_applies, _memzero_cost, "zero a memory tile"),
)
BY_NAME = {k.name: k for k in CATALOG}
