"""ToAccum (C = A·B becomes C = 0; C += A·B) and Select (a catalog microkernel)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from morello_build.ir.impl import Accum, Kernel, max_peaks
from morello_build.ir.spec import Matmul, Spec, Zero, canonicalize
from morello_build.synth import cost as costmodel
from morello_build.synth.actions.plan import Plan
from morello_build.synth.cost import NONE
from morello_build.target.kernels import BY_NAME


@dataclass(frozen=True)
class ToAccum:
    """C = A·B  becomes  C = 0; C += A·B."""

    def plan(self, spec: Spec, target) -> Plan | None:
        op = spec.op
        if not isinstance(op, Matmul) or op.accum:
            return None
        zero = canonicalize(Spec(Zero(op.c, serial=op.serial), spec.limits))
        body = canonicalize(replace(spec, op=replace(op, accum=True)))

        def build(impls):
            z, b = impls
            cost = costmodel.combine(0.0, impls, (1, 1))  # no work of its own
            return Accum(spec, z, b, cost, max_peaks(z.peaks, b.peaks), NONE)

        return Plan((zero, body), build)


@dataclass(frozen=True)
class Select:
    """Implement the spec with a catalog microkernel."""

    kernel: str

    def plan(self, spec: Spec, target) -> Plan | None:
        k = BY_NAME.get(self.kernel)
        if k is None or k.kind != spec.op.kind or not k.available_on(target):
            return None
        if not k.applies(spec.op, target):
            return None
        own = k.cost(spec.op, target)
        cost = costmodel.combine(own.dot(target.costs), (), ())
        return Plan((), lambda _: Kernel(spec, k.name, cost, features=own), own_cost=cost)


