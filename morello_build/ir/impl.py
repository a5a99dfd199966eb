"""Impl trees: the programs the search builds. Immutable; every node knows its cost and peak memory.

Each node carries ``features``, the named counts of its own work (its children's excluded), and
``cost``, derived from them and its children's costs by the one rule of synth/cost.py.

- ``Kernel``: a catalog microkernel implementing its spec directly.
- ``Loop``: tiles iteration dims; each region (main tiles, remainder strips) has its own body. A loop
  over k of a matmul that does not accumulate is *peeled*: its first tile overwrites C, the others add.
- ``MoveImpl``: gives an operand a new buffer (level, layout, dtype) around a body; ``view`` moves
  only relabel GL data as L1-resident (no copy).
- ``Accum``: zero the output, then run the accumulating body.
- ``PairAccum``: the gated pair's two accumulators in registers: zero both, accumulate both (a ``pair``
  spec), store them through the gate (act(acc1 + bias1) * (acc2 + bias2)) into C.
- ``Seq``: a pair's two matmuls, one after the other, on the same tile of A.
"""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir.spec import LIMITED_LEVELS, Level, Spec, TensorSpec

Peaks = tuple[int, int, int]  # bytes at L1, VRF, RF


@dataclass(frozen=True)
class Kernel:
    spec: Spec
    name: str
    cost: float
    peaks: Peaks = (0, 0, 0)
    features: tuple = ()  # cost.Features of the node's own work
    parts: tuple = ()  # cycles per port class of the node and its children (cost.combine)

    @property
    def children(self) -> tuple:
        return ()

    def label(self) -> str:
        return f"{self.name}"


@dataclass(frozen=True)
class Region:
    """Tiles of one shape inside a Loop: ``remainder[i]`` says whether tiled dim i is its ragged end."""

    remainder: tuple[bool, ...]
    count: int
    shape: tuple[int, ...]  # iteration tile shape of this region
    body: "Impl"
    start: int = 0  # index of the first main tile (1 after a peeled first tile; single-dim loops only)


@dataclass(frozen=True)
class Loop:
    spec: Spec
    dims: tuple[int, ...]  # iteration dims tiled
    tile: tuple[int, ...]  # full iteration tile shape (main tiles)
    parallel: bool
    regions: tuple[Region, ...]
    cost: float
    peaks: Peaks
    features: tuple = ()  # cost.Features of the node's own work
    parts: tuple = ()  # cycles per port class of the node and its children (cost.combine)

    @property
    def children(self) -> tuple:
        return tuple(r.body for r in self.regions)

    @property
    def peeled(self) -> bool:
        """A loop over the reduction of a non-accumulating op: its first tile is a region of its own."""
        op = self.spec.op
        return not op.accum and any(d in op.reduction_dims for d in self.dims)

    def main_trips(self, region: Region, d: int) -> int:
        """How many tiles ``region`` has along tiled dim ``d`` (not a remainder there): all of the main
        tiles, except in a peeled loop, where the first tile is a region of its own."""
        return region.count if self.peeled else self.spec.op.iter_shape[d] // self.tile[d]

    def label(self) -> str:
        names = self.spec.op.iter_names
        kind = "parallel for" if self.parallel else "for"
        steps = ", ".join(f"{names[d]} by {self.tile[d]}" for d in self.dims)
        return f"{kind} {steps}" + (" (first tile peeled: it overwrites the output)" if self.peeled else "")


@dataclass(frozen=True)
class MoveImpl:
    spec: Spec
    operand: int
    buffer: TensorSpec  # the new buffer at its full shape, with its real (uncanonicalized) layout
    view: bool
    load: object | None
    body: object
    store: object | None
    cost: float
    peaks: Peaks
    features: tuple = ()  # cost.Features of the node's own work
    parts: tuple = ()  # cycles per port class of the node and its children (cost.combine)

    @property
    def children(self) -> tuple:
        return tuple(c for c in (self.load, self.body, self.store) if c is not None)

    def label(self) -> str:
        name = self.spec.op.operand_names[self.operand]
        what = "view" if self.view else "move"
        return f"{what} {name} -> {self.buffer.describe()}"


@dataclass(frozen=True)
class Accum:
    spec: Spec
    zero: object
    body: object
    cost: float
    peaks: Peaks
    features: tuple = ()  # cost.Features of the node's own work
    parts: tuple = ()  # cycles per port class of the node and its children (cost.combine)

    @property
    def children(self) -> tuple:
        return (self.zero, self.body)

    def label(self) -> str:
        return "to_accum"


@dataclass(frozen=True)
class PairAccum:
    spec: Spec
    buffer: TensorSpec  # each accumulator's buffer (the same for both), full shape, real layout
    zero1: object
    zero2: object
    body: object
    store: object
    cost: float
    peaks: Peaks
    features: tuple = ()
    parts: tuple = ()

    @property
    def children(self) -> tuple:
        return (self.zero1, self.zero2, self.body, self.store)

    def label(self) -> str:
        return f"pair_accum c1, c2 -> {self.buffer.describe()}"


@dataclass(frozen=True)
class Seq:
    spec: Spec
    first: object
    second: object
    cost: float
    peaks: Peaks
    features: tuple = ()
    parts: tuple = ()

    @property
    def children(self) -> tuple:
        return (self.first, self.second)

    def label(self) -> str:
        return "split_pair: a·b1 into c1, then a·b2 into c2"


Impl = Kernel | Loop | MoveImpl | Accum | PairAccum | Seq


def walk(impl: Impl):
    """Every node of the tree, parents before their children."""
    yield impl
    for child in impl.children:
        yield from walk(child)


def depth(impl: Impl) -> int:
    return 1 + max((depth(c) for c in impl.children), default=0)


def max_peaks(*peaks: Peaks) -> Peaks:
    return tuple(map(max, zip(*peaks))) if peaks else (0, 0, 0)


def add_peak(peaks: Peaks, level: Level, nbytes: int) -> Peaks:
    if not level.limited:
        return peaks
    i = LIMITED_LEVELS.index(level)
    return tuple(p + (nbytes if j == i else 0) for j, p in enumerate(peaks))


def format_tree(impl: Impl, indent: str = "  ", features: bool = False, costs=None, by_class=None) -> str:
    """The chosen program as an indented tree, each node with its spec and cost; with ``features``,
    each node whose own work costs something gets a line with its feature counts under it (and their
    price added up, given the target's ``costs``), and, given ``by_class`` (parts -> text: the cost
    module's ``describe_parts``), every node a line with its cycles by port class."""
    lines: list[str] = []

    def walk(node, level):
        lines.append(f"{indent * level}{node.label()}  [cost {node.cost:,.0f}]  {node.spec.describe()}")
        if features and node.features:
            own = f"  (added up: {node.features.dot(costs):,.1f})" if costs is not None else ""
            lines.append(f"{indent * (level + 2)}features: {node.features.describe()}{own}")
        if features and by_class is not None and node.parts:
            lines.append(f"{indent * (level + 2)}by class: {by_class(node.parts)}")
        for child in node.children:
            walk(child, level + 1)

    walk(impl, 0)
    return "\n".join(lines)
