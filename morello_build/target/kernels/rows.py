"""Multi-row dot kernels: C (1xmxn, scalar registers) += A (mxK, rows dense along K) · B (Kxn, columns
dense along K), for small batches of tokens (decode with M = 2..8).

The dot kernels (dot.py) read one row of A; a C tile of m rows would run them m times, loading (and
widening, for bf16 B) each chunk of B once per row. These load and widen each B chunk ONCE per loop trip
and FMA it into m accumulators, one per row of A (the ``_pair`` records' idea across rows of A instead of
columns of B): per chunk n B loads (and widenings), m A loads, m·n FMAs; m·n horizontal sums at the end.
B's columns streamed from main memory are prefetched: one column as the single-row kernels prefetch it
(dot.py, ``prefetch_bytes`` ahead in its own stream); several columns as the integer kernels do
(quant_int_prefetch.step_slots): each trip brings into L2 its share of the column n after each of the
kernel's, so that a loop over N reads B as one stream where n interleaved streams, each prefetched ahead
into its neighbour, made every kernel call start cold (Mx2048x16384 bf16 from DRAM, one thread, Zen 4:
3 columns a kernel at M = 4 7.3 ms with the own-stream prefetches, 3.4 ms with these; the search's picks,
before (1 to 4 columns, interleaved streams priced) and after: M = 2 4.95 -> 3.2 ms, M = 4 7.9 -> 4.2,
M = 8 13.8 -> 7.4).
A vector (and an f32 B vector) that several FMAs use is pinned in a register (``keep``): GCC otherwise folds
its load into each FMA as a memory operand, n (m) loads instead of one (4x2048x256 bf16, warm, one thread,
Zen 4: 2 columns a kernel 75 -> 54 us, 3 columns 74 -> 44 us; 1 column 104).
"""

from __future__ import annotations

from math import ceil

from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, interleaved_lines, lines_read, runs_per_set
from morello_build.target.kernels.common import BF16, F32, KernelDef, check_dot_operands, pairwise_sum
from morello_build.target.kernels.dot import (
    b_dtype,
    b_prefetch_head,
    bs_cs,
    chunks,
    dot_columns,
    dot_shape,
    loop_trips,
    next_columns_head,
    next_columns_loads,
    prefetch_loads,
)

MAX_ROWS = 8
_MAX_COLS = 4
# Per B dtype: vector instructions widening one chunk of B (beyond its load).
_WIDEN = {F32: 0, BF16: 2}


def accumulators(m: int, n: int, k: int, lanes: int) -> int:
    """Accumulators per (row, column): enough independent FMA chains (8) to hide FMA latency."""
    return max(1, min(4, 8 // (m * n), ceil(k / lanes)))


def tile_registers(m: int, n: int, k: int, lanes: int, per_col: int = 1) -> int:
    """The vector registers of a rows kernel's m x n tile (these kernels' and dot_quant_rows'): the accumulators,
    ``per_col`` per column (its widened chunk; a format's group scale and zero point too) and an A chunk. With one
    more temporary counted, 4 rows took 2 columns a kernel on AVX2, not 3: 4 x 3 spill nothing (GCC 12, Clang 14)
    and ran from DRAM, one thread, Zen 3: 4x2048x16384 bf16 1.06-1.24x, 4x2560x10240 bf16 1.15-1.20x,
    4x2048x16384 f32 1.07-1.12x, the gated pair 4x2048x16384 bf16 (split into two 4 x 3 GEMVs) 1.08-1.11x,
    8x2048x16384 bf16 1.04-1.07x faster."""
    return m * n * accumulators(m, n, k, lanes) + n * per_col + 1


def _regs(op, target) -> int:
    _, m, k, _ = op.iter_shape
    return tile_registers(m, dot_columns(op), k, target.lanes)


def sets_hold_rows(a, n: int, target) -> bool:
    """The m rows of A and the n B columns are read side by side: rows of a stride class share an L1 set,
    and with the B lines they must fit its ways, else each chunk evicts the next rows' lines (8 f32 rows
    8 KiB apart beside a bf16 column, Zen 3's 8 ways: no faster than one row at a time)."""
    per_set = runs_per_set(a, target.l1_bytes, target.l1_ways) if a.alias else a.runs()  # as view_evicts
    return per_set + n <= target.l1_ways


def _applies_for(kind: str, dtype):
    def applies(op, target) -> bool:
        if op.kind != kind:
            return False
        k = op.iter_shape[2]
        return (
            dot_shape(op, target, _MAX_COLS, rows=range(2, MAX_ROWS + 1))
            and op.a.dtype == F32
            and (k == 1 or op.a.tile((1, 1, k)).unit_stride(2))  # each row of A dense along K
            and b_dtype(op) == dtype
            and _regs(op, target) <= target.vector_regs
            and sets_hold_rows(op.a, dot_columns(op), target)
        )

    return applies


def _cost(op, target):
    _, m, k, _ = op.iter_shape
    cols, steps = dot_columns(op), ceil(k / target.lanes)
    feats = Features.of(
        vec_load=steps * (m + cols),
        vec_op=steps * cols * _WIDEN[b_dtype(op)] + m * cols * (accumulators(m, cols, k, target.lanes) - 1),
        vec_fma=steps * m * cols,
        hsum=m * cols,
    )
    return feats + lines_read(op.a) + _b_reads(op, target)


def _streams_next(op, target) -> bool:
    """Several columns from main memory (f32 too: 2x2048x8192, Zen 4, 4.8 -> 2.9 ms; the pair's one column
    of B1 beside one of B2 too), prefetching on: each B's next n columns into L2, each B read as one
    stream; else dot.py's prefetches (bf16 only: dot._prefetched), B read as interleaved streams."""
    bs = bs_cs(op)[0]
    return dot_columns(op) > 1 and all(b.level == Level.GL for b in bs) and bool(target.costs.prefetch_bytes)


def _b_reads(op, target) -> Features:
    """B's lines and the prefetches (a load each): dot.py's, once per trip of the chunk loop (dot.loop_trips),
    or the next columns' (dot.next_columns_loads), else interleaved streams (the gated
    pair's one column of B1 beside one of B2: two streams of separate operands, as its dot kernels)."""
    _, m, k, n = op.iter_shape
    bs, cols = bs_cs(op)[0], dot_columns(op)
    u = accumulators(m, cols, k, target.lanes)
    trips = loop_trips(k // target.lanes, u)
    lines = sum((lines_read(b) for b in bs), Features.of())
    if _streams_next(op, target) and trips:
        return lines + next_columns_loads(bs[0], k, cols, trips)
    streams = sum((interleaved_lines(b, cols, len(bs) == 2 and n == 1) for b in bs), Features.of())
    return lines + streams + prefetch_loads(op, target, trips, u * target.lanes * bs[0].dtype.bytes)


def _emit(lw, node, binds) -> None:
    a, half = binds[0], (len(binds) - 1) // 2
    bs, cs = binds[1 : 1 + half], binds[1 + half :]  # (b, c) or the pair's (b1, b2, c1, c2)
    _, m, k, n = node.spec.op.iter_shape
    check_dot_operands(lw, "dot rows kernel", a, bs, cs, m, k, n)
    vt, v, W = lw.target.vtype, lw.v, lw.W
    cols, outs = [(b, j) for b in bs for j in range(n)], [(c, j) for c in cs for j in range(n)]
    u = accumulators(m, len(cols), k, W)
    f32 = bs[0].dtype == F32
    lw.open("{")
    lw.emit(f"// {node.name}: {m} row(s) x {len(cols)} column(s), K = {k}, {u} accumulator(s) each")
    accs = [[[lw.fresh("acc") for _ in range(u)] for _ in cols] for _ in range(m)]
    lw.emit(f"{vt} " + ", ".join(f"{x} = {v}::zero()" for r in accs for col in r for x in col) + ";")
    aps = [lw.fresh("ap") for _ in range(m)]
    for i, ap in enumerate(aps):
        lw.emit(f"const float* {ap} = {lw.ptr(a, (0, i, 0))};")
    bps = [lw.fresh("bp") for _ in cols]
    for bp, (b, j) in zip(bps, cols):
        lw.emit(f"const {b.dtype.ctype}* {bp} = {lw.ptr(b, (0, 0, j))};")

    def body(chunk: str, s: int, cnt: int = W):
        off = f"{chunk} * {W}"
        bvs = []
        for bp in bps:  # each B chunk loaded (and widened) once for all m rows
            bvs.append(lw.fresh("bv"))
            b_load = f"{v}::{'load_f32' if f32 else 'load_bf16'}({bp} + {off}, {cnt})"
            lw.emit(f"const {vt} {bvs[-1]} = {f'{v}::keep({b_load})' if m > 1 and f32 else b_load};")
        for i, ap in enumerate(aps):
            av, a_load = lw.fresh("av"), f"{v}::load_f32({ap} + {off}, {cnt})"
            lw.emit(f"const {vt} {av} = {f'{v}::keep({a_load})' if len(bvs) > 1 else a_load};")  # once for all columns
            for j, bv in enumerate(bvs):
                acc = accs[i][j][s]
                lw.emit(f"{acc} = {v}::fma({av}, {bv}, {acc});")

    full, tail = divmod(k, W)
    trips = loop_trips(full, u)
    if _streams_next(node.spec.op, lw.target) and trips:
        head = next_columns_head(lw, bs[0], bps, n, k, u, trips)  # the pair's B2 is laid out as B1
    else:
        head = b_prefetch_head(lw, node, binds, bps, W, u, rows=m)
    chunks(lw, full, u, body, head)
    if tail:
        body(str(full), 0, tail)
    for i in range(m):
        for j, (c, col) in enumerate(outs):
            lw.emit(f"{lw.elem(c, (0, i, col))} += {v}::hsum({pairwise_sum(lw, accs[i][j])});")
    lw.close()


def _record(name: str, kind: str, dtype, what: str) -> KernelDef:
    return KernelDef(
        name=name,
        kind=kind,
        vector=True,
        applies=_applies_for(kind, dtype),
        cost=_cost,
        emit=_emit,
        doc=f"m rows of f32 A (2..{MAX_ROWS}) times n {what} B columns: each B chunk loaded once for all rows",
        vector_regs=_regs,
    )


DOT_F32_ROWS = _record("dot_f32_rows", "matmul", F32, "f32")
DOT_BF16_ROWS = _record("dot_bf16_rows", "matmul", BF16, "bf16 (widened once per chunk)")
# The gated pair's (C1 += A·B1, C2 += A·B2): n columns of B1 and of B2 in one loop, each A chunk loaded once
# for all of them, where SplitPair ran two kernels that each loaded A again.
DOT_F32_ROWS_PAIR = _record("dot_f32_rows_pair", "pair", F32, "f32 B1 and B2")
DOT_BF16_ROWS_PAIR = _record("dot_bf16_rows_pair", "pair", BF16, "bf16 B1 and B2 (widened once per chunk)")
