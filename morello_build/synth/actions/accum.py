"""ToAccum (C = A·B becomes C = 0; C += A·B) and Select (a catalog microkernel)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from morello_build.ir.impl import Accum, Kernel, max_peaks
from morello_build.ir.spec import Spec, Zero, canonicalize
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import Plan, Refusal
from morello_build.synth.cost import NONE
from morello_build.target.kernels import BY_NAME

NO_REDUCTION = Refusal("no-reduction", "a {} sums over no dim: there is nothing to accumulate")
ACCUMULATES = Refusal("accumulates", "it already accumulates")
EPILOGUE_IN_MEMORY = Refusal(
    "epilogue-in-memory", "the epilogue applies to accumulators in registers: move C to registers instead"
)
NO_EPILOGUE_KERNEL = Refusal("no-epilogue-kernel", "{} does not apply an epilogue")
UNKNOWN_KERNEL = Refusal("unknown-kernel", "unknown kernel '{}' (accepted: {})")
WRONG_KIND = Refusal("wrong-kind", "{} implements a {}, not a {}")
LACKS_FEATURES = Refusal("lacks-features", "{} needs {}, which {} lacks")
KERNEL_DOES_NOT_FIT = Refusal("kernel-does-not-fit", "{} ({}) does not fit these operands")
# The refusal met most (policy._actions asks every kernel of the op's kind once per op): made once.
_DOES_NOT_FIT = {k.name: KERNEL_DOES_NOT_FIT(k.name, k.doc) for k in BY_NAME.values()}


@dataclass(frozen=True)
class ToAccum:
    """An op that sums over reduction dims, C = A·B, becomes C = 0; C += A·B (its output zeroed, then the
    accumulating op)."""

    TAG: ClassVar[str] = "A"

    def plan(self, spec: Spec, target) -> Plan | Refusal:
        op = spec.op
        if not op.reduction_dims:
            return NO_REDUCTION(op.kind)
        if op.accum:
            return ACCUMULATES
        if op.epilogue:
            return EPILOGUE_IN_MEMORY
        (out,) = op.outputs
        zero = canonicalize(Spec(Zero(op.operands[out], serial=op.serial), spec.limits))
        body = canonicalize(replace(spec, op=replace(op, accum=True)))

        def build(impls):
            z, b = impls
            cost, parts = costmodel.combine(costmodel.ZERO, impls, (1, 1), hidden=target.costs.hidden)  # no own work
            return Accum(spec, z, b, cost, max_peaks(z.peaks, b.peaks), NONE, parts)

        return Plan((zero, body), build)

    # -- serialization (DB decisions): A ------------------------------------------------------------
    def encode(self, op) -> str:
        return "A"

    @classmethod
    def decode(cls, text: str, op) -> "ToAccum":
        return cls()


@dataclass(frozen=True)
class Select:
    """Implement the spec with a catalog microkernel."""

    kernel: str

    TAG: ClassVar[str] = "K"

    def refusal(self, op, target) -> Refusal | None:
        """Why the kernel cannot implement ``op`` on ``target`` (None: it can). Never for lack of memory, so the
        search's policy leaves out the kernels refused here once per op (policy._actions)."""
        k = BY_NAME.get(self.kernel)
        if k is None:
            return UNKNOWN_KERNEL(self.kernel, ", ".join(BY_NAME))
        if k.kind != op.kind:
            return WRONG_KIND(k.name, k.kind, op.kind)
        if not k.available_on(target):
            missing = sorted(k.features - target.features) + (
                ["vector registers"] if k.vector and not target.lanes else []
            )
            return LACKS_FEATURES(k.name, ", ".join(missing), target.isa)
        if op.epilogue and not k.epilogue:
            return NO_EPILOGUE_KERNEL(k.name)
        if not k.applies(op, target):
            return _DOES_NOT_FIT[k.name]
        return None

    def plan(self, spec: Spec, target) -> Plan | Refusal:
        if why := self.refusal(spec.op, target):
            return why
        k = BY_NAME[self.kernel]
        own = k.cost(spec.op, target)
        parts = costmodel.parts(own, target.costs)
        cost, _ = costmodel.combine(parts, (), (), hidden=target.costs.hidden)
        return Plan((), lambda _: Kernel(spec, k.name, cost, features=own, parts=parts), own=parts)

    # -- serialization (DB decisions): K:<kernel name> ----------------------------------------------
    def encode(self, op) -> str:
        return f"K:{self.kernel}"

    @classmethod
    def decode(cls, text: str, op) -> "Select":
        return cls(text[2:])
