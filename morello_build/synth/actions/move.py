"""MoveOperand: give one operand a new buffer (a cache view, a packing copy, registers)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil
from typing import ClassVar

from morello_build.ir import aquant
from morello_build.ir.epilogue import NO_EPILOGUE
from morello_build.ir.formats import is_format
from morello_build.ir.impl import MoveImpl, add_peak, max_peaks
from morello_build.ir.layout import Digit, Layout, packed, row_major
from morello_build.ir.spec import (
    DType,
    Level,
    Matmul,
    Move,
    Spec,
    TensorSpec,
    canonicalize,
    limit_index,
)
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import Plan, Refusal
from morello_build.target.kernels import columns_unit_stride, registers

NOT_FASTER = Refusal("not-faster", "operand {} is already at {}; moves go to faster levels")
NEEDS_LAYOUT = Refusal(
    "needs-layout", "operand {} is already at {}: a copy there (a scratch block or a repacking) needs a layout"
)
NO_VECTORS = Refusal("no-vectors", "target {} has no vector registers")
NO_MEMORY = Refusal("no-memory", "the buffer needs {} bytes, {} left at {}")
L2_COPY = Refusal("l2-copy", "L2 holds views only (copies go to L1, or to GL as a scratch block)")
L2_STRIDED = Refusal("l2-strided", "an L2 view of {} strided runs is not modelled; pack it")
L2_TOO_BIG = Refusal("l2-too-big", "an L2 view holds at most {} bytes, this one {}")
VIEW_ALIASES = Refusal(
    "view-aliases", "a cache view of its {} rows {} bytes apart would evict itself or the L1 buffers; pack it"
)
VIEW_EVICTS = Refusal(
    "view-evicts", "a cache view of its {} strided runs (more than the {} L1 ways) could evict itself; pack it"
)
COPY_ALIASES = Refusal(
    "copy-aliases", "a transposing copy reading {} runs {} bytes apart side by side would evict its own lines"
)
SCRATCH_TOO_BIG = Refusal("scratch-too-big", "a scratch block holds at most {} bytes, this one {}")
EPILOGUE_NEEDS_REGISTERS = Refusal(
    "epilogue-needs-registers", "the epilogue is applied where the accumulators leave registers"
)
FORMAT_COPY = Refusal(
    "format-copy",
    "{} weights are dequantized in registers by the kernels that read them (or loaded one value at a time "
    "into scalar registers): no copy of them",
)
SAME_COPY = Refusal("same-copy", "the copy would change nothing (same layout and dtype)")


@dataclass(frozen=True)
class MoveOperand:
    """Give one operand a new buffer at ``level``. With no layout or dtype change, L2 and L1 buffers are
    cache views (the data, now cache-resident; L2 views only of dense tiles); a layout at GL makes a
    scratch block (a dense copy in main memory, at most ``target.scratch_bytes``)."""

    operand: int
    level: Level
    layout: Layout | None = None  # None: keep the operand's layout (a view, or registers)
    dtype: DType | None = None

    TAG: ClassVar[str] = "M"

    def buffer(self, t: TensorSpec, target) -> TensorSpec:
        if self.level.is_cache and self.layout is None and self.dtype in (None, t.dtype):
            return t.at_level(self.level)
        layout = self.layout or (packed(2, target.lanes) if self.level == Level.VRF else row_major())
        vs = target.lanes if self.level == Level.VRF else None
        dtype = DType.F32 if self.level.is_register else (self.dtype or t.dtype)
        return TensorSpec(t.shape, dtype, layout, self.level, len(layout.digits), vs)

    @staticmethod
    def is_view(t: TensorSpec, buf: TensorSpec) -> bool:
        """Whether moving ``t`` into ``buf`` only relabels memory data as cache-resident (no copy)."""
        return (
            buf.layout == t.layout
            and buf.dtype == t.dtype
            and buf.level.is_cache
            and t.level.is_memory
            and t.level < buf.level
        )

    def buffer_bytes(self, buf: TensorSpec, target) -> int:
        if buf.level == Level.VRF:
            return registers(buf, target) * target.vector_bytes
        if buf.level == Level.L1:  # a view keeps its source's stride class (new buffers are dense)
            return ceil(costmodel.view_footprint(buf, target))
        return ceil(buf.bytes)  # a block format's bytes per value are a fraction

    def buffer_refusal(self, t: TensorSpec, buf: TensorSpec, target) -> Refusal | None:
        """Why this buffer is never worth it, whatever the limits (None: it may be)."""
        view = self.is_view(t, buf)
        if is_format(t.dtype) and not view and buf.level != Level.RF:
            return FORMAT_COPY(t.dtype.value)
        if buf.level == Level.L2 and not view:
            return L2_COPY
        if buf.level == Level.L2 and t.runs() > 1:
            return L2_STRIDED(t.runs())
        if buf.level == Level.L2 and not costmodel.fits_l2(t, target):
            return L2_TOO_BIG(target.l2_block_bytes, t.bytes)
        if view and costmodel.view_evicts(t, target):
            if t.alias:
                return VIEW_ALIASES(t.runs(), t.alias)
            return VIEW_EVICTS(t.runs(), target.l1_ways)
        if not view and costmodel.copy_thrashes(t, buf, target):
            return COPY_ALIASES(costmodel.copy_live_runs(t, buf), t.alias)
        if buf.level == Level.GL and buf.bytes > target.scratch_bytes:
            return SCRATCH_TOO_BIG(target.scratch_bytes, buf.bytes)
        if (
            not view
            and buf.level.has_memory_buffers
            and buf.layout == t.layout
            and buf.dtype == t.dtype
            and (buf.level == Level.L1 or t.runs() == 1)
        ):
            return SAME_COPY
        return None

    def view_streams(self, op, t: TensorSpec) -> int:
        """How many interleaved streams the body's first reads of a view make: a B stored N×K is only read
        by the dot kernels, a column per stream side by side (so a view is no way around their cost)."""
        if isinstance(op, Matmul) and self.operand == 1 and t.shape[1] > 1 and columns_unit_stride(t):
            return t.shape[2]
        return 1

    def level_refusal(self, op, t: TensorSpec) -> Refusal | None:
        """Moves go to faster levels, except a new layout in main memory or L1 (a repacking copy)."""
        if t.level < self.level:
            return None
        if t.level == self.level and t.level.has_memory_buffers:
            return None if self.layout is not None else NEEDS_LAYOUT(op.operand_names[self.operand], t.level.name)
        return NOT_FASTER(op.operand_names[self.operand], t.level.name)

    def plan(self, spec: Spec, target) -> Plan | Refusal:
        op, i = spec.op, self.operand
        t = op.operands[i]
        why = self.level_refusal(op, t)
        if why is not None:
            return why
        if self.level == Level.VRF and target.lanes == 0:
            return NO_VECTORS(target.isa)
        buf = self.buffer(t, target)
        why = self.buffer_refusal(t, buf, target)
        if why is not None:
            return why
        view = self.is_view(t, buf)
        nbytes = self.buffer_bytes(buf, target)
        limits = spec.limits.minus(self.level, nbytes)
        if limits is None:
            short_of = (limit_index(self.level), nbytes)
            return NO_MEMORY(nbytes, spec.limits.get(self.level), self.level.name, short_of=short_of)
        # No rounding of the L1 left (round_limits): the memo shifts a body's range of limits by the bytes
        # taken (Search), which holds only if limits pass down by plain subtraction.
        # Registers belong to one thread: a body working on a register buffer must be serial.
        serial = True if not self.level.parallel_tileable else None
        is_output = i in op.outputs
        body_op = op.with_operands(tuple(buf if j == i else u for j, u in enumerate(op.operands)), serial=serial)
        if is_output and op.epilogue:
            if not self.level.is_register:
                return EPILOGUE_NEEDS_REGISTERS
            body_op = replace(body_op, epilogue=NO_EPILOGUE)  # the store applies it
        inner = canonicalize(Spec(body_op, limits))
        load = store = None
        if not view:
            if not is_output or op.accum:
                load = canonicalize(Spec(Move(t, buf, serial=op.serial), limits))
            if is_output:
                store = canonicalize(Spec(Move(buf, t, serial=op.serial, epilogue=op.epilogue), limits))
        subspecs = tuple(s for s in (load, inner, store) if s is not None)
        own = costmodel.view_features(t, self.view_streams(op, t)) if view else costmodel.NONE
        own_parts, ones = costmodel.parts(own, target.costs), (1,) * len(subspecs)
        phases = costmodel.move_phases(view, self.level, load is not None, store is not None)

        def build(impls):
            it = iter(impls)
            li = next(it) if load else None
            body = next(it)
            si = next(it) if store else None
            c, parts = costmodel.combine(own_parts, impls, ones, phases, target.costs.hidden)
            peaks = add_peak(max_peaks(*(p.peaks for p in impls)), self.level, nbytes)
            return MoveImpl(spec, i, buf, view, li, body, si, c, peaks, own, parts)

        return Plan(subspecs, build, own=own_parts)

    # -- serialization (DB decisions): M:<operand>:<level>:<layout digits|->:<dtype|-> ----------------
    def encode(self, op) -> str:
        dt = self.dtype.value if self.dtype else "-"
        return f"M:{self.operand}:{int(self.level)}:{_layout_text(self.layout)}:{dt}"

    @classmethod
    def decode(cls, text: str, op) -> "MoveOperand":
        _, i, level, layout, dt = text.split(":")
        return cls(int(i), Level(int(level)), _layout_from(layout), None if dt == "-" else _dtype_from(dt))


def _dtype_from(text: str):
    return aquant.from_value(text) or DType(text)  # a quantized A buffer (ir/aquant.py), or a DType


def _layout_text(layout: Layout | None) -> str:
    if layout is None:
        return "-"
    return ";".join(f"{d.dim}/{d.div}/{'' if d.mod is None else d.mod}" for d in layout.digits)


def _layout_from(text: str) -> Layout | None:
    if text == "-":
        return None
    if not text:
        return Layout(())
    digits = []
    for part in text.split(";"):
        dim, div, mod = part.split("/")
        digits.append(Digit(int(dim), int(div), int(mod) if mod else None))
    return Layout(tuple(digits))
