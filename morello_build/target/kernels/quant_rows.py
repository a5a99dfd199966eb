"""Multi-row dot kernels over B in a weight format: C (1xmxn, scalar registers) += A (mxK, f32, rows dense
along K) · B (Kxn, each column's K values in the format), for small batches of tokens (decode, M = 2..8).

dot_quant (quant.py) reads one row of A; a C tile of m rows would run it m times, loading and widening
each chunk of B once per row. Here each B chunk is loaded and widened ONCE per loop trip (the format's
ISA helper, quant.widen_call) and FMA'd into m accumulators, one per row of A (as rows.py does for f32
and bf16 B). Formats with several groups along K multiply the widened chunk by its group's scale (one
multiply shared by the m rows: exact values times the scale, rounded once, as the reference's
dequantized weight is), so the accumulators run across groups; one group (per-channel scales) scales the
sums at the end. Per chunk: n B loads and widenings, m A loads (each kept in a register for the n
columns: rows.py), m·n FMAs; m·n horizontal sums. B's columns streamed from main memory are prefetched as
dot_quant prefetches them (quant.prefetch_plan; several groups: the next columns a share per group,
step_slots), except several columns of one group (no scales, or per channel) in a rolled loop: there each
trip brings into L2 its share of the next kernel's columns, as rows.py's kernels do (dot.next_columns_head),
so that B is read as one stream. The gated pair's form (``dot_quant_rows_pair``) reads a column of B1 beside
one of B2, each A chunk loaded once for both, each B's next columns prefetched (gated 4x2560x10240 act=gelu
from DRAM, one thread, Zen 4: q8_0 11.4 -> 6.5 ms, f16 13.8 -> 8.0, against two dot_quant_rows a column).
"""

from __future__ import annotations

from math import ceil

from morello_build.ir.formats import is_format
from morello_build.ir.spec import Level, Matmul
from morello_build.synth.cost import Features, lines_read
from morello_build.target.kernels.common import F32, KernelDef, check_dot_operands, pairwise_sum
from morello_build.target.kernels.dot import (
    b_dtype,
    bs_cs,
    dot_columns,
    dot_shape,
    next_columns_head,
    next_columns_loads,
)
from morello_build.target.kernels.quant import (
    chunk_loop,
    column_pointers,
    column_reads,
    column_scale_features,
    group_loop,
    group_size,
    prefetch_head,
    prefetch_plan,
    rolled,
    scale_vector,
    widen_features,
    widened,
    widened_column_scales,
    zero_value,
)
from morello_build.target.kernels.quant_int_prefetch import step_slots, streams_by_group
from morello_build.target.kernels.rows import MAX_ROWS, accumulators, sets_hold_rows, tile_registers

_MAX_COLS = 4


def _regs(op, target) -> int:
    """rows.tile_registers with, per column, a widened chunk, its group's scale and zero point."""
    fmt, (_, m, k, _), n = b_dtype(op), op.iter_shape, dot_columns(op)
    per_col = 1 + (fmt.group > 1) + ((fmt.zero and fmt.name == "i8") or fmt.name == "gemma_i8")
    return tile_registers(m, n, k, target.lanes, per_col)


def _applies_for(kind: str):
    def applies(op, target) -> bool:
        if op.kind != kind:
            return False
        k, fmt = op.iter_shape[2], b_dtype(op)
        return (
            dot_shape(op, target, _MAX_COLS, rows=range(2, MAX_ROWS + 1))
            and op.a.dtype == F32
            and op.a.tile((1, 1, k)).unit_stride(2)  # each row of A dense along K
            and is_format(fmt)
            and k % fmt.group == 0
            and k % fmt.unit == 0
            and _regs(op, target) <= target.vector_regs
            and sets_hold_rows(op.a, dot_columns(op), target)
        )

    return applies


def _singles(op) -> tuple:
    """The matmuls a kernel runs (the pair's A·B1 and A·B2): what quant.py's column reads count, per B."""
    if op.kind == "matmul":
        return (op,)
    return tuple(Matmul(op.a, b, c, accum=True, serial=True) for b, c in zip(*bs_cs(op)))


def _cost(op, target):
    fmt, (_, m, k, _), n = b_dtype(op), op.iter_shape, dot_columns(op)
    W, G = target.lanes, group_size(fmt, k)
    groups = k // G
    steps = groups * ceil(G / W)
    u = accumulators(m, n, k, W)
    scaled_chunks = fmt.group > 1 and groups > 1  # each chunk times its group's scale
    feats = widen_features(fmt, target, steps * n, single=True) + Features.of(
        vec_load=steps * (m + n),
        vec_op=steps * n * scaled_chunks + m * n * (u - 1 + (fmt.group > 1 and groups == 1)),
        vec_fma=steps * m * n,
        hsum=m * n,
        loop_iter=groups if groups > 1 else 0,
    )
    feats += column_scale_features(fmt, k, target, n, groups)
    trips, singles = _next_columns_trips(op, target), _singles(op)
    for one in singles:  # each B's columns (and A, once: below)
        if trips:
            loads = next_columns_loads(one.b, k, one.iter_shape[3], trips)
            feats += column_reads(one, target, False, (0, False, ()), next_loads=loads)
        else:
            feats += column_reads(one, target, streams_by_group(one.b, k, target), _prefetch_plan(op, one.b, target))
    return feats + lines_read(op.a) * (1 - len(singles))


def _next_columns_trips(op, target) -> int:
    """The trips of the rolled chunk loop whose heads prefetch the next n columns (dot.next_columns_head):
    several columns (the pair's one of B1 beside one of B2 too) of one group (no scales, or per channel) from
    main memory, prefetching on; else 0."""
    fmt, (_, m, k, _), n = b_dtype(op), op.iter_shape, dot_columns(op)
    W, gl = target.lanes, all(b.level == Level.GL for b in bs_cs(op)[0])
    if n < 2 or group_size(fmt, k) != k or not gl or not target.costs.prefetch_bytes:
        return 0
    return k // W // accumulators(m, n, k, W) if rolled(fmt, k, W) else 0


def _prefetch_plan(op, b, target):
    """dot_quant's prefetches of the columns of B (one of the pair's) from main memory (quant.prefetch_plan),
    for these chunks (W values each) and accumulators: once per group, or per trip of a group's rolled loop."""
    _, m, k, _ = op.iter_shape
    if streams_by_group(b, k, target):
        return 0, False, ()
    cols = dot_columns(op)
    return prefetch_plan(b, k, target.lanes, accumulators(m, cols, k, target.lanes), target, rows=m, streams=cols)


# -- emitter ---------------------------------------------------------------------------------------------
def _emit(lw, node, binds) -> None:
    a, half = binds[0], (len(binds) - 1) // 2
    bs, cs = binds[1 : 1 + half], binds[1 + half :]  # (b, c) or the pair's (b1, b2, c1, c2)
    op = node.spec.op
    fmt, (_, m, k, n), ncols = bs[0].dtype, op.iter_shape, dot_columns(op)
    check_dot_operands(lw, "dot_quant_rows", a, bs, cs, m, k, n)
    vt, v, W, G = lw.target.vtype, lw.v, lw.W, group_size(fmt, k)
    groups = k // G
    u = accumulators(m, ncols, k, W)
    lw.open("{")
    lw.emit(f"// {node.name}: {m} row(s) x {ncols} column(s) of {fmt} weights, K = {k}, {u} accumulator(s) each")
    accs = [[[lw.fresh("acc") for _ in range(u)] for _ in range(ncols)] for _ in range(m)]
    lw.emit(f"{vt} " + ", ".join(f"{x} = {v}::zero()" for r in accs for col in r for x in col) + ";")
    aps = [lw.fresh("ap") for _ in range(m)]
    for i, ap in enumerate(aps):
        lw.emit(f"const float* {ap} = {lw.ptr(a, (0, i, 0))};")
    bps, sps, zps = column_pointers(lw, fmt, [(b, j) for b in bs for j in range(n)])
    cols = [(bp, sps[j] if sps else None, zps[j] if zps else None) for j, bp in enumerate(bps)]
    # each B's last column's pointers: step_slots prefetches the n columns after it
    ends = [(i + 1) * n - 1 for i in range(len(bs))]
    lasts = [[bps[e]] + sps[e : e + 1] + zps[e : e + 1] for e in ends] if streams_by_group(bs[0], k, lw.target) else []

    # The columns' scales as f32 arrays once per call, as dot_quant widens them: a group's scale is then a
    # broadcast load, not a conversion per group and column.
    scales = widened_column_scales(lw, fmt, k, bps, sps) or [None] * len(cols)

    def group(g: str, trip_head) -> list:
        terms = [_group_terms(lw, fmt, col, g, sc) for col, sc in zip(cols, scales)]
        shares = [step_slots(lw, bi, last, k, n, g, groups, ncols) for bi, last in zip(bs, lasts)]
        slots = [sum(per, []) for per in zip(*shares)] if shares else None
        _chunks(lw, fmt, accs, aps, cols, terms, g, G, scaled=groups > 1, head=trip_head, slots=slots)
        return terms

    if trips := _next_columns_trips(op, lw.target):  # the rolled loop's first value, in B's elements
        u_elems = fmt.storage_elems(u * W)
        prefetch = next_columns_head(lw, bs[0], bps, n, k, u_elems, trips), True  # the pair's B2 laid out as B1
    else:
        prefetch = prefetch_head(lw, _prefetch_plan(op, bs_cs(op)[0][0], lw.target), bps)  # B2 is planned alike
    per_group = group_loop(lw, fmt, k, prefetch, group)
    for i in range(m):
        for j, (c, col) in enumerate((c, col) for c in cs for col in range(n)):
            total = pairwise_sum(lw, accs[i][j])
            if fmt.group > 1 and groups == 1:  # one group: its scale applied to the sums
                total = f"{v}::mul({total}, {per_group[j][0]})"
            lw.emit(f"{lw.elem(c, (0, i, col))} += {v}::hsum({total});")
    lw.close()


def _group_terms(lw, fmt, col, g: str, scales: str | None = None) -> tuple[str | None, str | None]:
    """Group g's scale vector (a name: a broadcast from the column's widened ``scales``, else converted here) and
    zero point (i4: a C int; i8: a vector name), hoisted per group."""
    bp, sp, zp = col
    vt, v = lw.target.vtype, lw.v
    sv = zv = None
    if fmt.group > 1:
        sv = lw.fresh("sv")
        lw.emit(f"const {vt} {sv} = {f'{v}::bcast({scales}[{g}])' if scales else scale_vector(lw, fmt, bp, sp, g)};")
    if fmt.name == "i4":
        zv = f"int({zp}[{g}])" if fmt.zero else "8"
    elif (z := zero_value(lw, fmt, bp, zp, g)) is not None:
        zv = lw.fresh("zv")
        lw.emit(f"const {vt} {zv} = {v}::bcast({z});")
    return sv, zv


def _chunks(lw, fmt, accs, aps, cols, per_group, g: str, G: int, scaled: bool, head=None, slots=None) -> None:
    """accs[i][j][c % u] += A row i chunk c * widened B column j chunk c over the G values of group g:
    over chunk_loop's chunks (head: at the start of each trip of its rolled loop); the group's prefetches
    slots[j] after column j's widening in its first chunk."""
    vt, v = lw.target.vtype, lw.v
    u = len(accs[0][0])
    base = f"{g} * {G}" if g != "0" else ""

    def chunk(e0, s: int, cnt: int):
        aoff = " + ".join(x for x in (base, str(e0)) if x and x != "0") or "0"
        bvs = []
        for (bp, _, _), (sv, zv) in zip(cols, per_group):  # each B chunk widened once for all m rows
            x = widened(lw, fmt, bp, g, e0, cnt, zv)
            if scaled:
                x = f"{v}::mul({x}, {sv})"
            bvs.append(lw.fresh("bv"))
            lw.emit(f"const {vt} {bvs[-1]} = {x};")
            for stmt in slots[len(bvs) - 1] if slots and str(e0) == "0" else ():
                lw.emit(stmt)
        for i, ap in enumerate(aps):
            av = lw.fresh("av")
            a_load = f"{v}::load_f32({ap} + {aoff}, {cnt})"
            lw.emit(f"const {vt} {av} = {f'{v}::keep({a_load})' if len(cols) > 1 else a_load};")  # once for n columns
            for j, bv in enumerate(bvs):
                lw.emit(f"{accs[i][j][s]} = {v}::fma({av}, {bv}, {accs[i][j][s]});")

    chunk_loop(lw, fmt, G, u, chunk, head=head)


def _record(name: str, kind: str, what: str) -> KernelDef:
    return KernelDef(
        name=name,
        kind=kind,
        vector=True,
        applies=_applies_for(kind),
        cost=_cost,
        emit=_emit,
        doc=f"m rows of f32 A (2..{MAX_ROWS}) times n {what} in a weight format: each B chunk widened once",
        vector_regs=_regs,
    )


DOT_QUANT_ROWS = _record("dot_quant_rows", "matmul", "B columns")
# The gated pair's: n columns of B1 and of B2 in one loop, each A chunk loaded once for all of them, where
# SplitPair ran two kernels that each loaded A again.
DOT_QUANT_ROWS_PAIR = _record("dot_quant_rows_pair", "pair", "columns of B1 and of B2")
