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
from morello_build.synth.cost import Features, lines_read, runs_per_set, streams_read
from morello_build.target.kernels.common import BF16, F32, KernelDef, check_dot_operands, pairwise_sum
from morello_build.target.kernels.dot import (
    b_prefetch_head,
    chunks,
    dot_shape,
    loop_trips,
    next_columns_head,
    next_columns_lines,
    prefetch_loads,
)

MAX_ROWS = 8
_MAX_COLS = 4
# Per B dtype: vector instructions widening one chunk of B (beyond its load), and temporaries beside the
# accumulators (A vector, B vector(s)).
_WIDEN = {F32: 0, BF16: 2}
_TEMPS = 3


def _accumulators(m: int, n: int, k: int, lanes: int) -> int:
    """Accumulators per (row, column): enough independent FMA chains (8) to hide FMA latency."""
    return max(1, min(4, 8 // (m * n), ceil(k / lanes)))


def _regs(op, target) -> int:
    _, m, k, n = op.iter_shape
    return m * n * _accumulators(m, n, k, target.lanes) + n + _TEMPS - 1


def sets_hold_rows(a, n: int, target) -> bool:
    """The m rows of A and the n B columns are read side by side: rows of a stride class share an L1 set,
    and with the B lines they must fit its ways, else each chunk evicts the next rows' lines (8 f32 rows
    8 KiB apart beside a bf16 column, Zen 3's 8 ways: no faster than one row at a time)."""
    per_set = runs_per_set(a, target.l1_bytes, target.l1_ways) if a.alias else a.runs()  # as view_evicts
    return per_set + n <= target.l1_ways


def _applies_for(b_dtype):
    def applies(op, target) -> bool:
        if op.kind != "matmul":
            return False
        _, _, k, n = op.iter_shape
        return (
            dot_shape(op, target, _MAX_COLS, rows=range(2, MAX_ROWS + 1))
            and op.a.dtype == F32
            and (k == 1 or op.a.tile((1, 1, k)).unit_stride(2))  # each row of A dense along K
            and op.b.dtype == b_dtype
            and _regs(op, target) <= target.vector_regs
            and sets_hold_rows(op.a, n, target)
        )

    return applies


def _cost(op, target):
    _, m, k, n = op.iter_shape
    steps = ceil(k / target.lanes)
    widen = _WIDEN[op.b.dtype]
    feats = Features.of(
        vec_load=steps * (m + n),
        vec_op=steps * n * widen + m * n * (_accumulators(m, n, k, target.lanes) - 1),
        vec_fma=steps * m * n,
        hsum=m * n,
    )
    return feats + lines_read(op.a) + _b_reads(op, target)


def _streams_next(op, target) -> bool:
    """Several columns from main memory (f32 too: 2x2048x8192, Zen 4, 4.8 -> 2.9 ms), prefetching on: the
    next n columns into L2, B read as one stream; else dot.py's prefetches (bf16 only: dot._prefetched), B
    read as n interleaved streams."""
    return op.iter_shape[3] > 1 and op.b.level == Level.GL and bool(target.costs.prefetch_bytes)


def _b_reads(op, target) -> Features:
    """B's lines and the prefetches (a load each): dot.py's, once per trip of the chunk loop (dot.loop_trips),
    or the next columns' (dot.next_columns_lines per column and trip)."""
    _, m, k, n = op.iter_shape
    u = _accumulators(m, n, k, target.lanes)
    trips = loop_trips(k // target.lanes, u)
    if _streams_next(op, target) and trips:
        per = -(-next_columns_lines(op.b, k) // trips)
        return lines_read(op.b) + Features.of(vec_load=n * trips * per)
    trip_bytes = u * target.lanes * op.b.dtype.bytes
    return streams_read(op.b, n) + prefetch_loads(op, target, trips, trip_bytes)


def _emit(lw, node, binds) -> None:
    a, b, c = binds
    _, m, k, n = node.spec.op.iter_shape
    check_dot_operands(lw, "dot rows kernel", a, (b,), (c,), m, k, n)
    vt, v, W = lw.target.vtype, lw.v, lw.W
    u = _accumulators(m, n, k, W)
    load = "load_f32" if b.dtype == F32 else "load_bf16"
    lw.open("{")
    lw.emit(f"// {node.name}: {m} row(s) x {n} column(s), K = {k}, {u} accumulator(s) each")
    accs = [[[lw.fresh("acc") for _ in range(u)] for _ in range(n)] for _ in range(m)]
    lw.emit(f"{vt} " + ", ".join(f"{x} = {v}::zero()" for r in accs for col in r for x in col) + ";")
    aps = [lw.fresh("ap") for _ in range(m)]
    for i, ap in enumerate(aps):
        lw.emit(f"const float* {ap} = {lw.ptr(a, (0, i, 0))};")
    bps = [lw.fresh("bp") for _ in range(n)]
    for j, bp in enumerate(bps):
        lw.emit(f"const {b.dtype.ctype}* {bp} = {lw.ptr(b, (0, 0, j))};")

    def body(chunk: str, s: int, cnt: int = W):
        off = f"{chunk} * {W}"
        bvs = []
        for bp in bps:  # each B chunk loaded (and widened) once for all m rows
            bvs.append(lw.fresh("bv"))
            b_load = f"{v}::{load}({bp} + {off}, {cnt})"
            lw.emit(f"const {vt} {bvs[-1]} = {f'{v}::keep({b_load})' if m > 1 and b.dtype == F32 else b_load};")
        for i, ap in enumerate(aps):
            av, a_load = lw.fresh("av"), f"{v}::load_f32({ap} + {off}, {cnt})"
            lw.emit(f"const {vt} {av} = {f'{v}::keep({a_load})' if n > 1 else a_load};")  # once for n columns
            for j, bv in enumerate(bvs):
                acc = accs[i][j][s]
                lw.emit(f"{acc} = {v}::fma({av}, {bv}, {acc});")

    full, tail = divmod(k, W)
    trips = loop_trips(full, u)
    if _streams_next(node.spec.op, lw.target) and trips:
        head = next_columns_head(lw, b, bps, n, k, u, trips)
    else:
        head = b_prefetch_head(lw, node, binds, bps, W, u, rows=m)
    chunks(lw, full, u, body, head)
    if tail:
        body(str(full), 0, tail)
    for i in range(m):
        for j in range(n):
            lw.emit(f"{lw.elem(c, (0, i, j))} += {v}::hsum({pairwise_sum(lw, accs[i][j])});")
    lw.close()


def _record(name: str, b_dtype, what: str) -> KernelDef:
    return KernelDef(
        name=name,
        kind="matmul",
        vector=True,
        applies=_applies_for(b_dtype),
        cost=_cost,
        emit=_emit,
        doc=f"m rows of f32 A (2..{MAX_ROWS}) times n {what} B columns: each B chunk loaded once for all rows",
        vector_regs=_regs,
    )


DOT_F32_ROWS = _record("dot_f32_rows", F32, "f32")
DOT_BF16_ROWS = _record("dot_bf16_rows", BF16, "bf16 (widened once per chunk)")
