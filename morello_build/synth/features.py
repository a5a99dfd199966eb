"""Features: named counts of one Impl node's own work, each named after a CostTable price (synth/cost.py
prices and combines them)."""

from __future__ import annotations

from dataclasses import fields

from morello_build.target.costs import CostTable

# Feature names, in a fixed order: the CostTable's prices (its float fields), then derived prices
# (CostTable properties). An unknown name is an error (Features.of raises KeyError).
_PRICES = tuple(f.name for f in fields(CostTable) if f.type == "float")
FEATURES: tuple[str, ...] = _PRICES + ("l1_reuse_line", "l2_reuse_line", "l1_reuse_stream_line", "l2_reuse_stream_line")
_RANK = {name: i for i, name in enumerate(FEATURES)}


class Features(tuple):
    """Named counts of one node's own work: an immutable tuple of (name, count) pairs in FEATURES order,
    zeros left out (cheap: the search builds one per node). ``a + b`` adds counts, ``a * s`` scales
    them, ``a.dot(costs)`` prices them. Counts are fractional in a parallel loop (its busiest thread's share)."""

    __slots__ = ()

    @staticmethod
    def of(**counts: float) -> Features:
        return Features((n, counts[n]) for n in sorted(counts, key=_RANK.__getitem__) if counts[n])

    def __add__(self, other: Features) -> Features:
        if not other:
            return self
        if not self:
            return other
        total = dict(self)
        for name, c in other:
            total[name] = total.get(name, 0) + c
        return Features.of(**total)

    def __radd__(self, other) -> Features:  # sum() starts from 0
        return self if other == 0 else NotImplemented

    def __mul__(self, s: float) -> Features:
        return Features((n, c * s) for n, c in self) if s else NONE

    __rmul__ = __mul__

    def get(self, name: str) -> float:
        """The count of one feature (0 when absent)."""
        _RANK[name]  # a typo is a KeyError, not a silent 0
        return next((c for n, c in self if n == name), 0)

    @staticmethod
    def ordered(*pairs: tuple[str, float]) -> Features:
        """From (name, count) pairs already in FEATURES order (the hot paths' cheaper ``of``)."""
        return Features(p for p in pairs if p[1])

    def dot(self, costs: CostTable) -> float:
        """The price of these counts: sum of count × the table's price of one unit."""
        total = 0.0
        for n, c in self:
            total += c * getattr(costs, n)
        return total

    def describe(self) -> str:
        return ", ".join(f"{n} {_number(c)}" for n, c in self) or "none"

    def __repr__(self) -> str:
        return f"Features.of({', '.join(f'{n}={c!r}' for n, c in self)})"


NONE = Features()


def _number(c: float) -> str:
    return f"{int(c):,}" if c == int(c) else f"{c:,.3f}".rstrip("0")
