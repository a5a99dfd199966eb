"""Dot-product kernels: C (1x1xn, scalar registers) += A (1xK) · B (Kxn, columns contiguous along K).

Each column keeps ``u`` vector accumulators (chunk j of K goes to accumulator j % u) so that few columns
still have enough independent FMA chains; they are added pairwise in a fixed order, then summed
horizontally. Every kernel also has a ``_pair`` record for the gated pair's accumulation (C1 += A·B1,
C2 += A·B2): the columns of both B's in one loop over K, each chunk of A loaded once for both.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_read, streams_read
from morello_build.target.kernels.common import (
    BF16,
    F32,
    KernelDef,
    check_dot_operands,
    columns_unit_stride,
    interleaved_for,
    pairwise_sum,
)


def bs_cs(op):
    """The B operands a dot kernel reads and the C operands it writes: one each, or the pair's two."""
    return ((op.b1, op.b2), (op.c1, op.c2)) if op.kind == "pair" else ((op.b,), (op.c,))


def dot_columns(op) -> int:
    return op.iter_shape[3] * len(bs_cs(op)[0])


def dot_shape(op, target, max_cols: int, rows: range = range(1, 2)) -> bool:
    """The operands a dot kernel family reads and writes: ``rows`` rows of A (one, or a few for the rows
    kernels), at most ``max_cols`` columns of B, in f32 registers of C, streamed from memory."""
    b, m, k, n = op.iter_shape
    bs, cs = bs_cs(op)
    return (
        b == 1
        and m in rows
        and dot_columns(op) <= max_cols
        and op.accum
        and target.lanes >= 8
        and all(c.level == Level.RF and c.dtype == F32 for c in cs)
        and op.a.level.is_memory
        and all(x.level.is_memory and columns_unit_stride(x) and x.dtype == bs[0].dtype for x in bs)
    )


def b_dtype(op):
    return bs_cs(op)[0][0].dtype


def b_streams(op, target) -> Features:
    """B's lines, read as interleaved streams: one per column of every B (the pair's one column of B1
    beside one of B2: two streams of separate operands), and the pair's prefetches (one load each)."""
    bs, cols = bs_cs(op)[0], dot_columns(op)
    separate = len(bs) == 2 and op.iter_shape[3] == 1
    streams = sum((streams_read(x, cols, separate) for x in bs), Features.of())
    return streams + Features.of(vec_load=sum(x.lines() for x in _prefetched(op, target)))


def _prefetched(op, target) -> tuple:
    """The B operands whose columns the kernel prefetches ahead (CostTable.prefetch_bytes): those it
    reads from main memory and widens (bf16): its loop then spends too many instructions per line for the
    out-of-order window to run far ahead. Not f32 columns (a load and an FMA per vector: 1x4096x4096 ran
    2% slower with the prefetches, bf16 1x2048x16384 5-8% faster; Zen 3)."""
    if not target.costs.prefetch_bytes:
        return ()
    return tuple(b for b in bs_cs(op)[0] if b.level == Level.GL and b.dtype != F32)


def b_prefetch_head(lw, node, binds, bps, chunk_elems: int, u: int, rows: int = 1):
    """A ``chunks`` head that prefetches, once per loop trip, every line the trip reads from each
    prefetched B column, ``prefetch_bytes`` ahead; None when the kernel prefetches nothing. Where the
    kernel's columns are a k tile of longer ones (a loop over K outside), ahead would be the part of the
    column a later k trip reads: it prefetches the next kernel's columns into L2 instead
    (next_columns_head; 1x2048x4096 bf16 split by 1024, from DRAM, Zen 4: 2.5 -> 1.5 ms, unsplit 0.89). So it does
    where the kernel reads several adjacent columns of B, as the rows kernels do (rows.py: each column prefetched
    ahead in its own stream made every kernel call start cold): 1x2048x16384 bf16 from DRAM, 4 columns a kernel
    (golden-cove's pick), one thread, Emerald Rapids VM, 2 MiB pages, 41-81 interleaved rounds in one process:
    6238 / 6214 / 7876 -> 4748 / 4909 / 6131 us (0.76-0.79x; read sweeps of the same bytes 5340 / 5483 / 6769);
    in quieter runs 5822 -> 5632 and 5722 -> 5915 (21 rounds). Priced as before (b_streams): the interleaved
    streams' adjustment is golden-cove's 0 there, and the built-in table's +8 a line (Zen 4, without these
    prefetches) keeps its picks at one column a kernel until a Zen A/B reprices it."""
    op = node.spec.op
    bs = _prefetched(op, lw.target)
    if not bs:
        return None
    (_, _, k, n), size = op.iter_shape, bs[0].dtype.bytes
    cols = [bp for bp, (b, _) in zip(bps, [(b, j) for b in bs_cs(op)[0] for j in range(n)]) if b in bs]
    trips, b = loop_trips(k // chunk_elems, u), binds[1]  # B (the pair's B1: B2 is laid out alike)
    if reads_next_columns(lw, b, k, n, trips):
        return next_columns_head(lw, b, cols, n, k, u, trips)
    offsets = prefetch_offsets(lw.target, u * chunk_elems * size, rows, streams=len(cols))
    return prefetch_head(lw, cols, offsets, chunk_elems)


def reads_next_columns(lw, b, k: int, n: int, trips: int) -> bool:
    """Whether a kernel of ``trips`` loop trips over n columns of K values of B (its binding ``b``) prefetches the
    next kernel's columns (next_columns_head) rather than each column ahead of its loads: where its columns are
    a k tile of longer ones, or it reads several adjacent columns (b_prefetch_head)."""
    step = lw.step(b, (0, 0, 0), (0, 0, 1)) or 0
    return bool(trips) and (step > k or (n > 1 and step == k))


def next_columns_lines(b, k: int) -> int:
    """Lines of one of B's columns of K values (next_columns_head prefetches the next kernel's, a column each)."""
    return max(1, ceil(k * b.dtype.bytes / 64))


def next_columns_loads(b, k: int, cols: int, trips: int) -> Features:
    """next_columns_head's prefetches for ``cols`` columns of B over ``trips`` trips: a load each."""
    return Features.of(vec_load=cols * trips * -(-next_columns_lines(b, k) // trips))


def next_columns_head(lw, b, bps, n: int, k: int, per_trip: int, trips: int):
    """A loop head (head(first): ``first`` a C expression, ``per_trip`` of its units a trip, ``trips``
    trips) prefetching into L2, for each of the kernel's n columns, the column n after it (the next kernel's
    in a loop over N), its lines spread evenly over the trips (quant_int_prefetch.step_slots' plan for the
    integer kernels; ``prefetch_l2_here`` keeps each beside the trip's loads)."""
    step = lw.step(b, (0, 0, 0), (0, 0, 1))
    if step is None:
        raise lw.error("dot rows kernel: B's columns are not a constant distance apart")
    lines = next_columns_lines(b, k)
    per = -(-lines // trips)
    ahead = n * ceil(step * b.dtype.bytes)  # bytes from a column to the one n after it

    def head(first: str) -> None:
        trip = f"({first}) / {per_trip}" if per_trip > 1 else first
        for i in range(per):
            slot = f"{trip} * {per} + {i}" if per > 1 else trip  # of trips x per, spread over the lines
            line = f"({slot}) * {lines} / {trips * per}"
            for bp in bps:
                lw.emit(f"::{lw.rt}::prefetch_l2_here({bp}, {ahead} + ({line}) * 64);")

    return head


def prefetch_offsets(target, trip_bytes: float, rows: int = 1, streams: int = 1) -> tuple[int, ...]:
    """Byte offsets, past a loop trip's first byte of a B column, of the trip's prefetches: one per line
    the trip reads (at least one), ``prefetch_bytes`` ahead per row of A the kernel reads (the rows
    kernels: from DRAM on a Golden Cove Xeon, 1 thread, Mx2048x16384, of a read sweep at 512 / 1024 /
    2048 / 4096 bytes ahead: bf16 M=2 0.83 / 0.84 / 0.78 / 0.73, M=4 0.69 / 0.79 / 0.88 / (3072: 0.91),
    M=8 0.28 / 0.23 / 0.42 / 0.47; q8_0 M=4 0.35 / 0.45 / 0.49); shared by the dot kernels of every B type.

    ``prefetch_bytes`` is one stream's lead (calibrate times one column); a kernel reading ``streams`` columns
    side by side gives each its share, a line at least, so about as many lines are in flight. Zen 3, one
    thread, from DRAM, medians of 61 interleaved rounds in µs, three runs: 4 bf16 columns of 1x2048x16384
    1024 bytes ahead each 5967 / 5864 / 6114, 256 each 5066 / 4901 / 5254 (a column at a time, 512 ahead:
    5170 / 4831 / 5343); f16 5965 / 6468 / 6592 against 4907 / 5322 / 5501; the gated pair's 2 columns of
    1x2560x10240 512 each 6248 / 6104 / 6494, 256 each 6265 / 6041 / 6614 (41 rounds)."""
    ahead = max(64, target.costs.prefetch_bytes * rows // max(1, streams) // 64 * 64)
    return tuple(ahead + 64 * line for line in range(max(1, ceil(trip_bytes / 64))))


def prefetch_head(lw, bps, offsets, elems_per_value: int = 1):
    """A loop head, head(trip's first element: a C expression), prefetching ``offsets`` past it in every
    column of ``bps`` (``elems_per_value``: the column's elements per unit of that expression)."""

    def head(first: str) -> None:
        at = f"{first} * {elems_per_value}" if elems_per_value != 1 else first
        for bp in bps:
            for off in offsets:
                lw.emit(f"::{lw.rt}::prefetch({bp} + {at}, {off});")

    return head


def prefetch_loads(op, target, trips: int, trip_bytes: float) -> Features:
    """The prefetches (a vec_load each) of a kernel whose loop of ``trips`` trips reads ``trip_bytes`` of
    each B column per trip: ``prefetch_head``'s, for the columns ``_prefetched`` names."""
    cols = len(_prefetched(op, target)) * op.iter_shape[3]
    return Features.of(vec_load=cols * trips * len(prefetch_offsets(target, trip_bytes)) if cols else 0)


def _max_dot_cols(target, accumulators_per_col):
    # At most 4 B columns at once (B in main memory pays for interleaved streams, see cost.streams_read; with
    # K*2 = 4 KiB rows on Zen 5: 10.5 GB/s with 8 columns, 22.6 GB/s with 4).
    return max(1, min(4, (target.vector_regs - 4) // accumulators_per_col))


# Per flavour: K elements per accumulator step (in lanes), independent FMA chains wanted per kernel, and
# vector temporaries beside the accumulators (A and B vectors: widening loads both halves of a pair).
_FLAVOURS = {"f32": (1, 8, 2), "widen": (2, 4, 4), "dp": (2, 8, 2)}


def _accumulators(k: int, n: int, lanes: int, kind: str) -> int:
    """Vector accumulators per column: enough chains to hide FMA latency, at most 4 and one per K step."""
    per_step, chains, _ = _FLAVOURS[kind]
    return max(1, min(4, chains // n, k // (per_step * lanes)))


def _vector_regs(kind: str):
    """The registers a dot kernel of ``kind`` occupies: its accumulators and its temporaries."""

    def regs(op, target) -> int:
        k, n = op.iter_shape[2], dot_columns(op)
        return n * _accumulators(k, n, target.lanes, kind) + _FLAVOURS[kind][2]

    return regs


# -- emitters' shared parts -----------------------------------------------------------------------------
def _setup(lw, node, binds, kind: str):
    """Declares the accumulators and pointers; returns (outputs: [(C binding, column)], K, accumulators
    per column, A's pointer, B columns' pointers, accumulators per column)."""
    a, half = binds[0], (len(binds) - 1) // 2
    bs, cs = binds[1 : 1 + half], binds[1 + half :]  # (b, c) or (b1, b2, c1, c2)
    _, _, k, n = node.spec.op.iter_shape
    check_dot_operands(lw, f"dot kernel ({kind})", a, bs, cs, 0 if kind == "widen" else 1, k, n)
    cols = n * len(bs)
    u = _accumulators(k, cols, lw.W, kind)
    lw.open("{")
    lw.emit(f"// {node.name}: {cols} column(s), K = {k}, {u} accumulator(s) per column")
    accs = [[lw.fresh("acc") for _ in range(u)] for _ in range(cols)]
    flat = [x for col in accs for x in col]
    lw.emit(f"{lw.target.vtype} " + ", ".join(f"{x} = {lw.v}::zero()" for x in flat) + ";")
    ap = lw.fresh("ap")
    lw.emit(f"const {a.dtype.ctype}* {ap} = {lw.ptr(a, (0, 0, 0))};")
    bps = [lw.fresh("bp") for _ in range(cols)]
    pairs = [(b, j) for b in bs for j in range(n)]
    for bp, (b, j) in zip(bps, pairs):
        lw.emit(f"const {b.dtype.ctype}* {bp} = {lw.ptr(b, (0, 0, j))};")
    outs = [(c, j) for c in cs for j in range(n)]
    return outs, k, accs, ap, bps, u


def chunks(lw, full: int, u: int, body, head=None) -> None:
    """Call body(chunk expression, accumulator index) for chunks 0..full-1, u per loop trip; head(chunk
    expression), if given, at the start of every trip of the loop (none where it is unrolled: loop_trips)."""
    trips = loop_trips(full, u)
    if trips:
        ch = lw.fresh("ch")
        lw.open(f"for (ix {ch} = 0; {ch} < {trips * u}; {ch} += {u}) {{")
        if head:
            head(ch)
        for j in range(u):
            body(f"({ch} + {j})" if j else ch, j)
        lw.close()
    for c in range(trips * u, full):
        body(str(c), c % u)


def loop_trips(full: int, u: int) -> int:
    """The trips of ``chunks``' loop over ``full`` chunks, u per trip: 0 where one trip is unrolled."""
    trips = full // u
    return trips if trips > 1 else 0


def _finish(lw, outs, accs) -> None:
    for (c, j), col in zip(outs, accs):
        lw.emit(f"{lw.elem(c, (0, 0, j))} += {lw.v}::hsum({pairwise_sum(lw, col)});")
    lw.close()


# -- dot_f32 --------------------------------------------------------------------------------------------
def _f32_applies(op, target):
    return (
        dot_shape(op, target, _max_dot_cols(target, 1))
        and op.a.dtype == F32
        and b_dtype(op) == F32
        and op.a.unit_stride(2)
    )


def _f32_cost(op, target):
    k, n = op.iter_shape[2], dot_columns(op)
    steps = ceil(k / target.lanes)
    return Features.of(vec_fma=steps * n, vec_load=steps * (n + 1), hsum=n) + lines_read(op.a) + b_streams(op, target)


def _f32_emit(lw, node, binds) -> None:
    outs, k, accs, ap, bps, u = _setup(lw, node, binds, "f32")
    W = lw.W
    full, tail = divmod(k, W)

    def body(chunk: str, j: int, cnt: int = W):
        off = f"{chunk} * {W}"
        av = lw.fresh("av")
        lw.emit(f"const {lw.target.vtype} {av} = {lw.v}::load_f32({ap} + {off}, {cnt});")
        for col, bp in zip(accs, bps):
            acc = col[j]
            lw.emit(f"{acc} = {lw.v}::fma({av}, {lw.v}::load_f32({bp} + {off}, {cnt}), {acc});")

    chunks(lw, full, u, body, b_prefetch_head(lw, node, binds, bps, W, u))
    if tail:
        body(str(full), 0, tail)
    _finish(lw, outs, accs)


DOT_F32 = KernelDef(
    name="dot_f32",
    kind="matmul",
    vector=True,
    applies=_f32_applies,
    cost=_f32_cost,
    emit=_f32_emit,
    doc="n f32 dot products over K (B stored N×K), vector accumulators, one horizontal sum each",
    vector_regs=_vector_regs("f32"),
)


# -- dot_bf16_widen -------------------------------------------------------------------------------------
def _widen_applies(op, target):
    return (
        dot_shape(op, target, _max_dot_cols(target, 2))
        and op.a.dtype == F32
        and b_dtype(op) == BF16
        and interleaved_for(op.a, target.lanes)
    )


def _widen_cost(op, target):
    k, n = op.iter_shape[2], dot_columns(op)
    steps = ceil(k / (2 * target.lanes))
    return (
        Features.of(vec_load=steps * (2 + n), vec_op=steps * n * 2 + n, vec_fma=steps * n * 2, hsum=n)
        + lines_read(op.a)
        + b_streams(op, target)
    )


def _strip_offsets(lw, a, k0: int, cnt: int):
    """(evens offset, odds offset) of A's strip starting at k0 relative to its start, checked dense."""
    base = (0, 0, k0)
    ev = lw.step(a, (0, 0, 0), base)
    od = lw.step(a, (0, 0, 0), (0, 0, k0 + 1)) if cnt > 1 else 0
    if ev is None or od is None:
        raise lw.error("dot_bf16_widen: A strip offsets are not constant")
    for j in range(1, (cnt + 1) // 2):
        if lw.step(a, base, (0, 0, k0 + 2 * j)) != j:
            raise lw.error("dot_bf16_widen: A evens are not contiguous")
    for j in range(1, cnt // 2):
        if lw.step(a, (0, 0, k0 + 1), (0, 0, k0 + 1 + 2 * j)) != j:
            raise lw.error("dot_bf16_widen: A odds are not contiguous")
    return ev, od


def _widen_emit(lw, node, binds) -> None:
    a = binds[0]
    outs, k, accs, ap, bps, u = _setup(lw, node, binds, "widen")
    step = 2 * lw.W
    full, tail = divmod(k, step)
    vt, v = lw.target.vtype, lw.v

    def emit_strip(aoff: str, boff: str, odd_delta: int, cnt: int, j: int):
        ae, ao = lw.fresh("ae"), lw.fresh("ao")
        ne, no = (cnt + 1) // 2, cnt // 2
        lw.emit(f"const {vt} {ae} = {v}::load_f32({ap} + {aoff}, {ne});")
        if no:
            lw.emit(f"const {vt} {ao} = {v}::load_f32({ap} + {aoff} + {odd_delta}, {no});")
        for col, bp in zip(accs, bps):
            acc = col[j]
            be, bo = lw.fresh("be"), lw.fresh("bo")
            lw.emit(f"{vt} {be}, {bo}; {v}::load_bf16_pairs({bp} + {boff}, {cnt}, {be}, {bo});")
            lw.emit(f"{acc} = {v}::fma({ae}, {be}, {acc});")
            if no:
                lw.emit(f"{acc} = {v}::fma({ao}, {bo}, {acc});")

    if full:
        ev0, od0 = _strip_offsets(lw, a, 0, step)
        sstride = _strip_offsets(lw, a, step, step)[0] if full > 1 else step
        if ev0 != 0:
            raise lw.error("dot_bf16_widen: A does not start its first strip")

        def body(chunk: str, j: int):
            emit_strip(f"{chunk} * {sstride}", f"{chunk} * {step}", od0, step, j)

        chunks(lw, full, u, body, b_prefetch_head(lw, node, binds, bps, step, u))
    if tail:
        ev, od = _strip_offsets(lw, a, full * step, tail)
        emit_strip(str(ev), str(full * step), od - ev, tail, 0)
    _finish(lw, outs, accs)


DOT_BF16_WIDEN = KernelDef(
    name="dot_bf16_widen",
    kind="matmul",
    vector=True,
    applies=_widen_applies,
    cost=_widen_cost,
    emit=_widen_emit,
    doc="f32 A (odd/even interleaved) times bf16 B columns: widen by shift and mask, FMA in f32",
    vector_regs=_vector_regs("widen"),
)


# -- dot_bf16_dp ----------------------------------------------------------------------------------------
def _dp_applies(op, target):
    return (
        dot_shape(op, target, _max_dot_cols(target, 1))
        and op.a.dtype == BF16
        and b_dtype(op) == BF16
        and op.a.unit_stride(2)
    )


def _dp_cost(op, target):
    k, n = op.iter_shape[2], dot_columns(op)
    steps = ceil(k / (2 * target.lanes))
    return Features.of(vec_load=steps * (1 + n), vec_fma=steps * n, hsum=n) + lines_read(op.a) + b_streams(op, target)


def _dp_emit(lw, node, binds) -> None:
    outs, k, accs, ap, bps, u = _setup(lw, node, binds, "dp")
    step = 2 * lw.W
    full, tail = divmod(k, step)

    def body(chunk: str, j: int, cnt: int = step):
        off = f"{chunk} * {step}"
        for col, bp in zip(accs, bps):
            acc = col[j]
            lw.emit(f"{acc} = {lw.v}::dp_bf16({acc}, {ap} + {off}, {bp} + {off}, {cnt});")

    chunks(lw, full, u, body, b_prefetch_head(lw, node, binds, bps, step, u))
    if tail:
        body(str(full), 0, tail)
    _finish(lw, outs, accs)


DOT_BF16_DP = KernelDef(
    name="dot_bf16_dp",
    kind="matmul",
    vector=True,
    features=frozenset({"avx512bf16"}),
    applies=_dp_applies,
    cost=_dp_cost,
    emit=_dp_emit,
    doc="bf16 A times bf16 B columns with vdpbf16ps (pairs along K), f32 accumulators",
    vector_regs=_vector_regs("dp"),
)


# -- the gated pair's: the same kernels over the columns of B1 and B2 ------------------------------------
def _pair_of(kernel: KernelDef) -> KernelDef:
    """``kernel`` for a pair spec (C1 += A·B1; C2 += A·B2): one loop over K for the columns of both."""
    return replace(
        kernel,
        name=f"{kernel.name}_pair",
        kind="pair",
        doc=f"{kernel.doc}; the gated pair's B1 and B2 columns in one loop over K",
    )


DOT_F32_PAIR = _pair_of(DOT_F32)
DOT_BF16_WIDEN_PAIR = _pair_of(DOT_BF16_WIDEN)
DOT_BF16_DP_PAIR = _pair_of(DOT_BF16_DP)
