"""The features of loops (cost.py's rule prices them): the trips, the short runs a loop starts or whose
streams the prefetchers lose, the L1 and L2 reuse of serial loops and the shared lines of parallel ones."""

from __future__ import annotations

from functools import lru_cache
from math import ceil

from morello_build.ir.formats import is_format
from morello_build.ir.machine import LINE_BYTES
from morello_build.ir.spec import Level, columns_unit_stride, operand_tiles
from morello_build.synth.caches import l2_evicts, view_evicts
from morello_build.synth.features import Features


def busiest_share(tiles: int, threads: int, tail: float = 0.0) -> float:
    """The share of a parallel loop's tiles that the busiest thread runs: ceil(tiles / threads) of them, and ``tail``
    of one more (``lateness``)."""
    return (ceil(tiles / min(threads, tiles)) + tail) / tiles


# A lateness under this share of a task is none: within calibrate's noise (the 2-vCPU Emerald Rapids VM measured 1%,
# its parallel call's median uncertain by 8%), where it would still tip the search from 2 tasks on 2 threads to 32.
TAIL_FLOOR = 0.10


def lateness(tasks: int, threads: int, costs) -> float:
    """How many tasks after the others the slowest of a parallel loop's P = min(threads, tasks) threads finishes:
    CostTable.tail_percent, measured with one task on each of tail_threads threads, times (P - 1) / (tail_threads - 1),
    the chance that the loop's threads include a slow one (a 16-vCPU Emerald Rapids VM: 107% on 16 threads, none in
    pairs); none on one thread or under TAIL_FLOOR."""
    p = min(threads, tasks)
    if p < 2 or not costs.tail_percent:
        return 0.0
    share = 1.0 if costs.tail_threads < 2 else min(1.0, (p - 1) / (costs.tail_threads - 1))
    late = costs.tail_percent / 100 * share
    return late if late >= TAIL_FLOOR else 0.0


def loop_features(op, bodies, counts, dims, tile, parallel: bool, unrolled: bool, target) -> Features:
    """A loop's own work: one ``loop_iter`` per trip unless codegen unrolls it, the short runs it
    starts or whose streams the prefetchers lose (``gl_short_run``); serial loops save ``l1_reuse_line``
    and ``l2_reuse_line`` (lines later trips find in L1 or read from L2); parallel loops pay their share
    of the output lines their tasks share (``shared_line``) and their per-trip work at the busiest
    thread's share, plus one ``parallel_setup``. ``bodies`` are the regions' specs, ``counts`` their tile
    counts. (Short runs are counted for all trips, also in a parallel loop: the model has always done so.)"""
    trips = sum(counts)
    loop_iter = 0 if unrolled else trips
    runs = short_runs(op, tile, dims, trips, target) + lost_streams(op, tile, dims, trips, target)
    bursts = long_bursts(op, tile, dims, trips, target)
    if parallel:
        shared = sum(n * shared_lines(s) for n, s in zip(counts, bodies))
        share = busiest_share(trips, target.threads, lateness(trips, target.threads, target.costs))
        per_trip = Features.of(loop_iter=loop_iter, shared_line=shared) * share
        return per_trip + Features.of(parallel_setup=1, gl_short_run=runs, gl_burst_line=bursts)
    (l1, l1_streams), in_l1 = l1_reuse_lines(op, bodies, counts, dims, target)
    l2, l2_streams = l2_reuse_lines(bodies[0], dims, trips, target, skip=in_l1)
    reuse = (("l1_reuse_line", l1), ("l2_reuse_line", l2))
    reuse += (("l1_reuse_stream_line", l1_streams), ("l2_reuse_stream_line", l2_streams))
    return Features.ordered(("gl_short_run", runs), ("gl_burst_line", bursts), ("loop_iter", loop_iter), *reuse)


def shared_lines(spec) -> int:
    """``shared_line`` of a parallel task's output tile in main memory: each strided run (a row part of
    a wider row) has edges on lines that other tasks write, so tasks should own whole rows where they can."""
    op = spec.op
    return sum(op.operands[i].runs() for i in op.outputs if op.operands[i].level == Level.GL)


def may_stream(op, i: int) -> bool:
    """Whether kernels may read operand ``i``'s main-memory lines as one of several streams, charging a stream
    adjustment (cost.streams_read, view_features): weights (B, or the pair's B1 and B2) whose columns are dense
    along K, as the dot kernels read them. Their refunds take the least line price (l1_reuse_stream_line)."""
    t = op.operands[i]
    return op.operand_names[i] in _WEIGHTS and (is_format(t.dtype) or columns_unit_stride(t))


_WEIGHTS = ("b", "b1", "b2")


def _split(lines_by_operand, op) -> tuple[int, int]:
    """(lines of operands no kernel reads as streams, lines of those that may: may_stream)."""
    plain = streams = 0
    for i, n in lines_by_operand:
        if n and may_stream(op, i):
            streams += n
        else:
            plain += n
    return plain, streams


def l2_reuse_lines(body, dims, trips: int, target, skip: tuple[int, ...] = ()) -> tuple[int, int]:
    """``l2_reuse_line``: a serial loop whose body's main-memory operands fit in L2 together: those the
    loop does not index (A over a loop on n, C over a split of k) are read from L2 on every trip after
    the first. Bodies count their operands' lines as main-memory lines; this counts the lines that the
    later trips read from L2 instead. Without it the model cannot prefer blockings that keep a block
    of A in L2 (it has no L2 level). Operands whose runs evict each other from L2 (``l2_evicts``) save
    nothing, and neither do those ``skip`` names (l1_reuse_lines refunds them). Returns the lines of
    operands no kernel reads as streams and of those that may (may_stream), apart."""
    op = body.op
    gl = [(i, t) for i, t in enumerate(op.operands) if t.level == Level.GL]
    if trips < 2 or sum(t.bytes for _, t in gl) > target.l2_bytes:
        return 0, 0
    invariant = (
        (i, (trips - 1) * t.lines())
        for i, t in gl
        if i not in skip and not any(d in dims for d in op.operand_iter_dims[i]) and not l2_evicts(t, target)
    )
    return _split(invariant, op)


def l1_reuse_lines(op, bodies, counts, dims, target) -> tuple[tuple[int, int], tuple[int, ...]]:
    """``l1_reuse_line`` and ``l1_reuse_stream_line`` (the lines of operands that may_stream), and the operands they
    count: a serial loop whose trip's main-memory tiles fit in L1 together (at most half of it, none of them
    evicting itself by its stride class) finds on later trips the lines earlier trips brought in: every line of an
    input the loop does not index, the lines that consecutive trips' tiles share where the loop steps an input by
    less than a line (a split of k by 2 reads each row's line of A on 8 trips), and a split's output, which later
    trips load again (its stores stay at main memory's price: not every store kernel counts a line, scalar ones do
    not, and a refund must not exceed what the body counts). Bodies count those lines as main-memory lines on every
    trip; this counts those beyond the lines the loop reads once. 32^3 on Zen 4, warm: splits of k by 2, 4 and 8
    costed 5.9x, 3.2x and 1.9x the pick (now 4.2x, 2.5x and 1.7x) and ran 1.7x, 1.2x and 1.1x; tiles of 4 and 1 rows
    costed 1.5x and 3.5x (now 1.3x and 2.5x), ran 1.0x and 2.0x. Not the output where the loop's op streams an input
    read once (a GEMV's weights), whose speed is that of the stream: keeping 8 KiB of C in L1 made a K x N GEMV read
    B in 4-row trips of 4 KiB runs, 1.4x slower than 8 rows at a time with C in L2 (Zen 4), which the model cannot
    tell (l2_reuse_lines)."""
    trips = sum(counts)
    body = bodies[0].op
    gl = [i for i, t in enumerate(body.operands) if t.level == Level.GL]
    if trips < 2 or not body.reduction_dims or sum(body.operands[i].bytes for i in gl) > target.l1_bytes // 2:
        return (0, 0), ()
    if not all(_stays_in_l1(op.operands[i], body.operands[i], target) for i in gl):
        return (0, 0), ()
    streamed = bool(_read_once(op))
    saved, counted = [], []
    for i in gl:
        charged = sum(n * b.op.operands[i].lines() for n, b in zip(counts, bodies))
        if i not in body.outputs:
            saved.append((i, max(0, charged - op.operands[i].lines())))
        elif streamed or any(d in dims for d in body.operand_iter_dims[i]):
            continue  # l2_reuse_lines' (a split's output), or stepped: written once
        else:  # loaded again on later trips (their stores are not all charged as lines: scalar ones are not)
            saved.append((i, charged - body.operands[i].lines()))
        counted.append(i)
    return _split(saved, op), tuple(counted)


def _stays_in_l1(whole, tile, target) -> bool:
    """Whether a loop's trips keep their tiles of an operand in L1: one dense run of at most half of L1 cannot
    evict itself; otherwise the tile's runs must not crowd an L1 set (view_evicts: a stride class, else the
    worst case)."""
    return (whole.runs() == 1 and whole.bytes <= target.l1_bytes // 2) or not view_evicts(tile, target)


def short_runs(op, tile: tuple[int, ...], dims: tuple[int, ...], trips: int, target) -> int:
    """``gl_short_run``: runs of main-memory inputs read once (a GEMV's weights) that a loop over ``dims``
    starts afresh: the loop steps the input along a dim other than its fastest one, so every trip reads
    new runs, and those shorter than a page each count (stepping the fastest dim continues the previous
    trip's runs). Inputs the op reuses (GEMM operands) come from the caches after their first reads;
    loops of ops without a reduction (moves, zeroing) count none, since the loops that place their tiles
    were charged."""
    runs = 0
    for i, t, idims in _read_once(op):
        if t.runs() == 1:
            continue
        stepped = {p for p, j in enumerate(idims) if j in dims}
        if not stepped or stepped == {t.layout.digits[-1].dim}:
            continue
        body = operand_tiles(op, tile)[i]  # only here: most loops count nothing, and plan() is hot
        if body.bytes < body.runs() * target.costs.page_bytes:
            runs += trips * body.runs()
    return runs


def lost_streams(op, tile: tuple[int, ...], dims: tuple[int, ...], trips: int, target) -> int:
    """``gl_short_run``: a loop that steps a main-memory input read once (a GEMV's weights) along its fastest
    dim continues the body's runs on every trip, so each run of the body's tile is a stream the prefetchers
    follow side by side. Past ``prefetch_streams`` of them, each shorter than a page, they lose track: every
    trip's piece of every run is a short run whose lines wait for DRAM (1x2048x4096 bf16 K x N on Zen 3, one
    thread: k tiles of 8 rows read 13.8 GB/s, of 16 rows 7.6, of 32 to 64 rows 2.8, while the model costed
    them within 3% of each other). Short runs are counted for a parallel loop's trips too, as short_runs'."""
    runs = 0
    for body in _streamed_tiles(op, tile, dims):
        n = body.runs()
        if n > target.costs.prefetch_streams and body.bytes < n * target.costs.page_bytes:
            runs += trips * n
    return runs


def long_bursts(op, tile: tuple[int, ...], dims: tuple[int, ...], trips: int, target) -> float:
    """``gl_burst_line``: a loop that steps a main-memory input read once (a GEMV's weights) along its fastest
    dim, over a body tile of 2 to ``prefetch_streams`` runs (streams the prefetchers follow side by side: K x N
    weights, several rows at a time), reads each trip's piece of each run in one burst (the register tiles the
    search builds load a row's columns together); the lines of a piece past ``stream_burst_bytes`` count. The
    input may be an L1 view of several rows: the loops inside a view read it from main memory as they go.
    Counted for a parallel loop's trips too, as short_runs'."""
    burst = target.costs.stream_burst_bytes
    lines = 0.0
    for body in _streamed_tiles(op, tile, dims, views=True) if burst else ():
        n = body.runs()
        if 2 <= n <= target.costs.prefetch_streams and body.bytes > n * burst:
            lines += trips * (body.bytes - n * burst) / LINE_BYTES
    return lines


def _streamed_tiles(op, tile: tuple[int, ...], dims: tuple[int, ...], views: bool = False):
    """The body tiles of the read-once inputs (_read_once) that a loop over ``dims`` steps along their fastest
    dim only, so that each run of the tile continues on the next trip: streams side by side (lost_streams,
    long_bursts)."""
    for i, t, idims in _read_once(op, views):
        if {p for p, j in enumerate(idims) if j in dims} == {t.layout.digits[-1].dim}:
            yield operand_tiles(op, tile)[i]  # only here: most loops count nothing, and plan() is hot


@lru_cache(maxsize=1 << 16)  # size: tile._loop_shape
def _read_once(op, views: bool = False) -> tuple:
    """(index, tile, iteration dims) of the main-memory inputs of an op with a reduction that no other dim
    reuses (short_runs, lost_streams), with ``views`` also its L1 views of several runs (long_bursts: a dense
    copy is one run); once per op, whose loops the search plans a dozen of."""
    if not op.reduction_dims:
        return ()
    shape, operands = op.iter_shape, enumerate(zip(op.operands, op.operand_iter_dims))
    return tuple(
        (i, t, idims)
        for i, (t, idims) in operands
        if i not in op.outputs
        and (t.level == Level.GL or views and t.level == Level.L1 and t.runs() > 1)
        and not any(e > 1 for j, e in enumerate(shape) if j not in idims)
    )
