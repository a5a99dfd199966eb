"""The cost model, in one module: what a node costs, from the named features of its own work.

Every Impl node carries ``features``: counts of its own work (not its children's), each named after a
field of the target's ``CostTable``, which documents what one unit of it is (a 64-byte line from main
memory, a vector FMA, a loop trip, ...). Kernels count their instructions and the lines they read
(``target/kernels/``); a loop counts its trips, the output lines its parallel tasks share, the short
runs it starts and the main-memory lines its later trips read from L2; a cache view counts the lines
it brings in. Nothing else prices anything: a node's cost is derived here, by two rules.

The port rule (``parts``, ``combine``): a feature's count times its price is cycles in one class
(CLASSES: a port class of the core, the transfer of lines, or serial work). A node's parts are

    parts(node) = parts(features(node))  +  sum over children i of  weight_i × parts(child_i)

except that a packing copy is a phase of its own (``move_phases``: its cost is serial). ``weight_i`` is
how often child i runs on one thread (``weights``): once for a move's load, body and store and for
to_accum's zero and body; ``region.count`` times for a serial loop's bodies; and for a parallel loop,
whose tasks are split over ``target.threads`` threads, how many of its tasks the busiest thread runs:
ceil(tasks / threads) of them, the largest tiles first (a ragged loop's full tiles before its
remainders). A parallel loop's per-trip features are scaled by the busiest thread's share of the tasks,
ceil(tasks / threads) / tasks (``loop_features``), and its bodies' transfers by how much slower each of its
threads reads main memory while the others read too (``contention``: the threads share the machine's memory
channels, so a DRAM-bound loop does not run N times faster on N threads).

The overlap rule (``overlap``, ECM-style): cost = max(busiest core class, L1 ports + transfers) + serial.
So the k step of a register tile costs its busiest port (FMAs, loads and broadcasts, the FMA latency
chain, dispatch), not their sum, and transfers hide behind FMAs. The surcharges of one class still
stack: a main-memory line that a dot kernel reads as one of several streams counts one ``gl_line`` and
one ``gl_interleaved``; ``l1_reuse_line`` and ``l2_reuse_line`` refund part of the ``gl_line`` of lines later
trips find in L1 or L2 (``l1_reuse_stream_line`` and ``l2_reuse_stream_line`` for lines that may have been read
as streams: loops.may_stream).

The memo keeps one program per spec, the cheapest by its own cost (then by summed work, ``better``); a
parent's cost is not the sum of its children's, so that choice is exact per spec and an approximation
for the parent (a cheaper child may load a port its siblings already fill). The search's bounds are
parts too (``bound_parts``, Plan.lower_bound), so pruning stays sound.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil, prod

from morello_build.ir.impl import Loop, MoveImpl
from morello_build.ir.spec import Level, TensorSpec
from morello_build.synth.caches import (  # noqa: F401 (re-exported: the model's users import them from here)
    copy_live_runs,
    copy_thrashes,
    fits_l2,
    l2_evicts,
    runs_per_set,
    view_evicts,
    view_footprint,
)
from morello_build.synth.features import FEATURES, NONE, Features  # noqa: F401 (re-exported)
from morello_build.synth.loops import (  # noqa: F401 (re-exported: the loop features, priced here)
    busiest_share,
    l1_reuse_lines,
    l2_reuse_lines,
    lateness,
    long_bursts,
    loop_features,
    lost_streams,
    shared_lines,
    short_runs,
)
from morello_build.target.costs import CostTable

# -- the rule --------------------------------------------------------------------------------------
# Where each feature's cycles go (CLASSES), as in the ECM model (Hager, Treibig, Wellein et al.): a port
# class of the core, the transfer of lines between memory levels, or serial work that overlaps nothing
# (stalls, thread start-up, latency-bound reductions). The core's classes run in parallel on its ports,
# so the busiest bounds them; the L1 ports' classes (load, store) do not overlap the transfers, which
# move lines through the same L1 ports (ECM's T_nOL + T_data). ``dispatch`` is the front end: every
# instruction-like feature also takes _UOPS slots of the table's ``dispatch`` per cycle.
OVERLAPPING = ("fma", "alu", "shuffle", "imul", "chain", "branch", "copy", "scalar", "dispatch", "vector")
PORTS = OVERLAPPING + ("load", "store")
# "phased": bookkeeping, no cost: the transfer cycles of phases below (combine), which refunds reach first.
CLASSES = PORTS + ("transfer", "serial", "phased")
_CLASS_OF = {
    "vec_fma": "fma",
    "vec_load": "load",  # loads and broadcasts from memory share the load ports
    "vec_store": "store",
    "vec_op": "alu",
    "vec_shuffle": "shuffle",  # the shuffle pipes (Intel: port 5), apart from the ALU's: kernels bound by them
    "vec_imul": "imul",  # the integer multipliers (Intel: ports 0 and 1; Zen: FP0 and FP3)
    "vec_zero": "alu",
    "fma_latency": "chain",  # the accumulators' dependency chain (fma_steps)
    "loop_iter": "branch",  # at most one taken branch per cycle
    "copy_elem": "copy",
    "copy_gather_elem": "copy",
    "scalar_op": "scalar",
    "gl_line": "transfer",
    "gl_interleaved": "transfer",
    "gl_two_streams": "transfer",
    "gl_short_run": "serial",  # the first lines of a run wait for DRAM: nothing else to do
    "gl_burst_line": "transfer",  # a line of a long burst of rows read side by side: slower transfers
    "l1_line": "transfer",
    "l2_line": "transfer",
    "l2_stream": "transfer",
    "l1_reuse_line": "transfer",  # refunds part of a gl_line: the same class
    "l2_reuse_line": "transfer",
    "l1_reuse_stream_line": "transfer",
    "l2_reuse_stream_line": "transfer",
    "hsum": "serial",  # a latency-bound shuffle-and-add chain
    "parallel_setup": "serial",
    "shared_line": "serial",
    "gl_line_shared": "transfer",  # no node counts it: the machine's line time, which ``contention`` reads
}
_UOPS = {"vec_fma": 1, "vec_load": 1, "vec_store": 1, "vec_op": 1, "vec_zero": 1, "loop_iter": 2, "scalar_op": 1}
_UOPS |= {"vec_shuffle": 1, "vec_imul": 1}
# The vector instructions that also queue for the pipes all of them share (CostTable.vec_pipes: "vector").
_VECTOR = frozenset({"vec_fma", "vec_op", "vec_shuffle", "vec_imul"})
_INDEX = {name: CLASSES.index(_CLASS_OF[name]) for name in FEATURES}
N_OL, LOAD, STORE = len(OVERLAPPING), CLASSES.index("load"), CLASSES.index("store")
DISPATCH, VECTOR = CLASSES.index("dispatch"), CLASSES.index("vector")
TRANSFER, SERIAL, PHASED = (CLASSES.index(c) for c in ("transfer", "serial", "phased"))
_VECTOR_CLASSES = tuple(CLASSES.index(c) for c in ("fma", "alu", "shuffle", "imul"))
ZERO = (0.0,) * len(CLASSES)


def parts(features: Features, costs: CostTable) -> tuple[float, ...]:
    """A node's own features as cycles per class (CLASSES): each count times its price, in its class;
    instruction-like counts also take dispatch slots, and vector instructions the shared vector pipes'."""
    out = [0.0] * len(CLASSES)
    for n, c in features:
        out[_INDEX[n]] += c * getattr(costs, n)
        if n in _UOPS:
            out[DISPATCH] += c * _UOPS[n] / costs.dispatch
        if costs.vec_pipes and n in _VECTOR:
            out[VECTOR] += c / costs.vec_pipes
    return tuple(out)


def overlap(p: tuple[float, ...], hidden: float = 1.0) -> float:
    """THE overlap rule (ECM): the core's work takes as long as its busiest port class; the transfers of
    lines overlap it but not the L1 ports' work; serial work adds. ``hidden`` (CostTable.hidden) is the
    share of the rest that the core hides behind the busiest (1: ECM's full overlap, 0: the sum):

        busiest = max(max over OVERLAPPING, max(load, store) + transfer)
        cost = busiest + (1 - hidden) × (work of those classes - busiest) + serial

    The work counts each instruction once: not the dispatch class, and where the vector pipes are shared
    (CostTable.vec_pipes) their class in place of the vector instructions' own (fma, alu, shuffle, imul).
    """
    busiest = max(max(p[:N_OL]), max(p[LOAD], p[STORE]) + p[TRANSFER])
    if hidden < 1.0:
        vector = p[VECTOR] or sum(p[i] for i in _VECTOR_CLASSES)
        core = sum(p[:N_OL]) - p[DISPATCH] - p[VECTOR] - sum(p[i] for i in _VECTOR_CLASSES) + vector
        total = core + p[LOAD] + p[STORE] + p[TRANSFER]
        busiest += (1.0 - hidden) * (total - busiest)
    return busiest + p[SERIAL]


def describe_parts(p: tuple[float, ...], hidden: float) -> str:
    """A node's parts as ``overlap`` prices them, for ``explain --features`` (format_tree's ``by_class``):
    each class's cycles (the node and its children, per thread), the binding class, and how the rest adds."""
    core = max(p[:N_OL], default=0.0)
    memory = max(p[LOAD], p[STORE]) + p[TRANSFER]
    binding = "L1 ports + transfers" if memory >= core else CLASSES[p[:N_OL].index(core)]
    classes = ", ".join(f"{c} {x:,.1f}" for c, x in zip(CLASSES, p) if x and c != "phased")
    rest = f" + {1 - hidden:.0%} of the rest" if hidden < 1.0 else ""
    return f"{classes or 'nothing'}; cost = {binding} {max(core, memory):,.1f}{rest} + serial"


def split_refund(own) -> tuple[list[float], float]:
    """A node's own parts without its refund, and the refund: a loop's reuse refunds (l1_reuse_line,
    l2_reuse_line and their stream kinds), the only negative parts, which net into its transfers (combine and
    Plan.lower_bound place them)."""
    parts = list(own)
    refund = min(0.0, parts[TRANSFER])
    parts[TRANSFER] -= refund
    return parts, refund


def combine(
    own: tuple[float, ...], children, weights, phases=(), hidden=1.0, contended=1.0
) -> tuple[float, tuple[float, ...]]:
    """THE combination rule (see the module docstring): a node's parts are its own features' parts
    (``parts(features, costs)``, computed once per plan) plus each child's parts times how often it runs
    per thread (its transfers, those of its phases too, also times ``contended``: a parallel loop's
    ``contention``), except that a child in ``phases`` (a packing copy: ``move_phases``) runs as a phase
    of its own: its cost is serial. A loop's refunds (its reuse refunds: its only negative parts) go to the
    lines where they were counted: those of phases first (their serial cost), then the transfers. The
    node's cost is ``overlap`` of its parts (``hidden``: CostTable.hidden). Returns (cost, parts)."""
    total, refund = split_refund(own)
    for i, (w, c) in enumerate(zip(weights, children)):
        p = c.parts
        if i in phases:
            total[SERIAL] += w * c.cost
            total[PHASED] += w * (p[TRANSFER] + p[PHASED])
            continue
        total = [t + w * x for t, x in zip(total, p)]
        if contended != 1.0:  # the phases' transfers below (PHASED) are in their serial cost: it grows as much
            extra = contended - 1.0
            total[TRANSFER] += w * p[TRANSFER] * extra
            total[SERIAL] += w * p[PHASED] * extra
            total[PHASED] += w * p[PHASED] * extra
    if refund:
        phased = max(refund, -total[PHASED])
        total[SERIAL] += phased
        total[PHASED] += phased
        total[TRANSFER] += refund - phased
    return overlap(total, hidden), tuple(total)


def move_phases(view: bool, level: Level, has_load: bool, has_store: bool) -> tuple[int, ...]:
    """The children of a move that run as phases of their own: a copy into a memory buffer (packing)
    and a copy out of it finish before (or start after) the body; the core does not overlap them with
    it. Moves into registers are instructions of the body's stream, and views copy nothing."""
    if view or not level.has_memory_buffers:
        return ()
    load = (0,) if has_load else ()
    return load + ((1 + has_load,) if has_store else ())  # children: (load, body, store), the absent left out


def work(impl) -> float:
    """The tie-break of equal costs: the node's work summed over its classes as the additive model did
    (dispatch and the shared vector pipes excluded: they count the same instructions again); less work leaves
    more slack."""
    p = impl.parts
    return sum(p) - p[DISPATCH] - p[VECTOR] - p[PHASED]


def loop_weights(counts: tuple[int, ...], parallel: bool, threads: int, shapes=None, tail=0.0) -> tuple[float, ...]:
    """How often each region's body runs on one thread: all its tiles (serial), or the busiest thread's
    part of them (parallel). The busiest thread runs ceil(tiles / threads) tasks, and it may draw the
    largest ones: those are taken from the regions in order of their tiles' volumes (``shapes``: each
    region's tile shape; all equal when not given), so small ragged tiles do not dilute the imbalance.
    Regions of equal volume share the busiest thread's tasks in proportion to their counts. The slowest
    thread also finishes ``tail`` of one of the largest tasks after the others (loops.lateness): a loop of
    finer tasks loses less to it."""
    if not parallel:
        return counts
    busiest = ceil(sum(counts) / min(threads, sum(counts))) + tail
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


def thread_weights(counts: tuple[int, ...], parallel: bool, shapes, target) -> tuple[float, ...]:
    """``loop_weights`` on the target's threads, with the slowest thread's lateness (loops.lateness) for a loop of
    these regions: what a Loop node's children weigh, and what tile actions price before the node exists."""
    tail = lateness(sum(counts), target.threads, target.costs)
    return loop_weights(counts, parallel, target.threads, shapes, tail)


def contention(counts: tuple[int, ...], parallel: bool, target) -> float:
    """How much slower each thread of a parallel loop reads main memory than it would alone: its P threads
    (min(threads, tasks)) read at once, and the machine delivers at most gl_line / gl_line_shared threads'
    worth of one thread's bandwidth (CostTable.gl_line_shared: `calibrate` measures it; 0, unknown: 1, as the
    built-in tables). Applied to all the bodies' transfers, which in a DRAM-bound loop are main-memory lines.
    A 16-vCPU Emerald Rapids VM: 1.92 against 13.7 cycles a line, so 16 threads each read 2.2x slower than one
    (the flagship GEMV ran 7.0x faster on 16 threads than on one through a dynamic pool, 8.3x through the header's
    own: bench/SCALING.md)."""
    c = target.costs
    if not parallel or c.gl_line_shared <= 0 or c.gl_line <= 0:
        return 1.0
    return max(1.0, min(target.threads, sum(counts)) * c.gl_line_shared / c.gl_line)


def weights(node, target) -> tuple[float, ...]:
    """How often each of ``node``'s children runs per thread (the rule's weights)."""
    if isinstance(node, Loop):
        counts, shapes = tuple(r.count for r in node.regions), tuple(r.shape for r in node.regions)
        return thread_weights(counts, node.parallel, shapes, target)
    return (1,) * len(node.children)


def phases(node) -> tuple[int, ...]:
    """Which of ``node``'s children run as phases of their own (``move_phases``)."""
    if isinstance(node, MoveImpl):
        return move_phases(node.view, node.buffer.level, node.load is not None, node.store is not None)
    return ()


def recost(node, target):
    """``node`` with its cost derived again from its features and children (after a child changed)."""
    own = parts(node.features, target.costs)
    contended = contention(tuple(r.count for r in node.regions), node.parallel, target) if isinstance(node, Loop) else 1
    c, p = combine(own, node.children, weights(node, target), phases(node), target.costs.hidden, contended)
    return replace(node, cost=c, parts=p)


def fma_steps(fmas: int, costs: CostTable) -> Features:
    """One step of an outer-product kernel: ``fmas`` independent vector FMAs, one per accumulator. Each
    accumulator is updated once per step, so the step is also one link of their dependency chain: it
    counts ``vec_fma fmas`` (the FMA ports) and ``fma_latency 1`` (the chain), and the port rule takes
    the busier (with few accumulators, latency binds, not throughput)."""
    return Features.of(vec_fma=fmas, fma_latency=1)


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


# -- search ----------------------------------------------------------------------------------------
def better(x, y) -> bool:
    """Total order on solutions: cost, then work (the sum over classes: programs bound by the same port
    often cost alike), then peak memory (fast levels first), then tree depth.
    (Equal keys keep the earlier action, so the search is deterministic: better_keyed's indexes.)"""
    return better_keyed(x, order_key(x), y, order_key(y))


def order_key(impl) -> tuple:
    """``better``'s key (cost, work, peaks), compared before depth."""
    return round(impl.cost, 6), round(work(impl), 6), impl.peaks[::-1]


def better_keyed(x, kx, y, ky, ix: int = 0, iy: int = 0) -> bool:
    """``better`` given both ``order_key``s (the search keeps its best's: it compares every solution with it), and
    where all else ties, the lower index: the search tries a spec's actions in the order of their bounds, and
    ``ix`` / ``iy`` say where their actions come in the enumeration (the first of equals wins, as in a scan)."""
    from morello_build.ir.impl import depth

    if kx != ky:
        return kx < ky
    dx, dy = depth(x), depth(y)
    return dx < dy if dx != dy else ix < iy


def lower_bound(spec, target) -> float:
    """A cost no program for ``spec`` can beat (``bound_parts``, by the overlap rule with all hidden: a
    table that hides less only adds)."""
    return overlap(bound_parts(spec, target))


def bound_parts(spec, target) -> tuple[float, ...]:
    """A cost no program for ``spec`` can beat: every GL input line is read at least once (at
    ``least_gl_line``), and every multiply-add takes at least the cheapest kernel's share of a vec_fma
    (vdpbf16ps: two per lane); a spec that may still get a parallel loop (not serial) splits that work over at
    most ``target.threads`` threads (a gated pair's too: without, the search missed the 2-thread optimum of
    gated 1x2560x10240 by 0.13%). As parts: the search adds them up over a plan's sub-specs
    (Plan.lower_bound), and a program's parts hold at least these FMAs and lines (its phases cost at least
    their parts). Every feature's price is positive except the reuse refunds, which only refund part of a
    gl_line counted in a body (a line read again never costs less than l1_line: lines that may have been read
    as streams are refunded from the least line price), and the stream adjustments (a calibrated core may read
    several streams faster than one), so the bound holds. (Priced directly: it is computed for
    every plan.)"""
    from morello_build.ir.spec import DType

    op, c = spec.op, target.costs
    inputs = [t for i, t in enumerate(op.operands) if i not in op.outputs]
    memory = sum(t.lines() * c.least_gl_line for t in inputs if t.level == Level.GL)
    share = 1 if op.serial else target.threads
    if op.kind != "matmul":
        return _bound_parts(memory / share, 0.0, "fma")
    volume = 1
    for s in op.iter_shape:
        volume *= s
    pairs = 2 if target.has("avx512bf16") and op.a.dtype == op.b.dtype == DType.BF16 else 1
    compute = volume * c.vec_fma / (pairs * target.lanes) if target.lanes else volume * c.scalar_op
    return _bound_parts(memory / share, compute / share, "fma" if target.lanes else "scalar")


def _bound_parts(memory: float, compute: float, port: str) -> tuple[float, ...]:
    p = [0.0] * len(CLASSES)
    p[TRANSFER], p[CLASSES.index(port)] = memory, compute
    return tuple(p)
