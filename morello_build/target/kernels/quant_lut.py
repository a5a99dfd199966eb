"""``dot_quant_lut``: 1-4 rows of f32 A by 4-bit weights (``i4``, ``q4_0``) on AVX-512, dequantized by table.

A nibble stands for one of 16 values, so each group's dequantized values s * (q - z) sit in one zmm, the
column's table, made once per group (one multiply by the scale; with zero points s * q - z * s, one fmsub).
``vpermps`` reads only the low 4 bits of each index lane, so a lane holding a byte looks up its low nibble's
value, and the lane shifted right by 4 its high nibble's: per 32 weights two shifts and two permutes give two
vectors of dequantized f32, against ``dot_quant``'s masks, byte subtractions, unpacks, two widenings and two
conversions (on Intel with 512-bit vectors all of them queue for ports 0 and 5). The products go straight
into the outputs' accumulators: no partial sum per group, no FMA by the scale; each column's lookups serve
every row (small batches).

The nibbles' order decides A's: ``q4_0`` byte j holds value j (low nibble) and j + 16 (high), so its 16 bytes
zero-extended to 32-bit lanes meet A's two vectors as they are; ``i4`` byte j holds 2j and 2j + 1, so its
16 bytes are broadcast to the four 128-bit lanes (a load, no shuffle) and lane i shifted to byte
4 (i % 4) + i / 4, and each row's 32 values of A are put in that order by two ``vpermt2ps`` per chunk, for
all the kernel's columns. With small batches those shuffles are a quarter of the kernel's (4 rows, 2 columns:
8 of 32 per chunk), redone by every kernel call along N: so the search may also give ``i4`` an A copied once
into strips of 32 stored evens then odds (layout.interleaved, the copy ``dot_bf16_widen`` reads; offered by
``offers_interleaved_a``), whose two vectors meet the bytes zero-extended as ``q4_0``'s do (groups a multiple of
the chunk, so that every chunk is a whole strip).

Scales are widened to f32 once per call into an array on the stack (separate ones 16 a load, q4_0's blocks' d 16
a gather), so that a group's is a broadcast load. With several groups the kernel prefetches into L2 the columns
after its last, a share per group dealt out between its columns (quant_int_prefetch.step_slots), so that a loop
over N reads B as one stream. Exact dequantization: s * (q - z) is exact in f32 for f16 and bf16 scales (an
11-bit significand times a 5-bit integer); the sums run in a different order from ``dot_quant``'s (each product
scaled first), within the same f32 error bound. Any even group size (a group's last chunk may be short: its
bytes and A's lanes past the group load as zeros).
"""

from __future__ import annotations

from math import ceil

from morello_build.ir.formats import is_format
from morello_build.synth.cost import Features
from morello_build.target.kernels.common import F32, KernelDef, check_dot_operands, interleaved_for, pairwise_sum
from morello_build.target.kernels.dot import dot_shape
from morello_build.target.kernels.quant import (
    _i4_at,
    block_scale_features,
    chunk_loop,
    column_pointers,
    column_reads,
    group_loop,
    group_size,
    prefetch_head,
    prefetch_plan,
    trip_steps,
    trip_stream_head,
    widened_block_scales,
    widened_scales,
)
from morello_build.target.kernels.quant_int_prefetch import step_slots, streams_by_group
from morello_build.target.kernels.rows import sets_hold_rows

CHUNK = 32  # values per step: 16 bytes of nibbles, two vectors of f32
MAX_COLS = 4
MAX_ROWS = 4  # small batches: each column's lookups shared by the rows


def _applies(op, target) -> bool:
    if op.kind != "matmul" or target.lanes != 16:  # a 16-entry table in one register: vpermps on zmm
        return False
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    return (
        dot_shape(op, target, MAX_COLS, rows=range(1, MAX_ROWS + 1))
        and op.a.dtype == F32
        and (op.a.tile((1, 1, k)).unit_stride(2) or _a_in_strips(op, target))  # A's rows dense, or in strips
        and is_format(fmt)
        and fmt.name in ("i4", "q4_0")
        and k % fmt.group == 0
        and _vector_regs(op, target) <= target.vector_regs
        and (m == 1 or sets_hold_rows(op.a, n, target))
    )


def offers_interleaved_a(op, target) -> bool:
    """Whether the search should offer A copied into strips of a chunk, evens then odds (_a_in_strips)."""
    fmt = op.b.dtype
    return target.lanes == 16 and is_format(fmt) and fmt.name == "i4" and group_size(fmt, op.iter_shape[2]) % CHUNK == 0


def _a_in_strips(op, target) -> bool:
    """A stored in strips of 32 values, evens then odds (i4 only, whole chunks): its two vectors meet the
    bytes zero-extended in order, with no shuffle of A."""
    return offers_interleaved_a(op, target) and interleaved_for(op.a, target.lanes)


def _chains(m: int, n: int, chunks: int) -> int:
    """Accumulator pairs per output (a chunk's two products go to a pair): two with one output and at least
    two chunks a group, enough to hide the FMA latency behind the widening; else one."""
    return 2 if m * n == 1 and chunks > 1 else 1


def _vector_regs(op, target) -> int:
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    chains = _chains(m, n, ceil(group_size(fmt, k) / CHUNK))
    # per output its accumulators, per column its table, per row A's two vectors; the base table, i4_order's
    # two permute indices, the shift counts, a column's two looked-up vectors
    return m * n * 2 * chains + n + 2 * m + (2 if _broadcast_lookup(op, target) else 0) + 4


def _cost(op, target) -> Features:
    """Per chunk of 32 values: per row A's two loads (i4 from a row of A: two permutes into lookup_i4's order);
    per column its bytes (zero-extended, q4_0 and i4 from strips of A: a widening load, a load and a shuffle;
    else a broadcast load), two shifts (zero-extended: one), two permutes (shuffles), and per row two FMAs
    into the output's chains, each waiting for the last of its chain. Per group and column the table: a
    broadcast load of the scale and a multiply, from the array the scales were widened into once per call, 16
    a step (separate scales: a load and a conversion; q4_0's blocks: a gather, a load a group, a narrowing and a
    conversion)."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    G = group_size(fmt, k)
    groups, broadcast = k // G, _broadcast_lookup(op, target)
    chunks = groups * ceil(G / CHUNK)
    widen_steps = n * ceil(groups / 16) if fmt.scales else 0
    feats = Features.of(
        vec_load=chunks * (2 * m + n) + groups * n * (1 + fmt.zero) * bool(fmt.scales) + widen_steps * (1 + fmt.zero),
        vec_shuffle=chunks * (2 * n + (2 * m if broadcast else n)),
        vec_op=chunks * n * (2 if broadcast else 1) + widen_steps * (2 + 3 * fmt.zero),
        vec_store=widen_steps * (1 + fmt.zero),
        vec_fma=chunks * m * n * 2 + groups * n,
        fma_latency=chunks / _chains(m, n, ceil(G / CHUNK)),
        hsum=m * n,
        loop_iter=groups if groups > 1 else 0,
    )
    feats += Features() if fmt.scales else block_scale_features(n, groups)  # q4_0's blocks' d
    steps = _trip_steps(op, target) or None  # else a step per group
    return feats + column_reads(op, target, _streamed(op, target), _prefetches(op, target), steps=steps)


def _broadcast_lookup(op, target) -> bool:
    """i4 from a row of A: lookup_i4's broadcast bytes, A shuffled into their order (else lookup_q4)."""
    return op.b.dtype.name == "i4" and not _a_in_strips(op, target)


def _streamed(op, target) -> bool:
    """B's columns read as one stream: a step per group (streams_by_group), or per trip of the chunk loop over
    per-channel columns (_trip_steps)."""
    return streams_by_group(op.b, op.iter_shape[2], target) or _trip_steps(op, target) > 0


def _trip_steps(op, target) -> int:
    """quant.trip_steps of this kernel's chunk loop (CHUNK values a chunk, _chains chunks a trip)."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    return trip_steps(op.b, k, CHUNK, _chains(m, n, ceil(group_size(fmt, k) / CHUNK)), target)


def _prefetches(op, target):
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    if _streamed(op, target):
        return 0, False, ()
    return prefetch_plan(op.b, k, CHUNK, _chains(m, n, ceil(group_size(fmt, k) / CHUNK)), target, streams=n)


# -- emitter ---------------------------------------------------------------------------------------------
def _emit(lw, node, binds) -> None:
    a, b, c = binds
    op = node.spec.op
    fmt, (_, m, k, n) = b.dtype, op.iter_shape
    strips = _a_in_strips(op, lw.target)
    check_dot_operands(lw, "dot_quant_lut", a, (b,), (c,), 0 if strips else m, k, n)
    v, G = lw.v, group_size(fmt, k)
    chains = _chains(m, n, ceil(G / CHUNK))
    lw.open("{")
    lw.emit(f"// dot_quant_lut: {m} row(s) x {n} column(s) of {fmt} weights, K = {k}, dequantized by a table per group")
    aps = [lw.fresh("ap") for _ in range(m)]
    for i, ap in enumerate(aps):
        lw.emit(f"const float* {ap} = {lw.ptr(a, (0, i, 0))};")
    bps, sps, zps = column_pointers(lw, fmt, [(b, j) for j in range(n)])
    base = lw.fresh("lut")
    lw.emit(f"const {lw.target.vtype} {base} = {v}::nibble_values({0 if fmt.zero else 8});")
    if sps:
        scales = [widened_scales(lw, fmt, k // G, sps[j], zps[j] if zps else None) for j in range(n)]
    else:
        scales = [(widened_block_scales(lw, fmt, bps[j], k // G), None) for j in range(n)]
    accs = [[[lw.fresh("acc") for _ in range(2 * chains)] for _ in range(n)] for _ in range(m)]
    lw.emit(f"{lw.target.vtype} " + ", ".join(f"{x} = {v}::zero()" for row in accs for col in row for x in col) + ";")
    by_group = streams_by_group(op.b, k, lw.target)  # else, streamed, a share per trip (_trip_steps), or per column
    last = [bps[-1]] + sps[-1:] + zps[-1:]
    lookup = "lookup_i4" if _broadcast_lookup(op, lw.target) else "lookup_q4"
    odds = _odds_offset(lw, a) if strips else None

    def group(g: str, trip_head) -> None:
        tables = [_table(lw, base, scales[j], g) for j in range(n)]
        slots = step_slots(lw, b, last, k, n, g, k // G, n) if by_group else None
        _chunks(lw, fmt, accs, aps, (bps, tables, lookup), odds, g, G, chains, trip_head, slots)

    prefetch = prefetch_head(lw, _prefetches(op, lw.target), bps)
    if trips := _trip_steps(op, lw.target):
        prefetch = trip_stream_head(lw, b, last, k, n, trips, fmt.storage_elems(chains * CHUNK)), True
    group_loop(lw, fmt, k, prefetch, group)
    for i, row in enumerate(accs):
        for j, col in enumerate(row):
            lw.emit(f"{lw.elem(c, (0, i, j))} += {v}::hsum({pairwise_sum(lw, col)});")
    lw.close()


def _table(lw, base: str, scales, g: str) -> str:
    """The column's table for group g: s * (q - z) for q = 0..15 (base: q - 8, or q with zero points, where
    s * q - z * s is exact for 16-bit scales)."""
    v, t = lw.v, lw.fresh("tab")
    if scales[1]:
        value = f"{v}::fmsub({base}, {v}::bcast({scales[0]}[{g}]), {v}::bcast({scales[1]}[{g}]))"
    else:
        value = f"{v}::mul({base}, {v}::bcast({scales[0]}[{g}]))"
    lw.emit(f"const {lw.target.vtype} {t} = {value};")
    return t


def _chunks(lw, fmt, accs, aps, columns, odds, g: str, G: int, chains: int, head, slots=None) -> None:
    """accs[i][j] += row i's chunk of A times column j's nibbles looked up in its table, over group g's G
    values; columns: (B's column pointers, their tables, the lookup helper); odds: where a strip's odd values
    start (A in strips, _a_in_strips), else None; the group's prefetches slots[j] after column j's products
    in its first chunk."""
    vt, v = lw.target.vtype, lw.v
    first = f"{g} * {G}" if g != "0" else ""
    bps, tables, lookup = columns

    def chunk(e0, slot: int, cnt: int) -> None:
        at = " + ".join(x for x in (first, str(e0)) if x and x != "0") or "0"
        rows = []
        for ap in aps:
            lo, hi = lw.fresh("a"), lw.fresh("a")
            high = f"{v}::load_f32({ap} + {at} + {odds}, 16)" if odds else _high_half(lw, ap, at, cnt)
            lw.emit(f"{vt} {lo} = {v}::load_f32({ap} + {at}, {min(16, cnt)}), {hi} = {high};")
            if lookup == "lookup_i4":  # in lookup_i4's order
                lw.emit(f"{v}::i4_order({lo}, {hi}, {lo}, {hi});")
            rows.append((lo, hi))
        for j, (bp, tab) in enumerate(zip(bps, tables)):
            ql, qh, at_b = lw.fresh("ql"), lw.fresh("qh"), _bytes_at(fmt, bp, g, e0)
            lw.emit(f"{vt} {ql}, {qh}; {v}::{lookup}({at_b}, {(cnt + 1) // 2}, {tab}, {ql}, {qh});")
            for (lo, hi), row in zip(rows, accs):
                acc = row[j]
                lw.emit(f"{acc[2 * slot]} = {v}::fma({lo}, {ql}, {acc[2 * slot]});")
                lw.emit(f"{acc[2 * slot + 1]} = {v}::fma({hi}, {qh}, {acc[2 * slot + 1]});")
            for stmt in slots[j] if slots and str(e0) == "0" else ():
                lw.emit(stmt)

    chunk_loop(lw, fmt, G, chains, chunk, CHUNK, head)


def _odds_offset(lw, a) -> int:
    """Where a strip's odd values start in A (strips of CHUNK, evens then odds), checked: each strip dense,
    the next one right after it (the kernel's chunks step by CHUNK along a row)."""
    k = a.shape[2]
    odds = lw.step(a, (0, 0, 0), (0, 0, 1))
    dense = all(lw.step(a, (0, 0, p), (0, 0, p + 2 * j)) == j for p in (0, 1) for j in range(CHUNK // 2))
    strips_abut = k <= CHUNK or lw.step(a, (0, 0, 0), (0, 0, CHUNK)) == CHUNK
    if odds != CHUNK // 2 or not dense or not strips_abut:
        raise lw.error("dot_quant_lut: A's strips are not 16 evens then 16 odds, one after another")
    return odds


def _high_half(lw, ap: str, at: str, cnt: int) -> str:
    return f"{lw.v}::load_f32({ap} + {at} + 16, {cnt - 16})" if cnt > 16 else f"{lw.v}::zero()"


def _bytes_at(fmt, bp: str, g: str, e0) -> str:
    """The first byte of values e0.. of group g of the column at bp."""
    if fmt.name == "q4_0":  # a block's 16 bytes follow its fp16 d
        return f"{bp} + {g} * 18 + 2"
    return _i4_at(fmt, bp, g, e0)


DOT_QUANT_LUT = KernelDef(
    name="dot_quant_lut",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="1-4 f32 rows of A by 1-4 i4 / q4_0 columns, each group's 16 values in a table looked up by vpermps",
    features=frozenset({"avx512f"}),
    vector_regs=_vector_regs,
)
