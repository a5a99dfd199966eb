"""Affine index expressions ``const + sum(coef * var)`` over non-negative loop variables.

Codegen tracks every operand's origin as one Affine per dim, so that layout offsets of tiles stay
exact integers where loops are unrolled (register indices must be compile-time constants) and simple
``i * 16 + 3`` expressions elsewhere. Digits with ``div``/``mod`` stay affine when every variable's
coefficient is a multiple of the strip they divide by (the search never cuts a strip), or when the
other variables' ranges keep them inside the strip (copy loops walk a packed layout strip by strip);
else they become C expressions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Ranges = Mapping[str, int]  # loop variable -> exclusive upper bound (loop variables start at 0)


@dataclass(frozen=True)
class Affine:
    const: int = 0
    terms: tuple[tuple[str, int], ...] = ()  # (variable, coefficient), sorted, no zero coefficients

    @staticmethod
    def var(name: str, coef: int = 1) -> "Affine":
        return Affine(0, ((name, coef),) if coef else ())

    @property
    def is_const(self) -> bool:
        return not self.terms

    def __add__(self, other: "Affine | int") -> "Affine":
        if isinstance(other, int):
            return Affine(self.const + other, self.terms)
        coefs = dict(self.terms)
        for v, c in other.terms:
            coefs[v] = coefs.get(v, 0) + c
        return Affine(self.const + other.const, tuple(sorted((v, c) for v, c in coefs.items() if c)))

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        return Affine(-self.const, tuple((v, -c) for v, c in self.terms))

    def __sub__(self, other: "Affine | int") -> "Affine":
        return self + (-other if isinstance(other, Affine) else -other)

    def scale(self, k: int) -> "Affine":
        return Affine(self.const * k, tuple((v, c * k) for v, c in self.terms if c * k))

    def floordiv(self, div: int, ranges: Ranges | None = None) -> "Affine | None":
        """``self // div`` when exact: every coefficient a multiple of div, or the other terms provably
        smaller than div (variables bounded by ``ranges``, e.g. 16*p + q with q < 16); else None."""
        if div == 1:
            return self
        whole, rest = self._split(div)
        if rest and not _below(self.const % div, rest, div, ranges):
            return None
        return Affine(self.const // div, tuple((v, c // div) for v, c in whole))

    def mod(self, m: int, ranges: Ranges | None = None) -> "Affine | None":
        """``self % m`` when exact (see floordiv)."""
        _, rest = self._split(m)
        if rest and not _below(self.const % m, rest, m, ranges):
            return None
        return Affine(self.const % m, rest)

    def _split(self, div: int):
        """(terms whose coefficient is a multiple of div, the other terms)."""
        return (tuple((v, c) for v, c in self.terms if c % div == 0), tuple((v, c) for v, c in self.terms if c % div))

    def c(self) -> str:
        parts = []
        for v, c in self.terms:
            parts.append(v if c == 1 else f"{v} * {c}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    def __str__(self) -> str:
        return self.c()


Expr = Affine | str  # a str is a general C expression (parenthesized by whoever builds it)


def _below(const: int, terms, bound: int, ranges: Ranges | None) -> bool:
    """Whether const + terms < bound for every value of the (non-negative, bounded) variables."""
    if ranges is None or any(c < 0 or v not in ranges for v, c in terms):
        return False
    return const + sum(c * (ranges[v] - 1) for v, c in terms) < bound


def expr_c(e: Expr) -> str:
    return e.c() if isinstance(e, Affine) else e


def paren(e: Expr) -> str:
    s = expr_c(e)
    if isinstance(e, Affine) and (e.is_const or (len(e.terms) == 1 and e.const == 0 and e.terms[0][1] == 1)):
        return s
    return f"({s})"


def layout_offset(layout, shape: tuple[int, ...], coords: tuple[Affine, ...], ranges: Ranges | None = None) -> Expr:
    """Offset of logical ``coords`` in a buffer of ``shape`` with ``layout``: Affine when exact
    (``ranges``: exclusive upper bounds of loop variables, which make more digits exact)."""
    total = Affine()
    general: list[str] = []
    for d, stride, extent in zip(layout.digits, layout.strides(shape), layout.extents(shape)):
        if extent == 1:
            continue
        x = coords[d.dim]
        q = x.floordiv(d.div, ranges)
        v = None
        if q is not None:
            v = q if d.mod is None else q.mod(d.mod, ranges)
        if v is not None:
            total = total + v.scale(stride)
        else:
            e = paren(x)
            if d.div != 1:
                e = f"({e} / {d.div})"
            if d.mod is not None:
                e = f"({e} % {d.mod})"
            general.append(e if stride == 1 else f"{e} * {stride}")
    if not general:
        return total
    return " + ".join(general + ([total.c()] if total != Affine() else []))
