"""MoveOperand: give one operand a new buffer (a cache view, a packing copy, registers)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from morello_build.ir.impl import MoveImpl, add_peak, max_peaks
from morello_build.ir.layout import Layout, packed, row_major
from morello_build.ir.spec import (
    DType,
    Level,
    Matmul,
    Move,
    Spec,
    TensorSpec,
    canonicalize,
)
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import CACHES, Plan
from morello_build.target.kernels import columns_unit_stride, registers


@dataclass(frozen=True)
class MoveOperand:
    """Give one operand a new buffer at ``level``. With no layout or dtype change, L2 and L1 buffers are
    cache views (the data, now cache-resident; L2 views only of dense tiles); a layout at GL makes a
    scratch block (a dense copy in main memory, at most ``target.scratch_bytes``)."""

    operand: int
    level: Level
    layout: Layout | None = None  # None: keep the operand's layout (a view, or registers)
    dtype: DType | None = None

    def buffer(self, t: TensorSpec, target) -> TensorSpec:
        if self.level in CACHES and self.layout is None and self.dtype in (None, t.dtype):
            return replace(t, level=self.level)
        layout = self.layout or (packed(2, target.lanes) if self.level == Level.VRF else row_major())
        vs = target.lanes if self.level == Level.VRF else None
        dtype = DType.F32 if self.level in (Level.VRF, Level.RF) else (self.dtype or t.dtype)
        return TensorSpec(t.shape, dtype, layout, self.level, len(layout.digits), vs)

    @staticmethod
    def is_view(t: TensorSpec, buf: TensorSpec) -> bool:
        """Whether moving ``t`` into ``buf`` only relabels memory data as cache-resident (no copy)."""
        return (
            buf.layout == t.layout and buf.dtype == t.dtype and buf.level in CACHES
            and t.level in (Level.GL, Level.L2) and t.level < buf.level
        )

    def buffer_bytes(self, buf: TensorSpec, target) -> int:
        if buf.level == Level.VRF:
            return registers(buf, target) * target.vector_bytes
        if buf.level == Level.L1:  # a view keeps its source's stride class (new buffers are dense)
            return costmodel.view_footprint(buf, target)
        return buf.bytes

    def refusal(self, t: TensorSpec, buf: TensorSpec, target) -> str | None:
        """Why this buffer is never worth it, whatever the limits (None: it may be)."""
        view = self.is_view(t, buf)
        if buf.level == Level.L2 and not view:
            return "L2 holds views only (copies go to L1, or to GL as a scratch block)"
        if buf.level == Level.L2 and t.runs() > 1:
            return f"an L2 view of {t.runs()} strided runs is not modelled; pack it"
        if buf.level == Level.L2 and not costmodel.fits_l2(t, target):
            return f"an L2 view holds at most {target.l2_block_bytes} bytes, this one {t.bytes}"
        if view and costmodel.view_evicts(t, target):
            if t.alias:
                return f"a cache view of its {t.runs()} rows {t.alias} bytes apart would evict itself or the L1 buffers; pack it"
            return f"a cache view of its {t.runs()} strided runs (more than the {target.l1_ways} L1 ways) could evict itself; pack it"
        if buf.level == Level.GL and buf.bytes > target.scratch_bytes:
            return f"a scratch block holds at most {target.scratch_bytes} bytes, this one {buf.bytes}"
        if not view and buf.level in (Level.GL, Level.L1) and buf.layout == t.layout and buf.dtype == t.dtype and (
            buf.level == Level.L1 or t.runs() == 1
        ):
            return "the copy would change nothing (same layout and dtype)"
        return None

    def view_streams(self, op, t: TensorSpec) -> int:
        """How many interleaved streams the body's first reads of a view make: a B stored N×K is only read
        by the dot kernels, a column per stream side by side (so a view is no way around their cost)."""
        if isinstance(op, Matmul) and self.operand == 1 and t.shape[1] > 1 and columns_unit_stride(t):
            return t.shape[2]
        return 1

    def goes_faster(self, t: TensorSpec) -> bool:
        """Moves go to faster levels, except a new layout in main memory or L1 (a repacking copy)."""
        repack = self.layout is not None and t.level == self.level and t.level in (Level.GL, Level.L1)
        return t.level < self.level or repack

    def plan(self, spec: Spec, target) -> Plan | None:
        op, i = spec.op, self.operand
        t = op.operands[i]
        if not self.goes_faster(t):
            return None
        if self.level == Level.VRF and target.lanes == 0:
            return None
        buf = self.buffer(t, target)
        if self.refusal(t, buf, target) is not None:
            return None
        view = self.is_view(t, buf)
        nbytes = self.buffer_bytes(buf, target)
        limits = spec.limits.minus(self.level, nbytes)
        if limits is None:
            return None
        # No rounding of the L1 left (round_limits): the memo reuses a program for any limits above its
        # peaks, which is only sound if feasibility depends on peaks alone (see test_search's memo tests).
        # Registers belong to one thread: a body working on a register buffer must be serial.
        serial = True if self.level in (Level.VRF, Level.RF) else None
        inner = canonicalize(replace(spec, op=op.with_operands(
            tuple(buf if j == i else u for j, u in enumerate(op.operands)), serial=serial), limits=limits))
        is_output = i in op.outputs
        load = store = None
        if not view:
            if not is_output or op.accum:
                load = canonicalize(Spec(Move(t, buf, serial=op.serial), limits))
            if is_output:
                store = canonicalize(Spec(Move(buf, t, serial=op.serial), limits))
        subspecs = tuple(s for s in (load, inner, store) if s is not None)
        own = costmodel.view_features(t, self.view_streams(op, t)) if view else costmodel.NONE
        price, ones = own.dot(target.costs), (1,) * len(subspecs)

        def build(impls):
            it = iter(impls)
            li = next(it) if load else None
            body = next(it)
            si = next(it) if store else None
            c = costmodel.combine(price, impls, ones)
            peaks = add_peak(max_peaks(*(p.peaks for p in impls)), self.level, nbytes)
            return MoveImpl(spec, i, buf, view, li, body, si, c, peaks, own)

        return Plan(subspecs, build, own_cost=price)


