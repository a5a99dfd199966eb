"""The gated pair's rewrites: PairToAccum (its two accumulators in registers, or in L1 tiles) and SplitPair
(a pair's two matmuls on one tile of A).

A ``gated`` spec whose C tile fits twice in registers becomes: zero both accumulators, the ``pair`` spec
(C1 += A·B1; C2 += A·B2, with every loop over k shared, so each tile of A is brought in once for both),
then the ``gate`` store (act(acc1 + bias1) * (acc2 + bias2) into C). A ``pair`` spec splits into its two
matmuls where the search finds it pays: typically at the kernels, whose tiles of A are in L1 or registers.
With the accumulators in L1 the pair splits at once and each matmul brings its tile of C into registers
itself, so the small batches' kernels are the matmul's own (several columns of one B, or integer kernels
that keep C in memory) instead of the pair kernels that register budgets hold to a column of each B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from morello_build.ir.impl import PairAccum, Seq, add_peak, max_peaks
from morello_build.ir.layout import packed, row_major
from morello_build.ir.spec import DType, Gate, Level, Matmul, Pair, Spec, TensorSpec, Zero, canonicalize, limit_index
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import Plan, Refusal
from morello_build.target.kernels import registers

NOT_GATED = Refusal("not-gated", "only a gated spec has a pair of accumulators")
NOT_PAIR = Refusal("not-pair", "only a pair spec splits into its two matmuls")
C_NOT_IN_MEMORY = Refusal("c-not-in-memory", "C is already in registers")
NO_VECTORS = Refusal("no-vectors", "target {} has no vector registers")
NO_ROOM = Refusal("no-room", "two accumulators need {} bytes, {} left at {}")
NOT_AN_L1_TILE = Refusal("not-an-l1-tile", "an L1 accumulator of {} columns, {} bytes (>= {} columns, <= {} bytes)")
# An L1 accumulator is a tile of C that the pair's two matmuls and then the gate revisit while it sits in L1:
# a few rows by 16 to a few hundred columns, enough for the matmuls' kernels to run several calls along N
# (narrower tiles are the register pair's; each size offered opens its own matmul subtrees in the search).
MIN_L1_COLUMNS, MAX_L1_ACCUMULATORS = 16, 4096


@dataclass(frozen=True)
class PairToAccum:
    """The gated pair's accumulators at ``level`` (VRF, RF, or an L1 tile), each of C's tile shape."""

    level: Level

    TAG: ClassVar[str] = "G"

    def buffer(self, c: TensorSpec, target) -> TensorSpec:
        if self.level == Level.VRF:
            layout = packed(2, target.lanes)
            return TensorSpec(c.shape, DType.F32, layout, Level.VRF, len(layout.digits), target.lanes)
        return TensorSpec(c.shape, DType.F32, row_major(), self.level, 3)  # RF, or an L1 scratch tile

    def plan(self, spec: Spec, target) -> Plan | Refusal:
        op = spec.op
        if op.kind != "gated":
            return NOT_GATED
        if not op.c.level.is_memory:
            return C_NOT_IN_MEMORY
        if self.level == Level.VRF and not target.lanes:
            return NO_VECTORS(target.isa)
        buf = self.buffer(op.c, target)
        each = registers(buf, target) * target.vector_bytes if self.level == Level.VRF else buf.bytes
        if self.level.is_memory and (buf.shape[2] < MIN_L1_COLUMNS or buf.bytes > MAX_L1_ACCUMULATORS):
            return NOT_AN_L1_TILE(buf.shape[2], buf.bytes, MIN_L1_COLUMNS, MAX_L1_ACCUMULATORS)
        limits = spec.limits.minus(self.level, 2 * each)
        if limits is None:
            short_of = (limit_index(self.level), 2 * each)
            return NO_ROOM(2 * each, spec.limits.get(self.level), self.level.name, short_of=short_of)
        zero = canonicalize(Spec(Zero(buf, serial=True), limits))
        body = canonicalize(Spec(Pair(op.a, op.b1, op.b2, buf, buf, serial=True), limits))
        store = canonicalize(Spec(Gate(buf, buf, op.c, serial=op.serial, epilogue=op.epilogue), limits))
        subspecs = (zero, zero, body, store)

        def build(impls):
            c, parts = costmodel.combine(costmodel.ZERO, impls, (1,) * 4, hidden=target.costs.hidden)
            peaks = add_peak(max_peaks(*(i.peaks for i in impls)), self.level, 2 * each)
            return PairAccum(spec, buf, *impls, c, peaks, costmodel.NONE, parts)

        return Plan(subspecs, build)

    # -- serialization (DB decisions): G:<level> ------------------------------------------------------
    def encode(self, op) -> str:
        return f"G:{int(self.level)}"

    @classmethod
    def decode(cls, text: str, op) -> "PairToAccum":
        return cls(Level(int(text.split(":")[1])))


@dataclass(frozen=True)
class SplitPair:
    """A pair spec as its two accumulating matmuls, one after the other, on the same tile of A."""

    TAG: ClassVar[str] = "S"

    def plan(self, spec: Spec, target) -> Plan | Refusal:
        op = spec.op
        if op.kind != "pair":
            return NOT_PAIR
        first = canonicalize(Spec(Matmul(op.a, op.b1, op.c1, accum=True, serial=True), spec.limits))
        second = canonicalize(Spec(Matmul(op.a, op.b2, op.c2, accum=True, serial=True), spec.limits))

        def build(impls):
            c, parts = costmodel.combine(costmodel.ZERO, impls, (1, 1), hidden=target.costs.hidden)
            return Seq(spec, *impls, c, max_peaks(*(i.peaks for i in impls)), costmodel.NONE, parts)

        return Plan((first, second), build)

    def encode(self, op) -> str:
        return "S"

    @classmethod
    def decode(cls, text: str, op) -> "SplitPair":
        return cls()
