"""The affine cost model for composite nodes; kernel costs come from the target's catalog."""
from __future__ import annotations

from math import ceil

from morello_build.ir.impl import Region
from morello_build.ir.spec import Level, TensorSpec, operand_tiles


def loop_cost(regions: tuple[Region, ...], parallel: bool, target, unrolled: bool = False) -> float:
    """Body cost times trips (remainders included), plus loop overhead unless codegen unrolls the loop;
    parallel loops split tiles over the cores and pay for the output lines their tasks share."""
    c = target.costs
    tiles = sum(r.count for r in regions)
    overhead = 0.0 if unrolled else c.loop_iter
    work = sum(r.count * (r.body.cost + overhead) for r in regions)
    if not parallel:
        return work
    work += sum(r.count * shared_output_cost(r.body.spec, target) for r in regions)
    per_core_tiles = ceil(tiles / min(target.cores, tiles))
    return work * per_core_tiles / tiles + c.parallel_setup


def shared_output_cost(spec, target) -> float:
    """A parallel task's output tile in main memory: each strided run (a row part of a wider row) has
    edges on lines that other tasks write, so tasks should own whole rows where they can."""
    op = spec.op
    runs = sum(op.operands[i].runs() for i in op.outputs if op.operands[i].level == Level.GL)
    return runs * target.costs.shared_line


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


def l2_reuse_credit(body, dims, trips: int, target) -> float:
    """A serial loop whose body's main-memory operands fit in L2 together: those the loop does not index
    (A over a loop on n, C over a split of k) are read from L2 on every trip after the first. Bodies
    cost their operands' lines at main-memory price; this is what the later trips save. Without it the
    model cannot prefer blockings that keep a block of A in L2 (it has no L2 level)."""
    op, c = body.op, target.costs
    gl = [(i, t) for i, t in enumerate(op.operands) if t.level == Level.GL]
    if trips < 2 or sum(t.bytes for _, t in gl) > target.l2_bytes:
        return 0.0
    invariant = sum(
        t.lines() for i, t in gl
        if not any(d in dims for d in op.operand_iter_dims[i]) and not l2_evicts(t, target)
    )
    return (trips - 1) * invariant * (c.gl_line - c.l2_line)


def l2_evicts(t: TensorSpec, target) -> bool:
    """A tile whose runs take more than half the ways of an L2 set (a stride class) does not stay in L2:
    the other operands need the rest."""
    return t.alias > 0 and runs_per_set(t, target.l2_bytes, target.l2_ways) > target.l2_ways // 2


def view_cost(operand: TensorSpec, target, streams: int = 1) -> float:
    """Bringing a tile's lines from main memory (or L2) once, so that the body reads it from the cache.
    A view copies nothing: the body's first reads bring the lines, as ``streams`` interleaved streams."""
    return operand.lines() * target.costs.line_from(operand.level) + interleaving_cost(operand, streams, target)


def interleaving_cost(t: TensorSpec, streams: int, target) -> float:
    """What reading a main-memory tile as several interleaved sequential streams costs beyond its lines:
    the hardware prefetchers keep up with one stream, not with several (CostTable.gl_interleaved)."""
    return t.lines() * target.costs.gl_interleaved if streams > 1 and t.level == Level.GL else 0.0


def short_runs_cost(op, tile: tuple[int, ...], dims: tuple[int, ...], trips: int, target) -> float:
    """Runs of main-memory inputs read once (a GEMV's weights) that a loop over ``dims`` starts afresh: the
    loop steps the input along a dim other than its fastest one, so every trip reads new runs, and those
    shorter than a page each pay gl_short_run (stepping the fastest dim continues the previous trip's
    runs). Inputs the op reuses (GEMM operands) come from the caches after their first reads; loops of
    moves pay nothing, since the matmul loops that place their tiles were charged."""
    if op.kind != "matmul":
        return 0.0
    cost = 0.0
    for i, (t, idims) in enumerate(zip(op.operands, op.operand_iter_dims)):
        reused = any(e > 1 for j, e in enumerate(op.iter_shape) if j not in idims)
        if i in op.outputs or reused or t.level != Level.GL or t.runs() == 1:
            continue
        stepped = {p for p, j in enumerate(idims) if j in dims}
        if not stepped or stepped == {t.layout.digits[-1].dim}:
            continue
        body = operand_tiles(op, tile)[i]  # only here: most loops charge nothing, and plan() is hot
        if body.bytes < body.runs() * target.costs.page_bytes:
            cost += trips * body.runs() * target.costs.gl_short_run
    return cost


def fits_l2(t: TensorSpec, target) -> bool:
    """Whether a block may be kept in L2. Specs carry no L2 limit: each L2 view is at most a quarter of L2,
    and an operand already in L2 is never viewed there again, so a matmul's three operands fit together
    (the search views only B there, beside an A block: 512 KiB at most)."""
    return t.bytes <= target.l2_block_bytes


def better(x, y) -> bool:
    """Total order on solutions: cost, then peak memory (fast levels first), then tree depth.
    (Equal keys keep the earlier action, so the search is deterministic.)"""
    from morello_build.ir.impl import depth

    kx, ky = (round(x.cost, 6), x.peaks[::-1]), (round(y.cost, 6), y.peaks[::-1])
    if kx != ky:
        return kx < ky
    return depth(x) < depth(y)


def lower_bound(spec, target) -> float:
    """A cost no program for ``spec`` can beat: every GL input line is read at least once, and every
    multiply-add takes at least the cheapest kernel's share of an FMA (vdpbf16ps: two per lane)."""
    from morello_build.ir.spec import DType, Level

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
    return memory + compute
