"""Epilogues: what a matmul does to its accumulators before the store, as op records.

An epilogue is applied, per output element, in one fixed order (the spec grammar's order):

    y = act(scale * colscale[n] * acc + bias[n]) + residual[b, m, n]      then rounded to C's dtype

Every term is optional. Its tensors are f32 kernel arguments after C, in the order of ``TERMS``: the scale
a ``float``, colscale and bias N values (shared by the batch), the residual B×M×N row-major. The
search applies an epilogue where C's tile leaves registers (the store of the accumulators), never as a
second pass over C in memory.

The gated pair's epilogue (``pair``: two accumulators, of A·B1 and A·B2) is

    y = act(acc1 + bias1[n]) * (acc2 + bias2[n])      then rounded to C's dtype

with the biases (``bias``: bias1 and bias2, N values each) optional and the activation required.

An activation is one record (``Activation``): its numpy semantics (float64), its scalar C++ (the reference
loop and the scalar kernels), the ISA helper that applies it to a vector register, its cost in vector
instructions and its largest slope (how much it can grow an accumulator's rounding error). Adding one is
adding a record here and its helper to every ``templates/isa_*.hpp.j2`` and ``runtime.hpp.j2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# 2*sqrt(2/pi): gelu's tanh approximation 0.5x(1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715x^3), is
# x * sigmoid(2u), which needs no 1 - 1 cancellation for large negative x.
GELU_C = 1.5957691216057308
GELU_CUBE = 0.044715


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # exact in float64, no overflow warnings


@dataclass(frozen=True)
class Activation:
    name: str
    numpy: Callable  # float64 array -> float64 array
    cxx: str  # the scalar C++ of a float ``y`` (reference loop), a format string with {y}
    helper: str  # the function, in the runtime (scalar) and in every ISA helper library (vector)
    vec_ops: int  # vector instructions per register (the cost model's vec_op count)
    slope: float  # max |act'(x)|: the factor an accumulator's rounding error can grow by
    doc: str


ACTIVATIONS = {
    a.name: a
    for a in (
        Activation("relu", lambda x: np.maximum(x, 0.0), "({y} > 0.0f ? {y} : 0.0f)", "relu", 1, 1.0, "max(x, 0)"),
        Activation(
            "gelu",
            lambda x: x * _sigmoid(GELU_C * (x + GELU_CUBE * x**3)),
            f"{{y}} / (1.0f + std::exp(-{GELU_C}f * ({{y}} + {GELU_CUBE}f * {{y}} * {{y}} * {{y}})))",
            "gelu",
            22,
            1.13,
            "0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), computed as x * sigmoid(2 sqrt(2/pi)(x + 0.044715x^3))",
        ),
        Activation(
            "silu", lambda x: x * _sigmoid(x), "{y} / (1.0f + std::exp(-{y}))", "silu", 18, 1.1, "x * sigmoid(x)"
        ),
    )
}

# The optional terms in order of application: (name, kernel argument C type, what it is).
TERMS = (
    ("scale", "float", "a per-tensor scale"),
    ("colscale", "const float*", "a scale per output column (N values)"),
    ("bias", "const float*", "a bias per output column (N values)"),
    ("residual", "const float*", "a residual added last"),
)


@dataclass(frozen=True, order=True)
class Epilogue:
    """Which terms a matmul's epilogue has (its tensors are kernel arguments; see the module doc)."""

    scale: bool = False
    colscale: bool = False
    bias: bool = False
    act: str = ""  # a key of ACTIVATIONS, or "" for none
    residual: bool = False
    pair: bool = False  # the gated pair's: act(acc1 + bias1) * (acc2 + bias2)

    def __bool__(self) -> bool:
        return self != NO_EPILOGUE

    @property
    def tensors(self) -> tuple[str, ...]:
        """The terms with a kernel argument, in argument order."""
        if self.pair:
            return ("bias1", "bias2") if self.bias else ()
        return tuple(name for name, _, _ in TERMS if getattr(self, name))

    @property
    def activation(self) -> Activation | None:
        return ACTIVATIONS[self.act] if self.act else None

    def describe(self) -> str:
        """Its spec tokens, in grammar order (also its DB key)."""
        words = [*(t for t in ("scale", "colscale", "bias") if getattr(self, t))]
        words += [f"act={self.act}"] if self.act else []
        return " ".join(words + (["residual"] if self.residual else []))

    @classmethod
    def from_describe(cls, text: str, pair: bool = False) -> "Epilogue":
        words = text.split()
        act = next((w.split("=", 1)[1] for w in words if w.startswith("act=")), "")
        return cls(*(t in words for t in ("scale", "colscale", "bias")), act, "residual" in words, pair)

    def apply_pair(self, acc1: np.ndarray, acc2: np.ndarray, extras: dict) -> np.ndarray:
        """The gated pair's epilogue in float64 (``extras`` as for ``apply``)."""
        g, u = np.asarray(acc1, dtype=np.float64), np.asarray(acc2, dtype=np.float64)
        if self.bias:
            g = g + np.asarray(extras["bias1"], dtype=np.float64)
            u = u + np.asarray(extras["bias2"], dtype=np.float64)
        return ACTIVATIONS[self.act].numpy(g) * u

    def apply(self, acc: np.ndarray, extras: dict) -> np.ndarray:
        """The epilogue in float64 on ``acc``; ``extras`` maps each tensor term to an array broadcast to
        ``acc``'s shape (or a scalar)."""
        y = np.asarray(acc, dtype=np.float64)
        if self.scale:
            y = y * np.float64(extras["scale"])
        if self.colscale:
            y = y * np.asarray(extras["colscale"], dtype=np.float64)
        if self.bias:
            y = y + np.asarray(extras["bias"], dtype=np.float64)
        if self.act:
            y = ACTIVATIONS[self.act].numpy(y)
        if self.residual:
            y = y + np.asarray(extras["residual"], dtype=np.float64)
        return y


NO_EPILOGUE = Epilogue()
GATE_DEFAULT = Epilogue(act="gelu", pair=True)
