"""Dot-product kernels over B in a weight format (ir/formats.py): C (1x1xn, scalar registers) += A (1xK,
f32) · B (Kxn, each column's K values in the format), dequantized in registers.

Each format's bytes become f32 lanes through one ISA helper per chunk (``mv::load_i8``, ``load_q4``,
``load_i4``, ``load_f16``, ``load_e4m3``: templates/isa_*.hpp.j2; i4 and Q4_0 can subtract their zero point or
8 in the integer lanes), and each group's scale becomes a vector once per group (``mv::bscale_f32``,
``bscale_bf16``, ``bscale_f16``: F16C for ggml's fp16 d; on AVX-512 a column's d are gathered into an f32 array
once per call instead, ``gathers_block_scales``; separate f16 or bf16 scales are widened into one, ``widens_scales``).
Formats with scales run group by group: a group's
partial dot products accumulate unscaled, then one FMA per column adds the partial sum times the group's
scale into the column's accumulator. A zero point (Q4_0's 8, i4's z or 8, i8's and gemma_i8's z) is taken off
once per group and column as z times the group's sum of A (``hoists_zero``: sum a (q - z) = sum a q - z sum a;
the sum of A added once per chunk for every column, then one FMA per column) rather than from every widened
vector (one instruction per chunk and column). 1x2048x16384 from DRAM, one thread, Zen 3, the generated kernel
against the one subtracting per vector in interleaved rounds of one process: q4_0 0.87-0.91x its time, i4 g32
with zero points 0.93-0.95x. Formats
without scales (f16, e4m3, sfp) are a plain dot product of the widened lanes. gemma_i8's block header holds
its scale and zero point (bf16).
"""

from __future__ import annotations

from math import ceil

from morello_build.ir.formats import is_format
from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_read, streams_read
from morello_build.target.kernels import dot
from morello_build.target.kernels.common import F32, KernelDef, check_dot_operands, pairwise_sum
from morello_build.target.kernels.dot import dot_shape, prefetch_offsets
from morello_build.target.kernels.quant_int_prefetch import step_slots, stream_reads, streams_by_group

# Vector instructions widening one vector of a format's values to f32 lanes, beyond its load (the ISA
# helpers, templates/isa_*.hpp.j2): q8_0 / i8 sign-extend and convert; q4_0 zero-extend, shift or mask,
# subtract 8, convert; i4 shift each lane of the broadcast bytes to its nibble (vpsrlvd), mask, subtract
# the zero point (or 8), convert; f16 8 for the bit manipulation a target without F16C would need;
# sfp 7 and e4m3 7 per W values (load2_sfp: 13 for 2W values decoded in 16-bit lanes, then spread to f32
# lanes; load2_e4m3: 11, then two conversions and two multiplies).
_WIDEN_OPS = {"q8_0": 2, "i8": 2, "gemma_i8": 2, "q4_0": 4, "i4": 4, "e4m3": 7, "sfp": 7, "f16": 8}
# Formats widened 2W values at a time (``load2_<format>``: two vectors from one decoding; i4: one load and
# one nibble split for both), and their price for kernels that widen one vector at a time (``load_<format>``).
_DOUBLE_CHUNKS = ("sfp", "e4m3", "i4")
_INT_ZERO = ("q4_0", "i4")  # their helpers subtract the zero point (or 8) in the integer lanes: one op of _WIDEN_OPS
_WIDEN_OPS_SINGLE = {"sfp": 13, "e4m3": 8, "i4": 4}
_WIDEN_OPS_NATIVE_F16 = {"f16": 1}  # F16C's vcvtph2ps (AVX-512F's on zmm) converts halves in one instruction
# Of those, the shuffles (Intel's port 5, Zen's FP1/FP2): the byte formats' widening to 32-bit lanes
# (vpmovsxbd / vpmovzxbd; e4m3 and sfp: their load2 helpers' to 16-bit lanes and back, one per vector); i4's
# nibble unpack too. F16C's vcvtph2ps is counted as one ALU op.
_WIDEN_SHUFFLES = {"q8_0": 1, "i8": 1, "gemma_i8": 1, "q4_0": 1, "i4": 2, "e4m3": 1, "sfp": 1, "f16": 0}
_MAX_UNROLLED_CHUNKS = 16


def _applies(op, target):
    if op.kind != "matmul":
        return False
    k = op.iter_shape[2]
    return (
        dot_shape(op, target, max(1, min(4, (target.vector_regs - 4) // 2)))
        and op.a.dtype == F32
        and op.a.unit_stride(2)
        and is_format(op.b.dtype)
        and k % op.b.dtype.group == 0  # whole groups (a k tile of one value is for scalar loads)
        and k % op.b.dtype.unit == 0
        and _vector_regs(op, target) <= target.vector_regs
    )


def group_size(fmt, k: int) -> int:
    """Values per group of a column of K values: the format's group, or all K (no scales, or per channel)."""
    return fmt.group if fmt.group > 1 else k


def widen_ops(fmt, target, single: bool = False, zero_in_lanes: bool = True) -> int:
    """Vector instructions widening one chunk of B (and subtracting its zero point, unless not
    ``zero_in_lanes``: hoists_zero) to f32 lanes; ``single``: for a kernel that widens one vector at a time
    (``load_<format>``, also for the double-chunk formats)."""
    if fmt.name == "f16" and target.has("f16c"):
        return _WIDEN_OPS_NATIVE_F16["f16"]
    if single and fmt.name in _DOUBLE_CHUNKS:
        return _WIDEN_OPS_SINGLE[fmt.name]
    if not zero_in_lanes:
        return _WIDEN_OPS[fmt.name] - (fmt.name in _INT_ZERO)
    return _WIDEN_OPS[fmt.name] + (_float_zero(fmt))  # a zero point subtracted from the f32 lanes


def widen_features(fmt, target, chunks: float, single: bool = False, zero_in_lanes: bool = True) -> Features:
    """The widening of ``chunks`` chunks of B (widen_ops each), its shuffles apart from its ALU ops."""
    ops, shuffles = widen_ops(fmt, target, single, zero_in_lanes), _WIDEN_SHUFFLES[fmt.name]
    return Features.of(vec_op=chunks * (ops - shuffles), vec_shuffle=chunks * shuffles)


def _float_zero(fmt) -> bool:
    """A zero point subtracted from the widened f32 lanes: i8's array, or gemma's in the block header."""
    return (fmt.zero and fmt.name == "i8") or fmt.name == "gemma_i8"


def chunk_width(fmt, W: int) -> int:
    """Values per chunk of dot_quant's chunk loop: 2W for the formats widened two vectors at a time."""
    return 2 * W if fmt.name in _DOUBLE_CHUNKS else W


def hoists_zero(fmt, k: int, W: int) -> bool:
    """Whether dot_quant (and dot_quant_pair) take a group's zero point off once per group and column, as z
    times the group's sum of A, instead of from every widened vector: formats with a zero point (or Q4_0's
    8) whose group's chunks are unrolled (the sum of A is a chain within the group; over a rolled loop's
    long group it would be one long chain)."""
    G = group_size(fmt, k)
    return (fmt.name in _INT_ZERO or _float_zero(fmt)) and fmt.group > 1 and not rolled(fmt, G, chunk_width(fmt, W))


def zero_sum_features(fmt, k: int, W: int) -> Features:
    """The sum of A per group where hoists_zero: an add per chunk but the first (shared by the columns)."""
    if not hoists_zero(fmt, k, W):
        return Features()
    G = group_size(fmt, k)
    return Features.of(vec_op=k // G * (ceil(G / W) - 1))


def scale_features(fmt, cols: int, groups: int, scales: bool = True) -> Features:
    """Each group's scale (and zero point) of each column, broadcast once per group: a broadcast load, then
    F16C's conversion (f16, ggml's blocks) or bf16's shift; a zero point's scalar load and broadcast (only
    that where not ``scales``: they were widened once per call)."""
    if fmt.group <= 1:
        return Features()
    kind = {"f16": "f16", "bf16x2": "bf16"}[fmt.header] if fmt.block else fmt.scales  # ggml's d; gemma's
    zero = fmt.zero or fmt.name == "gemma_i8"
    per = cols * groups
    return Features.of(
        vec_load=per * scales,
        vec_op=per * ((kind == "f16") * scales + zero),
        scalar_op=per * ((kind == "bf16") * scales + zero),
    )


def gathers_block_scales(fmt, k: int, target) -> bool:
    """Whether dot_quant (and the rows and pair kernels) widens the fp16 d of ggml's blocks (q8_0, q4_0) into an f32
    array once per call (widened_block_scales) instead of broadcasting and converting each group's per column: on
    AVX-512 (a 16-lane gather), with several groups. Each group's conversion took the shuffle port beside the
    widening: 1x2048x16384 q8_0, one thread, Emerald Rapids, one process (bench/experiments/block_gemv_ab.cpp
    -DBLOCK_BYTES=34, 41 rounds, three runs): from DRAM 3076 / 3214 / 3138 -> 2905 / 3133 / 2973 us (read sweeps
    2657 / 2769 / 2755), from L3 2359 -> 2081; outputs bit-identical."""
    return bool(fmt.block) and fmt.header == "f16" and target.lanes == 16 and k // fmt.group > 1


def widened_block_scales(lw, fmt, bp: str, groups: int) -> str:
    """The fp16 d of the column's ``groups`` blocks as f32 in an array on the stack (its name), gathered once
    per call, 16 a step: a group's scale is then a broadcast load."""
    s = lw.fresh("sc")
    lw.emit(f"float {s}[{groups}];")
    lw.emit(f"{lw.v}::widen_block_scales({bp}, {fmt.unit_size}, {groups}, {s});")  # a block's bytes apart
    return s


def widens_scales(fmt, k: int, target) -> bool:
    """Whether dot_quant (and the rows and pair kernels) widens a column's separate f16 or bf16 scales into an f32
    array once per call (widened_scales, a vector a load and a conversion) instead of broadcasting and converting
    each group's: with several groups (as dot_quant_lut does). 1x2048x16384 i8 g32 f16 scales, one thread, Emerald
    Rapids, one process (block_gemv_ab.cpp -DGROUPED=32): from DRAM 3571 / 3429 / 3435 -> 3465 / 3307 / 3386 us
    (read sweeps 3171 / 3054 / 3157), from L3 2784 -> 2419; AVX2 (--isa avx2) 3810 / 3334 -> 3634 / 3209 (sweeps
    3133 / 2840), from L3 2651 -> 2079; outputs bit-identical."""
    return fmt.scales in ("f16", "bf16") and not fmt.block and target.lanes >= 8 and k // fmt.group > 1


def widened_scales(lw, fmt, groups: int, sp: str, zp: str | None = None) -> tuple[str, str | None]:
    """The column's separate scales as f32 (and z * s with zero points ``zp``) in arrays on the stack, once per
    call: (scales, z * s or None)."""
    s, zs = lw.fresh("sc"), lw.fresh("zs") if zp else None
    lw.emit(f"float {s}[{groups}]" + (f", {zs}[{groups}]" if zs else "") + ";")
    bf16 = "true" if fmt.scales == "bf16" else "false"
    zeros = f", {zp}" if zp else ""  # AVX-512's form with zero points: (p, z, n, bf16, s, zs)
    lw.emit(f"{lw.v}::widen_scales({sp}{zeros}, {groups}, {bf16}, {s}{f', {zs}' if zs else ''});")
    return s, zs


def widened_scale_features(cols: int, groups: int, lanes: int) -> Features:
    """widened_scales for ``cols`` columns (per vector of groups a load, a conversion of two ops and a store), then
    a broadcast load per group and column."""
    steps = cols * ceil(groups / lanes)
    return Features.of(vec_load=steps + cols * groups, vec_op=2 * steps, vec_store=steps)


def widened_column_scales(lw, fmt, k: int, bps, sps) -> list | None:
    """Each column's scales as an f32 array on the stack, widened once per call where gathers_block_scales or
    widens_scales (their names), else None: each group's are converted per column (scale_vector)."""
    if gathers_block_scales(fmt, k, lw.target):
        return [widened_block_scales(lw, fmt, bp, k // fmt.group) for bp in bps]
    if widens_scales(fmt, k, lw.target):
        return [widened_scales(lw, fmt, k // fmt.group, sp)[0] for sp in sps]
    return None


def column_scale_features(fmt, k: int, target, cols: int, groups: int) -> Features:
    """The scales of ``cols`` columns as widened_column_scales brings them to the groups."""
    if gathers_block_scales(fmt, k, target):
        return block_scale_features(cols, groups)
    if widens_scales(fmt, k, target):
        return widened_scale_features(cols, groups, target.lanes) + scale_features(fmt, cols, groups, scales=False)
    return scale_features(fmt, cols, groups)


def block_scale_features(cols: int, groups: int) -> Features:
    """widened_block_scales for ``cols`` columns (per 16 groups a gather, a load per lane it fills, a narrowing, a
    conversion and a store), then a broadcast load per group and column."""
    steps = cols * ceil(groups / 16)
    return Features.of(vec_load=2 * cols * groups, vec_shuffle=steps, vec_op=2 * steps, vec_store=steps)


def short_columns(op, target) -> Features:
    """``gl_short_run`` per B column that the kernel reads side by side with others when a column is shorter
    than a page: each is a short stream the prefetchers learn afresh (formats pack K values into few bytes:
    1 KiB per i4 column at K = 2048), where one column at a time continues the previous column's stream.
    B in L1 is a view of main memory here (formats are never copied): its first reads are these."""
    n = op.iter_shape[3]
    col_bytes = op.b.bytes / max(1, n)
    if n > 1 and op.b.level in (Level.GL, Level.L1) and col_bytes < target.costs.page_bytes:
        return Features.of(gl_short_run=n)
    return Features()


def _cost(op, target, cols: int | None = None):
    """``cols``: the columns read side by side (the gated pair's 2n; default n), for the prefetch trips."""
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    W = target.lanes
    groups = k // fmt.group if fmt.group > 1 else 1
    chunks = groups * ceil((k // groups) / W)
    adds = (chains(fmt, n, k, target) - 1) * groups  # the chains' adds
    scaled = fmt.group > 1
    hoist = hoists_zero(fmt, k, W)
    feats = widen_features(fmt, target, chunks * n, zero_in_lanes=not hoist) + Features.of(
        vec_load=chunks * (n + 1),
        vec_fma=chunks * n + (groups * n if scaled else 0) + (groups * n if hoist else 0),
        vec_op=adds * n,
        hsum=n,
        loop_iter=groups if groups > 1 else 0,
    )
    streamed = cols is None and streams(op, target)
    feats += zero_sum_features(fmt, k, W) + column_scale_features(fmt, k, target, n, groups)
    steps = _trip_steps(op, target) or None  # else a step per group
    return feats + column_reads(op, target, streamed, _prefetches(op, target, cols), steps=steps)


def column_reads(op, target, streamed: bool, plan, next_loads: Features | None = None, steps=None) -> Features:
    """A's lines and B's, its separate scales' included: B's n columns as one stream (``streamed``:
    stream_reads, the next columns prefetched a share per group, or per ``steps``; or ``next_loads`` prefetches
    of them by dot.next_columns_head), else as n interleaved streams, short ones paying their start (short_columns),
    with ``plan``'s prefetches (prefetch_plan) in every column."""
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    scale_lines = ceil(n * k * fmt.scale_bytes / 64) if op.b.level == Level.GL else 0
    feats = lines_read(op.a) + Features.of(gl_line=scale_lines)
    if next_loads is not None:
        return feats + lines_read(op.b) + next_loads
    if streamed:
        return feats + stream_reads(op.b, k, n, steps)
    return feats + short_columns(op, target) + prefetch_loads(plan, n) + streams_read(op.b, n)


def _prefetches(op, target, cols: int | None = None) -> tuple[int, bool, tuple[int, ...]]:
    """How the kernel prefetches each B column from main memory, as the plain dot kernels do (dot.py):
    prefetch_plan for dot_quant's chunks and chains (``cols``: the columns beside each other, default n)."""
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    if cols is None and streams(op, target):
        return 0, False, ()
    u = chains(fmt, cols or n, k, target)
    return prefetch_plan(op.b, k, chunk_width(fmt, target.lanes), u, target, streams=cols or n)


def streams(op, target) -> bool:
    """Whether dot_quant reads B's columns as one stream, prefetching the next kernel's into L2 a share per step
    (step_slots): a step per group (streams_by_group) or, where a column is one long group (per-channel scales, or
    none), per trip of its chunk loop (trip_steps)."""
    return streams_by_group(op.b, op.iter_shape[2], target) or _trip_steps(op, target) > 0


def trip_steps(b, k: int, W: int, u: int, target) -> int:
    """The trips of a rolled chunk loop (W values a chunk, u chunks a trip) over columns of one group of K values
    (per-channel scales, or none) of at most a byte a value from main memory: the steps of their stream; else 0,
    and each column is prefetched ``prefetch_bytes`` ahead (its share) instead. 1x2048x16384 from DRAM, one thread,
    Emerald Rapids, in one process against that: i8 per channel 0.69-0.75 -> 0.98-1.01 of a read sweep, i4 per
    channel 0.58 -> 0.81, e4m3 0.53-0.56 (one column a kernel; 4: 0.49) -> 0.62-0.75; f16 (4 columns a kernel, 128 bytes
    ahead each into L1) ran 1.09-1.12x the time with the stream, so 2-byte values are not read as it: f16 prefetches as
    the bf16 kernels do (_prefetch_head)."""
    one_group = group_size(b.dtype, k) == k and rolled(b.dtype, k, W) and b.dtype.bytes <= 1
    if not one_group or b.level != Level.GL or not target.costs.prefetch_bytes:
        return 0
    return k // W // u


def _trip_steps(op, target) -> int:
    """trip_steps of dot_quant's chunk loop."""
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    return trip_steps(op.b, k, chunk_width(fmt, target.lanes), chains(fmt, n, k, target), target)


def trip_stream_head(lw, b, last, k: int, n: int, trips: int, per_trip: int):
    """A chunk-loop head (trip_steps) emitting the trip's share of step_slots' prefetches (``per_trip``: the
    column's elements a trip reads, of the head's argument)."""

    def head(first: str) -> None:
        for stmt in step_slots(lw, b, last, k, n, f"({first}) / {per_trip}", trips, 1)[0]:
            lw.emit(stmt)

    return head


def prefetch_plan(b, k: int, W: int, u: int, target, rows: int = 1, streams: int = 1) -> tuple[int, bool, tuple]:
    """(trips, whether a trip is one of chunk_loop's rolled loop (else a group), byte offsets past a trip's
    first value: dot.prefetch_offsets, for ``rows`` rows of A and ``streams`` columns side by side) for a B
    column of K values read W per chunk, u chunks per rolled trip. Unrolled chunks of a format without
    groups have no trips; nor has B in a cache, or prefetch_bytes 0."""
    fmt = b.dtype
    G = group_size(fmt, k)
    full, loop = G // W, rolled(fmt, G, W)
    if b.level != Level.GL or not target.costs.prefetch_bytes or not (loop or fmt.group > 1):
        return 0, False, ()
    trips, values = (k // G * (full // u), u * W) if loop else (k // G, G)
    return trips, loop, prefetch_offsets(target, values * fmt.bytes, rows, streams)


def prefetch_loads(plan, cols: int) -> Features:
    """The prefetches of a prefetch_plan in each of ``cols`` columns: a vec_load per offset per trip."""
    trips, _, offsets = plan
    return Features.of(vec_load=cols * trips * len(offsets))


def _chains(n: int, chunks: int) -> int:
    """Independent FMA chains per column (partial sums a group's chunks rotate over): enough to hide the
    FMA latency with few columns, within the registers (n columns of chains plus an accumulator each)."""
    return max(1, min(4, 8 // n, chunks))


def chains(fmt, n: int, k: int, target) -> int:
    """FMA chains per column for n columns (_chains), fewer where hoists_zero's two registers (the group's sum
    of A, the zero point's vector) would not fit beside them: 1x2048x16384 q4_0 from DRAM, one thread, Zen 3,
    4 columns of AVX2: one chain each, 0.87-0.93x the time of two chains with 8 subtracted per vector (two
    chains and the sum of A spill registers: 0.95-1.04x; one chain, subtracting per vector: 0.96-0.98x).
    One chain where a group is at most four vectors (groups of 32): each group starts its partial sums afresh, so
    only the accumulators chain across groups, and the core overlaps consecutive groups; more chains only cost
    adds per group and column (and a double-chunk format never fills a second one on AVX-512). Emerald Rapids,
    1x2048x16384 f32 activations, against two chains in one process: AVX-512, one thread, q8_0 0.90-0.92x the
    time from L2 (1x2048x512), 0.976x from DRAM, i8 g32 0.953x; two threads 0.974x and 0.966x; AVX2 (--isa avx2),
    one thread, q8_0 0.92-0.94x from L2, 0.957x from DRAM, i8 g32 0.948x."""
    per_group = ceil(group_size(fmt, k) / target.lanes)
    if per_group <= 4:
        return 1
    u = _chains(n, per_group)
    if hoists_zero(fmt, k, target.lanes):
        while u > 1 and vector_regs(fmt, n, k, target, u) > target.vector_regs:
            u -= 1
    return u


def vector_regs(fmt, n: int, k: int, target, u: int) -> int:
    """n columns of u chains and an accumulator, 3 temporaries (A's chunk, a widened chunk, a constant), and
    where hoists_zero the group's sum of A and the zero point's vector."""
    return n * (u + 1) + 3 + 2 * hoists_zero(fmt, k, target.lanes)


def _vector_regs(op, target) -> int:
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    return vector_regs(fmt, n, k, target, chains(fmt, n, k, target))


# -- emitter ---------------------------------------------------------------------------------------------
def widen_call(lw, fmt, bp: str, g: str, e0, cnt: int, z: str = "8") -> str:
    """The helper call widening values e0..e0+cnt-1 (e0: an int, or a C expression for i8, i4 and the
    plain formats) of group ``g`` (a C expression) of the column at bp; i4 subtracts z (a C int) in it."""
    v, G = lw.v, fmt.group
    if fmt.name in ("q8_0", "gemma_i8"):  # int8 values after the block's header
        at = f"{g} * {fmt.unit_size} + {fmt.header_bytes + e0}"
        return f"{v}::load_i8(reinterpret_cast<const int8_t*>({bp} + {at}), {cnt})"
    if fmt.name == "q4_0":  # byte j: element j (low nibble), j + 16 (high); z (8, or 0) subtracted in load_q4
        zarg = "" if z == "8" else f", {z}"
        return f"{v}::load_q4({bp} + {g} * 18 + {2 + e0 % 16}, {4 if e0 >= 16 else 0}, {cnt}{zarg})"
    if fmt.name == "i8":
        return f"{v}::load_i8({bp} + {g} * {G} + {e0}, {cnt})"
    if fmt.name == "i4":
        return f"{v}::load_i4({_i4_at(fmt, bp, g, e0)}, {cnt}, {z})"
    return f"{v}::load_{fmt.name}({bp} + {e0}, {cnt})"


def widen2_call(lw, fmt, bp: str, g: str, e0, cnt: int, z: str | None, lo: str, hi: str) -> str:
    """The ``load2_<format>`` call widening values e0..e0+cnt-1 (cnt <= 2W) of group g of the column at bp
    into the vectors lo and hi (i4 subtracts z, a C int, in it)."""
    if fmt.name == "i4":
        return f"{lw.v}::load2_i4({_i4_at(fmt, bp, g, e0)}, {cnt}, {z}, {lo}, {hi})"
    return f"{lw.v}::load2_{fmt.name}({bp} + {e0}, {cnt}, {lo}, {hi})"


def _i4_at(fmt, bp: str, g: str, e0) -> str:
    """The byte of i4 value e0 (even) of group g of the column at bp."""
    half = e0 // 2 if isinstance(e0, int) else f"({e0}) / 2"
    return f"{bp} + {g} * {fmt.group // 2} + {half}"


def scale_vector(lw, fmt, bp: str, sp: str, g: str) -> str:
    """Group g's scale in every lane (a vector expression): one conversion per group (F16C for halves)."""
    if fmt.name == "gemma_i8":  # inv_scale, the header's first bf16
        return f"{lw.v}::bcast({lw.rt}::bf16_at({bp} + {g} * {fmt.unit_size}))"
    if fmt.block:
        return f"{lw.v}::bscale_f16({bp} + {g} * {fmt.unit_size})"
    return f"{lw.v}::bscale_{fmt.scales}({sp} + {g})"


def zero_value(lw, fmt, bp: str, zp: str, g: str) -> str | None:
    """Group g's zero point as a float (a C expression) where it is subtracted from the f32 lanes, else None."""
    if fmt.name == "gemma_i8":  # the header's second bf16
        return f"{lw.rt}::bf16_at({bp} + {g} * {fmt.unit_size} + 2)"
    return f"float({zp}[{g}])" if _float_zero(fmt) else None


def _emit(lw, node, binds) -> None:
    a, b, c = binds
    op = node.spec.op
    fmt, (_, _, k, n) = b.dtype, op.iter_shape
    check_dot_operands(lw, "dot_quant", a, (b,), (c,), 1, k, n)
    v = lw.v
    lw.open("{")
    lw.emit(f"// dot_quant: {n} column(s) of {fmt} weights, K = {k}")
    ap = lw.fresh("ap")
    lw.emit(f"const float* {ap} = {lw.ptr(a, (0, 0, 0))};")
    bps, sps, zps = column_pointers(lw, fmt, [(b, j) for j in range(n)])
    u = chains(fmt, n, k, lw.target)
    last = [bps[-1]] + sps[-1:] + zps[-1:]
    prefetch = _prefetch_head(lw, op, b, bps, u)
    if trips := _trip_steps(op, lw.target):
        per_trip = fmt.storage_elems(u * chunk_width(fmt, lw.W))
        prefetch = trip_stream_head(lw, b, last, k, n, trips, per_trip), True
    if fmt.group == 1:  # f16, e4m3, sfp: one "group" of K values, no scale
        parts = _zeroed(lw, [[lw.fresh("acc") for _ in range(u)] for _ in range(n)])
        _group_chunks(lw, fmt, parts, ap, bps, [None] * n, "0", k, prefetch[0])
        accs = [pairwise_sum(lw, col) for col in parts]
    else:
        accs = _zeroed(lw, [[lw.fresh("acc")] for _ in range(n)])
        stream = (b, last) if streams_by_group(op.b, k, lw.target) else None
        scales = widened_column_scales(lw, fmt, k, bps, sps)
        _grouped(lw, fmt, [col[0] for col in accs], ap, bps, sps, zps, k, u, prefetch, stream, scales)
        accs = [col[0] for col in accs]
    for j, acc in enumerate(accs):
        lw.emit(f"{lw.elem(c, (0, 0, j))} += {v}::hsum({acc});")
    lw.close()


def column_pointers(lw, fmt, columns) -> tuple[list, list, list]:
    """Pointers to each (operand, column j)'s values, and its scales and zero points where the format has
    separate arrays (else empty lists): (values, scales, zeros)."""
    bps, sps, zps = [], [], []
    for b, j in columns:
        values, *extra = lw.stream_points(b, j)
        bps.append(lw.fresh("bp"))
        lw.emit(f"const {fmt.ctype}* {bps[-1]} = {values};")
        for (suffix, ctype), at in zip(fmt.extra_arrays(), extra):
            out = sps if suffix == "scales" else zps
            out.append(lw.fresh(suffix[0] + "p"))
            lw.emit(f"const {ctype}* {out[-1]} = {at};")
    return bps, sps, zps


def widened(lw, fmt, bp: str, g: str, e0, cnt: int, shift) -> str:
    """A chunk of B widened to f32 lanes with its zero point (``shift``: i4's and Q4_0's C int, taken inside
    their load, None: 8; else a vector name subtracted, or None) removed."""
    if fmt.name in _INT_ZERO:
        return widen_call(lw, fmt, bp, g, e0, cnt, shift or "8")
    x = widen_call(lw, fmt, bp, g, e0, cnt)
    return x if shift is None else f"{lw.v}::sub({x}, {shift})"


def chunk_loop(lw, fmt, G: int, u: int, chunk, W: int | None = None, head=None) -> None:
    """chunk(e0, slot, count) over a group's G values, W (default: the vector width) at a time, slot = chunk
    index mod u: unrolled for short groups (and always for block formats), else a rolled loop of u chunks
    per trip, the rest unrolled; head(trip's first value), if given, at the start of every trip."""
    W = W or lw.W
    full, tail = divmod(G, W)
    if not rolled(fmt, G, W):
        for c, e0 in enumerate(range(0, G, W)):
            chunk(e0, c % u, min(W, G - e0))
        return
    trips = full // u
    ch = lw.fresh("ch")
    lw.open(f"for (ix {ch} = 0; {ch} < {trips * u * W}; {ch} += {u * W}) {{")
    if head:
        head(ch)
    for s in range(u):
        chunk(f"{ch} + {s * W}" if s else ch, s, W)
    lw.close()
    for c in range(trips * u, full):
        chunk(c * W, c % u, W)
    if tail:
        chunk(full * W, full % u, tail)


def rolled(fmt, G: int, W: int) -> bool:
    """Whether chunk_loop rolls a group of G values, W at a time, into a loop (else it unrolls the chunks)."""
    return not fmt.block and -(-G // W) > _MAX_UNROLLED_CHUNKS


def elems(fmt, values: str) -> str:
    """The ctype elements before value ``values`` (a C expression at a unit's start) of a column."""
    if fmt.unit == 1:
        return values if fmt.unit_size == 1 else f"{values} * {fmt.unit_size}"
    return f"{values} / {fmt.unit}" + (f" * {fmt.unit_size}" if fmt.unit_size > 1 else "")


def _prefetch_head(lw, op, b, bps, u: int):
    """(head, rolled) of dot_quant's prefetches (_prefetches' plan): a format without groups (f16) whose kernel
    reads several adjacent columns, or a k tile of longer ones, prefetches the next kernel's columns into L2 as
    the bf16 kernels do (dot.reads_next_columns; ``u`` chunks a trip), else each column ahead of its loads. Zen 3,
    one thread, from DRAM, 4 f16 columns a kernel, 21 interleaved rounds in one process: 1x2560x10240 1.15-1.20x
    faster than with each column prefetched its 128 bytes ahead (2953 -> 2522 µs; bf16 2344-2511), 1x2048x16384
    1.04-1.10x (3696 -> 3502)."""
    plan = _prefetches(op, lw.target)
    (_, _, k, n), trips = op.iter_shape, plan[0]
    if op.b.dtype.group == 1 and dot.reads_next_columns(lw, b, k, n, trips):
        per_trip = u * chunk_width(op.b.dtype, lw.W)  # values: the chunk loop's head gets a trip's first
        return dot.next_columns_head(lw, b, bps, n, k, per_trip, trips), True
    return prefetch_head(lw, plan, bps)


def prefetch_head(lw, plan, bps):
    """(head(a trip's first element) emitting the trip's prefetches of every column of bps, whether a trip
    is one of the rolled chunk loop) for a prefetch_plan; head None where the plan prefetches nothing."""
    trips, rolled, offsets = plan
    return (dot.prefetch_head(lw, bps, offsets) if trips else None), rolled


def _zeroed(lw, names):
    lw.emit(f"{lw.target.vtype} " + ", ".join(f"{x} = {lw.v}::zero()" for col in names for x in col) + ";")
    return names


def group_loop(lw, fmt, k: int, prefetch, body):
    """body(g, trip_head) for each group of a column's K values (g: the group's index, a C expression; a
    loop where K holds several groups); body's result returned. ``prefetch``, prefetch_head's (head,
    rolled): the group's prefetches at its start, or, where rolled, trip_head(a trip's first value) for
    body's rolled chunk loop to call at the start of every trip (else None)."""
    G = group_size(fmt, k)
    groups = k // G
    g = "0"
    if groups > 1:
        g = lw.fresh("g")
        lw.open(f"for (ix {g} = 0; {g} < {groups}; ++{g}) {{")
    head, rolled = prefetch
    base = f"{g} * {fmt.storage_elems(G)}" if groups > 1 else ""
    if head and not rolled:
        head(base or "0")
    trip_head = (lambda first: head(" + ".join(filter(None, (base, elems(fmt, first)))))) if head and rolled else None
    out = body(g, trip_head)
    if groups > 1:
        lw.close()
    return out


def _grouped(lw, fmt, accs, ap, bps, sps, zps, k, u, prefetch=(None, False), stream=None, scales=None) -> None:
    """Formats with scales: per group (group_loop, which places ``prefetch``, prefetch_head's), unscaled
    partial sums over u chains, then acc += partial * scale. ``stream``: B's binding and its last column's
    pointers, where the kernel prefetches the columns after it, a share per group (step_slots). ``scales``:
    the columns' scales widened into f32 arrays (widened_block_scales, widened_scales), else converted per group."""
    vt, v = lw.target.vtype, lw.v
    hoist = hoists_zero(fmt, k, lw.W)

    def group(g: str, trip_head) -> None:
        parts = _zeroed(lw, [[lw.fresh("part") for _ in range(u)] for _ in accs])
        shifts, zeros = [], []  # subtracted from the lanes; taken off per group (hoist)
        for j in range(len(accs)):
            if fmt.name in _INT_ZERO:  # subtracted from the nibbles inside load_i4 / load_q4
                z = f"int({zps[j]}[{g}])" if fmt.zero else "8"
            else:
                z = zero_value(lw, fmt, bps[j], zps[j] if zps else "", g)
            if hoist:
                shifts.append("0" if fmt.name in _INT_ZERO else None)
                zeros.append(z)
            elif z is not None and fmt.name not in _INT_ZERO:
                shifts.append(lw.fresh("zv"))
                lw.emit(f"const {vt} {shifts[-1]} = {v}::bcast({z});")
            else:
                shifts.append(z)
        asum = lw.fresh("asum") if hoist else None
        slots = step_slots(lw, *stream, k, len(accs), g, k // fmt.group, len(accs)) if stream else None
        _group_chunks(lw, fmt, parts, ap, bps, shifts, g, fmt.group, trip_head, slots, asum)
        for j, (acc, col, bp, sp) in enumerate(zip(accs, parts, bps, sps or [None] * len(accs))):
            total = pairwise_sum(lw, col)
            if hoist:  # sum a (q - z) = sum a q - z sum a
                total = f"{v}::fma({asum}, {v}::bcast(-float({zeros[j]})), {total})"
            scale = f"{v}::bcast({scales[j]}[{g}])" if scales else scale_vector(lw, fmt, bp, sp, g)
            lw.emit(f"{acc} = {v}::fma({total}, {scale}, {acc});")

    group_loop(lw, fmt, k, prefetch, group)


def _group_chunks(lw, fmt, parts, ap, bps, shifts, g: str, G: int, head=None, slots=None, asum=None) -> None:
    """parts[col][c % u] += A chunk c * widened B chunk c over the G values of group g (chunk_loop, which
    calls head at the start of each trip); slots[col], prefetches, after the column's first chunk; ``asum``
    (a name, for unrolled chunks): declared as the sum of the group's A (hoists_zero)."""
    vt, v = lw.target.vtype, lw.v
    base = f"{g} * {G}" if g != "0" else ""

    def a_at(e0) -> str:  # A's values from e0 of the group on
        return f"{ap} + " + (" + ".join(x for x in (base, str(e0)) if x and x != "0") or "0")

    def add_to_sum(first: bool, av: str) -> None:
        if asum:
            lw.emit(f"{vt} {asum} = {av};" if first else f"{asum} = {v}::add({asum}, {av});")

    def chunk(e0, part: int, cnt: int):
        av = lw.fresh("av")
        lw.emit(f"const {vt} {av} = {v}::load_f32({a_at(e0)}, {cnt});")
        add_to_sum(e0 == 0, av)
        for j, (col, bp, sh) in enumerate(zip(parts, bps, shifts)):
            lw.emit(f"{col[part]} = {v}::fma({av}, {widened(lw, fmt, bp, g, e0, cnt, sh)}, {col[part]});")
            prefetches(j, e0)

    def double_chunk(e0, part: int, cnt: int):  # 2W values: A's two vectors, B's from one load2_<format>
        W, aoff = lw.W, a_at(e0)
        halves = [(lw.fresh("av"), "", min(W, cnt))] + ([(lw.fresh("av"), f" + {W}", cnt - W)] if cnt > W else [])
        for i, (av, off, c) in enumerate(halves):
            lw.emit(f"const {vt} {av} = {v}::load_f32({aoff}{off}, {c});")
            add_to_sum(e0 == 0 and i == 0, av)
        for j, (col, bp, sh) in enumerate(zip(parts, bps, shifts)):
            lo, hi = lw.fresh("blo"), lw.fresh("bhi")
            lw.emit(f"{vt} {lo}, {hi}; {widen2_call(lw, fmt, bp, g, e0, cnt, sh, lo, hi)};")
            for (av, _, _), bv in zip(halves, (lo, hi)):
                lw.emit(f"{col[part]} = {v}::fma({av}, {bv}, {col[part]});")
            prefetches(j, e0)

    def prefetches(j: int, e0) -> None:
        for stmt in slots[j] if slots and str(e0) == "0" else ():
            lw.emit(stmt)

    if fmt.name in _DOUBLE_CHUNKS:
        chunk_loop(lw, fmt, G, len(parts[0]), double_chunk, 2 * lw.W, head)
    else:
        chunk_loop(lw, fmt, G, len(parts[0]), chunk, head=head)


DOT_QUANT = KernelDef(
    name="dot_quant",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="n dot products of f32 A with B columns in a weight format (ir/formats.py), dequantized in registers",
    vector_regs=_vector_regs,
)
