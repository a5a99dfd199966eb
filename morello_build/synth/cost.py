"""The cost model, in one module: what a node costs, from the named features of its own work.

Every Impl node carries ``features``: counts of its own work (not its children's), each named after a
field of the target's ``CostTable``, which documents what one unit of it is (a 64-byte line from main
memory, a vector FMA, a loop trip, ...). Kernels count their instructions and the lines they read
(``target/kernels/``); a loop counts its trips, the output lines its parallel tasks share, the short
runs it starts and the main-memory lines its later trips read from L2; a cache view counts the lines
it brings in. Nothing else prices anything: a node's cost is derived here, by one rule (``combine``):

    cost(node) = features(node) · costs  +  sum over children i of  weight_i × cost(child_i)

``weight_i`` is how often child i runs on one thread (``weights``): once for a move's load, body and
store and for to_accum's zero and body; ``region.count`` times for a serial loop's bodies; and for a
parallel loop, whose tasks are split over ``target.threads`` threads, how many of its tasks the busiest
thread runs: ceil(tasks / threads) of them, the largest tiles first (a ragged loop's full tiles before
its remainders). A parallel loop's per-trip features are scaled by the busiest thread's share of the
tasks, ceil(tasks / threads) / tasks (``loop_features``).

The model is ADDITIVE: memory traffic and compute are summed, they never overlap (a kernel's line
reads add to its FMAs; a view's lines add to its body). A model where they overlap changes this rule,
here. Its one non-linearity, FMA latency in outer-product kernels, is a feature of its own, decided
from counts and the table (``fma_steps``). So the surcharges stack: a main-memory line that a dot
kernel reads as one of several streams counts one ``gl_line`` and one ``gl_interleaved``, and the loop
around it may count the run it starts (``gl_short_run``); ``l2_reuse_line`` refunds part of the
``gl_line`` of lines that later trips find in L2.
"""

from __future__ import annotations

from dataclasses import fields, replace
from math import ceil, prod

from morello_build.ir.impl import Loop
from morello_build.ir.spec import Level, TensorSpec, operand_tiles
from morello_build.target.costs import CostTable

# Feature names, in a fixed order: the CostTable's prices (its float fields), then derived prices
# (CostTable properties). An unknown name is an error (Features.of raises KeyError).
FEATURES: tuple[str, ...] = tuple(f.name for f in fields(CostTable) if f.type == "float") + ("l2_reuse_line",)
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


# -- the rule --------------------------------------------------------------------------------------
def combine(own_price: float, children, weights) -> float:
    """THE combination rule (see the module docstring): the node's own features priced
    (``features.dot(costs)``, computed once per plan), plus each child's cost times how often it runs
    per thread. Additive: memory and compute do not overlap."""
    total = 0.0
    for w, c in zip(weights, children):
        total += w * c.cost
    return own_price + total


def busiest_share(tiles: int, threads: int) -> float:
    """The share of a parallel loop's tiles that the busiest thread runs: ceil(tiles / threads) of them."""
    return ceil(tiles / min(threads, tiles)) / tiles


def loop_weights(counts: tuple[int, ...], parallel: bool, threads: int, shapes=None) -> tuple[float, ...]:
    """How often each region's body runs on one thread: all its tiles (serial), or the busiest thread's
    part of them (parallel). The busiest thread runs ceil(tiles / threads) tasks, and it may draw the
    largest ones: those are taken from the regions in order of their tiles' volumes (``shapes``: each
    region's tile shape; all equal when not given), so small ragged tiles do not dilute the imbalance.
    Regions of equal volume share the busiest thread's tasks in proportion to their counts."""
    if not parallel:
        return counts
    busiest = ceil(sum(counts) / min(threads, sum(counts)))
    sizes = tuple(prod(s) for s in shapes) if shapes else (1,) * len(counts)
    weights = [0.0] * len(counts)
    for size in sorted(set(sizes), reverse=True):
        group = [i for i, s in enumerate(sizes) if s == size]
        tiles = sum(counts[i] for i in group)
        take = min(busiest, tiles)
        for i in group:
            weights[i] = counts[i] * (take / tiles)
        busiest -= take
    return tuple(weights)


def weights(node, target) -> tuple[float, ...]:
    """How often each of ``node``'s children runs per thread (the rule's weights)."""
    if isinstance(node, Loop):
        counts, shapes = tuple(r.count for r in node.regions), tuple(r.shape for r in node.regions)
        return loop_weights(counts, node.parallel, target.threads, shapes)
    return (1,) * len(node.children)


def recost(node, target):
    """``node`` with its cost derived again from its features and children (after a child changed)."""
    return replace(node, cost=combine(node.features.dot(target.costs), node.children, weights(node, target)))


def fma_steps(fmas: int, costs: CostTable) -> Features:
    """One step of an outer-product kernel: ``fmas`` independent vector FMAs, one per accumulator. Each
    accumulator is updated once per step, so with few of them FMA latency binds, not throughput: the
    step costs max(fmas × vec_fma, fma_latency), counted as ``vec_fma fmas`` or as ``fma_latency 1``,
    whichever the table makes dearer (the model's one non-linearity)."""
    if fmas * costs.vec_fma >= costs.fma_latency:
        return Features.of(vec_fma=fmas)
    return Features.of(fma_latency=1)


# -- loops -----------------------------------------------------------------------------------------
def loop_features(op, bodies, counts, dims, tile, parallel: bool, unrolled: bool, target) -> Features:
    """A loop's own work: one ``loop_iter`` per trip unless codegen unrolls it, the short runs it
    starts (``gl_short_run``); serial loops save ``l2_reuse_line`` (lines later trips read from L2);
    parallel loops pay their share of the output lines their tasks share (``shared_line``) and
    their per-trip work at the busiest thread's share, plus one ``parallel_setup``. ``bodies`` are the
    regions' specs, ``counts`` their tile counts. (Short runs are counted for all trips, also in a
    parallel loop: the model has always done so.)"""
    trips = sum(counts)
    loop_iter = 0 if unrolled else trips
    runs = short_runs(op, tile, dims, trips, target)
    if parallel:
        shared = sum(n * shared_lines(s) for n, s in zip(counts, bodies))
        per_trip = Features.of(loop_iter=loop_iter, shared_line=shared) * busiest_share(trips, target.threads)
        return per_trip + Features.of(parallel_setup=1, gl_short_run=runs)
    reuse = l2_reuse_lines(bodies[0], dims, trips, target)
    return Features.ordered(("gl_short_run", runs), ("loop_iter", loop_iter), ("l2_reuse_line", reuse))


def shared_lines(spec) -> int:
    """``shared_line`` of a parallel task's output tile in main memory: each strided run (a row part of
    a wider row) has edges on lines that other tasks write, so tasks should own whole rows where they can."""
    op = spec.op
    return sum(op.operands[i].runs() for i in op.outputs if op.operands[i].level == Level.GL)


def l2_reuse_lines(body, dims, trips: int, target) -> int:
    """``l2_reuse_line``: a serial loop whose body's main-memory operands fit in L2 together: those the
    loop does not index (A over a loop on n, C over a split of k) are read from L2 on every trip after
    the first. Bodies count their operands' lines as main-memory lines; this counts the lines that the
    later trips read from L2 instead. Without it the model cannot prefer blockings that keep a block
    of A in L2 (it has no L2 level). Operands whose runs evict each other from L2 (``l2_evicts``) save
    nothing."""
    op = body.op
    gl = [(i, t) for i, t in enumerate(op.operands) if t.level == Level.GL]
    if trips < 2 or sum(t.bytes for _, t in gl) > target.l2_bytes:
        return 0
    invariant = sum(
        t.lines() for i, t in gl if not any(d in dims for d in op.operand_iter_dims[i]) and not l2_evicts(t, target)
    )
    return (trips - 1) * invariant


def short_runs(op, tile: tuple[int, ...], dims: tuple[int, ...], trips: int, target) -> int:
    """``gl_short_run``: runs of main-memory inputs read once (a GEMV's weights) that a loop over ``dims``
    starts afresh: the loop steps the input along a dim other than its fastest one, so every trip reads
    new runs, and those shorter than a page each count (stepping the fastest dim continues the previous
    trip's runs). Inputs the op reuses (GEMM operands) come from the caches after their first reads;
    loops of ops without a reduction (moves, zeroing) count none, since the loops that place their tiles
    were charged."""
    if not op.reduction_dims:
        return 0
    runs = 0
    for i, (t, idims) in enumerate(zip(op.operands, op.operand_iter_dims)):
        reused = any(e > 1 for j, e in enumerate(op.iter_shape) if j not in idims)
        if i in op.outputs or reused or t.level != Level.GL or t.runs() == 1:
            continue
        stepped = {p for p, j in enumerate(idims) if j in dims}
        if not stepped or stepped == {t.layout.digits[-1].dim}:
            continue
        body = operand_tiles(op, tile)[i]  # only here: most loops count nothing, and plan() is hot
        if body.bytes < body.runs() * target.costs.page_bytes:
            runs += trips * body.runs()
    return runs


# -- memory: cache views, stride classes -----------------------------------------------------------
_LINE_FROM = {Level.GL: "gl_line", Level.L2: "l2_line"}  # else: l1_line
_STREAM_FROM = {Level.GL: "gl_line", Level.L2: "l2_stream"}  # else: nothing (already in L1)


def lines_from(t: TensorSpec) -> Features:
    """Bringing a tile's lines into L1 once (a cache view, a copy's source) from its level."""
    return Features.of(**{_LINE_FROM.get(t.level, "l1_line"): t.lines()})


def lines_read(t: TensorSpec) -> Features:
    """Lines a kernel's loads read straight from ``t``'s level: main-memory lines, or lines the
    prefetchers stream from an L2 view (``l2_stream``); L1 lines cost only the loads themselves."""
    name = _STREAM_FROM.get(t.level)
    return Features.of(**{name: t.lines()}) if name else NONE


def streams_read(t: TensorSpec, streams: int, separate: bool = False) -> Features:
    """Lines of a tile read as ``streams`` interleaved sequential streams (the B columns of a dot kernel);
    ``separate``: each stream is its own operand (the gated pair's B1 and B2 columns)."""
    return lines_read(t) + interleaved_lines(t, streams, separate)


def interleaved_lines(t: TensorSpec, streams: int, separate: bool = False) -> Features:
    """Main-memory lines read as one of several interleaved sequential streams: ``gl_two_streams`` for
    two streams of separate operands (one column of B1 beside one of B2), else ``gl_interleaved`` (the
    hardware prefetchers keep up with one stream; how many more they follow is the core's: calibrate
    measures both)."""
    if streams < 2 or t.level != Level.GL:
        return NONE
    two = streams == 2 and separate
    return Features.of(**{"gl_two_streams" if two else "gl_interleaved": t.lines()})


def view_features(operand: TensorSpec, streams: int = 1) -> Features:
    """A cache view: bringing a tile's lines from main memory (or L2) once, so that the body reads it
    from the cache. A view copies nothing: the body's first reads bring the lines, as ``streams``
    interleaved streams."""
    lines = operand.lines()
    if streams > 1 and operand.level == Level.GL:
        return Features.ordered(("gl_line", lines), ("gl_interleaved", lines))  # as interleaved_lines
    return Features.ordered((_LINE_FROM.get(operand.level, "l1_line"), lines))


def runs_per_set(t: TensorSpec, cache_bytes: int, ways: int) -> int:
    """How many runs of a tile with a stride class share each set of a cache: all of them when the
    class is a multiple of the set period (cache_bytes / ways), else one per period/alias runs."""
    return ceil(t.runs() / max(1, cache_bytes // ways // t.alias))


def view_evicts(t: TensorSpec, target) -> bool:
    """Whether a cache view of ``t`` would evict itself: more of its runs than ways share an L1 set. At
    an unknown stride, assume the usual power-of-two one, where all runs may collide; a stride class
    says how many do (view_footprint charges the ways they take from the buffers around them)."""
    per_set = runs_per_set(t, target.l1_bytes, target.l1_ways) if t.alias else t.runs()
    return per_set > target.l1_ways


def view_footprint(t: TensorSpec, target) -> int:
    """L1 bytes a cache view takes from the other buffers. Runs of a stride class fill whole ways of
    the few sets they map to, so the view costs those ways in every set (runs per set x set period): six
    rows 4 KiB apart leave no room for a 32 KiB B panel beside them in a 48 KiB, 12-way L1."""
    if not t.alias:
        return t.bytes
    return max(t.bytes, runs_per_set(t, target.l1_bytes, target.l1_ways) * (target.l1_bytes // target.l1_ways))


def copy_live_runs(src: TensorSpec, dst: TensorSpec) -> int:
    """How many of its source's runs a packing copy reads side by side: its innermost loop walks the
    destination's innermost digit (codegen's ``_digit_nest``), which crosses the source's runs when the copy
    transposes, one element of each run per trip; 1 when it walks along them."""
    inner = [(d, e) for d, e in zip(dst.layout.digits, dst.layout.extents(dst.shape)) if e > 1]
    runs = [d for d, e in zip(src.layout.digits, src.layout.extents(src.shape)) if e > 1]
    if not inner or not runs or inner[-1][0].dim == runs[-1].dim:
        return 1
    return inner[-1][1]


def copy_thrashes(src: TensorSpec, dst: TensorSpec, target) -> bool:
    """Whether a transposing copy evicts its own source lines: the runs it reads side by side stay in L1
    only while they take at most half the ways of the sets they share (the destination buffer and the
    other operands need the rest, as in l2_evicts), else each line is fetched again for every element.
    A stride class says how many share one: 16 (or 8) columns of a bf16 N x K matrix with K = 2048 are
    4 KiB apart, all in one set (Zen 3, 8 ways, one thread: 4x2048x16384 ran 124 ms, 9x the GEMV)."""
    live = copy_live_runs(src, dst)
    if not src.alias or live <= target.l1_ways // 2:
        return False
    return ceil(live / max(1, target.l1_bytes // target.l1_ways // src.alias)) > target.l1_ways // 2


def l2_evicts(t: TensorSpec, target) -> bool:
    """A tile whose runs take more than half the ways of an L2 set (a stride class) does not stay in L2:
    the other operands need the rest."""
    return t.alias > 0 and runs_per_set(t, target.l2_bytes, target.l2_ways) > target.l2_ways // 2


def fits_l2(t: TensorSpec, target) -> bool:
    """Whether a block may be kept in L2. Specs carry no L2 limit: each L2 view is at most a quarter of L2,
    and an operand already in L2 is never viewed there again, so a matmul's three operands fit together
    (the search views only B there, beside an A block: 512 KiB at most)."""
    return t.bytes <= target.l2_block_bytes


# -- search ----------------------------------------------------------------------------------------
def better(x, y) -> bool:
    """Total order on solutions: cost, then peak memory (fast levels first), then tree depth.
    (Equal keys keep the earlier action, so the search is deterministic.)"""
    from morello_build.ir.impl import depth

    kx, ky = (round(x.cost, 6), x.peaks[::-1]), (round(y.cost, 6), y.peaks[::-1])
    if kx != ky:
        return kx < ky
    return depth(x) < depth(y)


def lower_bound(spec, target) -> float:
    """A cost no program for ``spec`` can beat: every GL input line is read at least once (gl_line), and
    every multiply-add takes at least the cheapest kernel's share of a vec_fma (vdpbf16ps: two per
    lane); a matmul that may still get a parallel loop (not serial) splits that work over at most
    ``target.threads`` threads. Every feature's price is positive except l2_reuse_line, which only
    refunds part of a gl_line counted in a body, so the bound holds. (Priced directly: it is computed
    for every plan.)"""
    from morello_build.ir.spec import DType

    op, c = spec.op, target.costs
    inputs = [t for i, t in enumerate(op.operands) if i not in op.outputs]
    memory = sum(t.lines() * c.gl_line for t in inputs if t.level == Level.GL)
    if op.kind != "matmul":
        return memory
    volume = 1
    for s in op.iter_shape:
        volume *= s
    pairs = 2 if target.has("avx512bf16") and op.a.dtype == op.b.dtype == DType.BF16 else 1
    compute = volume * c.vec_fma / (pairs * target.lanes) if target.lanes else volume * c.scalar_op
    return (memory + compute) / (1 if op.serial else target.threads)
