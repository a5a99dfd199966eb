"""``dot_int_cols16``: ``aquant=i8`` products of a few rows of A with B's columns sixteen at a time, one
column per lane of a zmm, for small batches (M = 2..6) of ``i8`` and ``i4`` (with or without zero points),
``q8_0`` and ``q4_0``.

The dot kernels (quant_int.py, quant_int_zmm.py, quant_int4_zmm.py) give each output (row, column) its own
vector: per 64 values one ``vpdpbusd``, then a convert, the scales' multiply and an FMA, and the register copy
of the row's offsets that ``vpdpbusd`` overwrites; at M = 4 those share the pipes ``vpdpbusd`` needs and the
kernel is compute-bound at 0.3-0.6 of a read sweep (Zen 4). Here each 16-column group's step of two blocks
puts every column's dword t of the step's weights (as unsigned bytes) in lane j of vector t, shared by all
rows; per row and block eight ``vpdpbusd`` of those by A's dwords broadcast, starting from the row's offset
(-128 or -8 times the block's sum qa, computed once per call), then ONE convert, multiply and FMA for all
sixteen columns: per 64 values and output 1 + 3/16 instructions on the multiply pipes instead of 4 to 5.

- 8-bit weights: each column's 64 bytes (i8 one load; q8_0 two, after each block's fp16 d) + 128 by an xor,
  then a 16x16 dword transpose (unpacks and 128-bit shuffles, 64 instructions).
- 4-bit weights: two columns' 32 bytes of nibbles in a zmm's halves, two 8x8 dword transposes (24), then the
  low and the high nibbles (and, shift, and): q4_0's byte i holds values i and i + 16, so a dword of low
  (high) nibbles meets A's dword of the same values; i4's holds 2i and 2i + 1, so the kernel reads a copy of
  A with each block's evens first, then its odds (made once per call, on the stack: rows x K <= 64 KiB).
- Scales: per block a gather of the sixteen columns' scales (a 16-bit one as the dword holding it, converted
  by F16C or a shift); per-channel scales once per group.
- Zero points (i8's int8 z, i4's uint8): the sums start as without them (i8: -128 sum qa; i4: 0) and each
  block's converted sums lose z x sum qa by one FMA per row (exact: both are integers below 2^21); z is
  gathered like a 16-bit scale (the dword ending with its byte: K / group >= 4; one gather a step where the
  step's blocks share a group or have adjacent bytes), or read once per group of columns when per-channel.
- C in memory (L1 or main memory), each row's columns dense: the kernel adds its sums to it per group (it
  accumulates: the search zeroes C first), so one call covers many groups and its offsets are computed once.
- B's next group is prefetched into L2 over a group's steps (quant_int_prefetch.step_slots), so the group
  loop reads B as one stream (without: 2x slower from DRAM; two groups ahead: no better).

Measured on Zen 4 (AMD EPYC, family 25 model 17), 1 thread, 4x2048x16384 from DRAM, scripts/kernel_ab.py:
i8 g32 f16 2320 us vs dot_int_vnni512 3201, q8_0 2414 vs 3401, q4_0 1658 vs dot_int4_vnni512 2594, i4 g32
1657 vs 2667; M = 2 q8_0 2163 vs 2318, q4_0 1364 vs 1571; M = 8 (two row halves per 512 columns) q8_0 5161
vs 6069. Still compute-bound there for 4-bit weights (the transposes and per-block gathers run beside the
``vpdpbusd``: ~140 cycles a step warm against its 64); an embedded {1to16} broadcast of A's dwords did not
help (GCC's separate vpbroadcastd loads run as fast).
"""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir.aquant import BLOCK, Q8A
from morello_build.ir.formats import SCALE_DTYPES
from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_read
from morello_build.target.kernels.common import F32, KernelDef, check_dot_operands, columns_unit_stride
from morello_build.target.kernels.quant_int import row_pointers
from morello_build.target.kernels.quant_int_prefetch import column_bytes, prefetch_plan, step_slots

LANES = 16  # columns per group: one per int32 lane of a zmm
MAX_ROWS = 6  # 16 transposed vectors, an accumulator and a sum per row, the scales and a constant: 31 zmm
UNIT = Q8A.unit_size  # bytes of one A block (36: f32 sa, 32 qa)
FORMATS = ("i8", "q8_0", "q4_0", "i4")
MAX_EVENS_ODDS = 64 * 1024  # bytes of the stack copy of A that i4 reads (rows x K): 4 rows of K = 16384


def _applies(op, target) -> bool:
    if not columns_apply(op, LANES, MAX_ROWS, FORMATS):
        return False
    k, fmt = op.iter_shape[2], op.b.dtype
    return (
        target.lanes == LANES
        and (not fmt.zero or k == fmt.group or k // fmt.group >= 4)  # a zero point's dword within its column
        and _vector_regs(op, target) <= target.vector_regs
    )


def columns_apply(op, lanes: int, max_rows: int, formats: tuple[str, ...]) -> bool:
    """What a kernel with B's columns in vector lanes (dot_int_cols16, dot_int_cols8) needs of a matmul, as
    open_columns assumes it: one batch of 2..max_rows rows of A quantized to int8 (i4's copy of A in evens and
    odds at most MAX_EVENS_ODDS bytes), N a whole number of ``lanes``-column groups of a format in ``formats``
    whose groups are whole blocks and divide K, B's columns unit-stride along K, C f32 with dense rows, and
    accumulating (the search zeroes C first)."""
    if op.kind != "matmul":
        return False
    b, m, k, n = op.iter_shape
    fmt = op.b.dtype
    return (
        b == 1
        and 2 <= m <= max_rows
        and n % lanes == 0
        and op.accum
        and op.a.dtype == Q8A
        and op.a.level.is_memory
        and op.a.tile((1, 1, k)).unit_stride(2)
        and getattr(fmt, "name", None) in formats
        and (fmt.name != "i4" or m * k <= MAX_EVENS_ODDS)
        and fmt.group % BLOCK == 0
        and k % fmt.group == 0
        and op.b.level.is_memory
        and columns_unit_stride(op.b)
        and op.c.level.is_memory
        and op.c.dtype == F32
        and op.c.tile((1, 1, n)).unit_stride(2)
    )


def _offset(fmt) -> int:
    """What the kernel's unsigned byte or nibble exceeds the weight by (zero points aside): i8 and q8_0 are
    read + 128; q4_0's and i4's nibbles are the weight + 8, or with zero points the weight + z (taken apart)."""
    return 128 if fmt.bits == 8 else 0 if fmt.zero else 8


def per_channel(fmt, k: int) -> bool:
    """One separate scale per column (group = K): its vector is loaded once per group of columns."""
    return fmt.scales is not None and fmt.group == k


def _vector_regs(op, target) -> int:
    m = op.iter_shape[1]
    return LANES + 2 * m + 3 + int(op.b.dtype.zero)


def _cost(op, target) -> Features:
    """Per group and step of two blocks: the columns' loads and transposes (below), the scales (a gather of
    16 as 16 loads and a shuffle per block, the conversion); per row and block 8 ``vpdpbusd`` with A's
    dwords broadcast (loads), the offset and sa broadcast, convert, multiply and FMA; per group and row C's
    load, add and store; the prefetches; per call the offsets (a scalar op per 8 of A's values). Zero points:
    a gather per step (per block where a group is an odd number of blocks, not one), per block two shifts and
    a convert, per row and block a broadcast and an FMA."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks, groups = k // BLOCK, n // LANES
    steps = blocks // 2 + blocks % 2
    q8, q4, i4 = fmt.name == "q8_0", fmt.name == "q4_0", fmt.name == "i4"
    z, per_group = int(fmt.zero), fmt.group // BLOCK
    zero_gathers = steps if per_group == 1 or per_group % 2 == 0 else blocks  # one a step where it holds both
    gathers = 0 if per_channel(fmt, k) else blocks + z * zero_gathers
    full, per = prefetch_plan(fmt, k, LANES)
    # per step: the columns' loads, ALU ops (xor; 4-bit: and, shift, and per pair of columns) and shuffles
    # (q8_0: 16 inserts; 4-bit: the 3 x 8 of two 8x8 transposes and 3 inserts per pair of columns, i4 1)
    loads, alu, shuffles = (32, 24, 48) if q4 else (16, 24, 32) if i4 else (16 * (1 + q8), 16, 64 + 16 * q8)
    feats = Features.of(
        vec_load=groups * (steps * loads + gathers * LANES + blocks * m * (10 + z) + full * per + 2 * m),
        vec_store=groups * m + i4 * m * blocks,  # i4: A's evens and odds, a load, 2 shuffles, a store a block
        vec_op=groups * (steps * alu + blocks * (m + 2 + 3 * z) + m),
        vec_shuffle=groups * (steps * shuffles + gathers) + 2 * i4 * m * blocks,
        vec_imul=groups * blocks * m * 9,
        vec_fma=groups * blocks * m * (1 + z),
        scalar_op=m * k // 8,  # the offsets
        loop_iter=groups * steps,
    )
    scale_lines = -(-int(n * k * fmt.scale_bytes) // 64) if op.b.level == Level.GL else 0
    return feats + lines_read(op.a) + lines_read(op.b) + Features.of(gl_line=scale_lines) + lines_read(op.c)


# -- emitter -----------------------------------------------------------------------------------------------
def _emit(lw, node, binds) -> None:
    a, b, c = binds
    fmt, (_, m, k, n) = b.dtype, node.spec.op.iter_shape
    cols = open_columns(lw, node.name, binds, (m, k, n), LANES)
    aps, cps = cols.aps, cols.cps
    blocks, col_bytes, scale_step, zero_step = cols.blocks, cols.col_bytes, cols.scale_step, cols.zero_step
    corr = lw.fresh("offs")
    channel = per_channel(fmt, k)
    lw.emit("auto load_i32 = [](const uint8_t* p) { int32_t w; std::memcpy(&w, p, 4); return w; };")
    if channel and fmt.scales != "f32":
        lw.emit("auto load_u16 = [](const uint8_t* p) { uint16_t w; std::memcpy(&w, p, 2); return w; };")
    qsum = lw.fresh("qsum") if fmt.zero else None
    offsets(lw, aps, blocks, _offset(fmt), corr, qsum)
    a_copy = evens_odds(lw, aps, blocks) if fmt.name == "i4" else None
    if fmt.bits == 4:
        lw.emit("const __m512i nib = _mm512_set1_epi8(0x0F);")
    else:
        lw.emit("const __m512i flip = _mm512_set1_epi8(char(0x80));")
    if fmt.block:
        lw.emit(f"const __m512i bix = _mm512_setr_epi32({', '.join(str(j * col_bytes) for j in range(LANES))});")
    elif not channel or fmt.scales == "f32":
        lw.emit(f"const __m512i six = _mm512_setr_epi32({', '.join(str(j * scale_step) for j in range(LANES))});")
    if fmt.zero and not channel:
        lw.emit(f"const __m512i zix = _mm512_setr_epi32({', '.join(str(j * zero_step) for j in range(LANES))});")
    g, blk = lw.fresh("g"), lw.fresh("blk")
    lw.open(f"for (ix {g} = 0; {g} < {n // LANES}; ++{g}) {{")
    bg, sg, zg, last = group_pointers(lw, cols, fmt, g, LANES)
    accs = [lw.fresh("acc") for _ in range(m)]
    lw.emit("__m512 " + ", ".join(f"{x} = _mm512_setzero_ps()" for x in accs) + ";")
    ctx = _Ctx(fmt, k, aps, accs, corr, blocks, bg, sg, col_bytes, scale_step)
    ctx.evens_odds, ctx.qsum, ctx.zg = a_copy, qsum, zg
    if channel:
        ctx.channel = lw.fresh("sbc")
        lw.emit(f"const __m512 {ctx.channel} = {_channel_scales(fmt, sg, scale_step)};")
        if fmt.zero:
            ctx.zchannel = lw.fresh("zc")
            lw.emit(f"const __m512 {ctx.zchannel} = {_channel_zeros(fmt, zg, zero_step)};")
    if blocks >= 2:
        jumps = group_jumps(lw, lw.stream_jumps(b), g, n // LANES)
        lw.open(f"for (ix {blk} = 0; {blk} + 1 < {blocks}; {blk} += 2) {{")
        slots = step_slots(lw, b, last, k, LANES, f"{blk} / 2", blocks // 2, 8, jumps)
        _step(lw, ctx, blk, 2, slots)
        lw.close()
    if blocks % 2:
        lw.open("{")
        _step(lw, ctx, str(blocks - 1), 1, [[] for _ in range(8)])
        lw.close()
    for cp, acc in zip(cps, accs):
        at = f"{cp} + {g} * {LANES}"
        lw.emit(f"_mm512_storeu_ps({at}, _mm512_add_ps(_mm512_loadu_ps({at}), {acc}));")
    lw.close()
    lw.close()


@dataclass(frozen=True)
class Columns:
    """What open_columns declared: A's row pointers, C's row pointers, B's arrays' first pointers (bq the
    values, sq the scales, zq the zero points; None where B has none) and B's layout in bytes."""

    aps: list[str]
    cps: list[str]
    bq: str
    sq: str | None
    zq: str | None
    blocks: int  # A's Q8A blocks a row
    col_bytes: int  # between two columns' first bytes
    scale_step: int  # between two columns' scales
    zero_step: int  # between two columns' zero points (a byte each)


def open_columns(lw, name: str, binds, mkn: tuple[int, int, int], lanes: int) -> Columns:
    """The prologue of a kernel with B's columns in vector lanes (dot_int_cols16, dot_int_cols8): the layout it
    assumes checked (A's rows and each row of C contiguous, B's columns a whole number of groups apart), its
    block opened, and A's, C's and B's pointers declared."""
    a, b, c = binds
    fmt, (m, k, n) = b.dtype, mkn
    check_dot_operands(lw, name, a, (), (), m, k, 0)  # A's rows (B's and C's: below)
    colstep = lw.step(b, (0, 0, 0), (0, 0, 1))
    if colstep is None or colstep % fmt.group or colstep % fmt.unit:
        raise lw.error(f"{name}: B's columns are not a constant whole number of groups apart")
    if any(lw.step(c, (0, r, 0), (0, r, 1)) != 1 for r in range(m)):
        raise lw.error(f"{name}: a row of C is not contiguous")
    lw.open("{")
    lw.emit(f"// {name}: {m} row(s) of A quantized to int8 · {n} column(s) of {fmt}, {lanes} a group, K = {k}")
    aps = row_pointers(lw, a, m)
    cps = [lw.fresh("cp") for _ in range(m)]
    for r, cp in enumerate(cps):
        lw.emit(f"float* {cp} = {lw.ptr(c, (0, r, 0))};")
    bq, sq, zq = lw.fresh("bq"), lw.fresh("sq") if fmt.scales else None, lw.fresh("zq") if fmt.zero else None
    firsts = dict(zip(("values", *dict(fmt.extra_arrays())), lw.stream_points(b, 0)))  # the arrays B has
    for arr, ptr in (("values", bq), ("scales", sq), ("zeros", zq)):
        if arr in firsts:
            lw.emit(f"const uint8_t* {ptr} = reinterpret_cast<const uint8_t*>({firsts[arr]});")
    scale_step = colstep // fmt.group * (SCALE_DTYPES[fmt.scales][1] if fmt.scales else 0)
    return Columns(aps, cps, bq, sq, zq, k // BLOCK, column_bytes(fmt, colstep), scale_step, colstep // fmt.group)


def group_pointers(lw, cols: Columns, fmt, g: str, lanes: int) -> tuple[str, str, str | None, tuple[str, ...]]:
    """Group g's first column's pointers into B's arrays: its values, scales and zero points (the latter None
    where B has none; the scales' name is declared only where B has scales), and each declared array's pointer
    to the group's last column, in extra_arrays' order (step_slots' ``last``)."""
    bg, sg, zg = lw.fresh("bg"), lw.fresh("sg"), lw.fresh("zg") if fmt.zero else None
    lw.emit(f"const uint8_t* {bg} = {cols.bq} + {g} * {lanes * cols.col_bytes};")
    last = (f"{bg} + {(lanes - 1) * cols.col_bytes}",)
    if fmt.scales:
        lw.emit(f"const uint8_t* {sg} = {cols.sq} + {g} * {lanes * cols.scale_step};")
        last += (f"{sg} + {(lanes - 1) * cols.scale_step}",)
    if zg:
        lw.emit(f"const uint8_t* {zg} = {cols.zq} + {g} * {lanes * cols.zero_step};")
        last += (f"{zg} + {(lanes - 1) * cols.zero_step}",)
    return bg, sg, zg, last


def group_jumps(lw, jumps, g: str, groups: int) -> tuple[str, ...]:
    """The group's jumps of step_slots: the kernel's for its last group (whose next columns are the kernel's
    next ones: Lowerer.kernel_streams), none for the others (the next group's columns are adjacent)."""
    if not jumps:
        return ()
    names = tuple(lw.fresh("gj") for _ in jumps)
    for name, jump in zip(names, jumps):
        lw.emit(f"const std::ptrdiff_t {name} = {g} + 1 == {groups} ? {jump} : 0;")
        lw.emit(f"(void){name};")  # an array whose stream has no line to prefetch a step
    return names


class _Ctx:
    """What a step's statements refer to (names of the prologue's variables)."""

    def __init__(self, fmt, k, aps, accs, corr, blocks, bg, sg, col_bytes, scale_step):
        self.fmt, self.k, self.aps, self.accs, self.corr, self.blocks = fmt, k, aps, accs, corr, blocks
        self.bg, self.sg, self.col_bytes, self.scale_step = bg, sg, col_bytes, scale_step
        self.channel = None  # per-channel scales: the group's vector
        self.pair = None  # group-32 16-bit scales: the step's dword of both blocks' scales
        self.evens_odds = None  # i4: the name of A's copy, each block's qa evens then odds
        self.qsum = None  # zero points: the table of each row's and block's sum qa (f32)
        self.zg = None  # zero points: the group's first column's
        self.zchannel = None  # per-channel zero points: the group's vector
        self.znext = None  # zero points: block blk + 1's, where block blk's gather brought them


def offsets(lw, aps, blocks: int, offset: int, corr: str | None, qsum: str | None) -> None:
    """Per row and block -offset * sum qa (corr, unless None), where the block's sums of qa * (weight + offset)
    start; with zero points also sum qa as f32 (qsum)."""
    if corr:
        lw.emit(f"alignas(64) int32_t {corr}[{len(aps) * blocks}];")
    if qsum:
        lw.emit(f"alignas(64) float {qsum}[{len(aps) * blocks}];")
    i, q, s, e = (lw.fresh(x) for x in ("i", "q", "s", "e"))
    for r, ap in enumerate(aps):
        lw.open(f"for (ix {i} = 0; {i} < {blocks}; ++{i}) {{")
        lw.emit(f"const int8_t* {q} = reinterpret_cast<const int8_t*>({ap} + {i} * {UNIT} + 4);")
        lw.emit(f"int32_t {s} = 0;")
        lw.emit(f"for (int {e} = 0; {e} < 32; ++{e}) {s} += {q}[{e}];")
        if corr:
            lw.emit(f"{corr}[{r * blocks} + {i}] = -{offset} * {s};")
        if qsum:
            lw.emit(f"{qsum}[{r * blocks} + {i}] = float({s});")
        lw.close()


def evens_odds(lw, aps, blocks: int) -> str:
    """i4 (value 2i in byte i's low nibble, 2i + 1 in its high one): a copy of A's qa with each block's evens
    first, then its odds, so that a dword of low (high) nibbles meets the dword of A's values it multiplies."""
    ev, i = lw.fresh("evens_odds"), lw.fresh("i")
    idx = ", ".join(str(x) for x in [*range(0, 16, 2), *range(1, 16, 2)] * 2)
    lw.emit(f"alignas(64) uint8_t {ev}[{len(aps) * blocks * BLOCK}];")
    lw.emit(f"const __m256i eo = _mm256_setr_epi8({idx});")
    for r, ap in enumerate(aps):
        lw.open(f"for (ix {i} = 0; {i} < {blocks}; ++{i}) {{")
        q = f"_mm256_loadu_si256(reinterpret_cast<const __m256i*>({ap} + {i} * {UNIT} + 4))"
        # per 128-bit lane its evens then odds; the qwords in order evens, evens, odds, odds
        both = f"_mm256_permute4x64_epi64(_mm256_shuffle_epi8({q}, eo), 0xD8)"
        lw.emit(f"_mm256_storeu_si256(reinterpret_cast<__m256i*>({ev} + ({r * blocks} + {i}) * {BLOCK}), {both});")
        lw.close()
    return ev


def _bytes8(lw, ctx, j: int, blk: str, count: int) -> str:
    """8-bit weights: column j's 64 bytes of blocks blk and blk + 1 (count 1: blk's, the rest zero), + 128."""
    fmt, base = ctx.fmt, f"{ctx.bg} + {j * ctx.col_bytes}"
    if fmt.name == "i8":
        at = f"{base} + {blk} * {BLOCK}"
        raw = f"_mm512_loadu_si512({at})" if count == 2 else f"_mm512_maskz_loadu_epi32(0xFF, {at})"
        return f"_mm512_xor_si512({raw}, flip)"
    lo = f"_mm512_maskz_loadu_epi32(0xFF, {base} + {blk} * {fmt.unit_size} + 2)"  # after ggml's fp16 d
    if count == 1:
        return f"_mm512_xor_si512({lo}, flip)"
    hi = f"_mm256_loadu_si256(reinterpret_cast<const __m256i*>({base} + ({blk} + 1) * {fmt.unit_size} + 2))"
    return f"_mm512_xor_si512(_mm512_maskz_inserti64x4(0xFF, {lo}, {hi}, 1), flip)"


def _packed4(lw, ctx, j: int, blk: str, count: int) -> str:
    """4-bit weights: columns j and j + 8's 16 bytes of nibbles of blocks blk and blk + 1 (count 1: blk's, the
    rest zero), in the 256-bit halves: dwords 0..3 blk's, 4..7 blk + 1's."""
    fmt, halves = ctx.fmt, []
    if fmt.name == "i4":  # a column's blocks are adjacent 16-byte runs
        for col in (j, j + 8):
            at = f"{ctx.bg} + {col * ctx.col_bytes} + {blk} * 16"
            load = (
                "_mm256_loadu_si256(reinterpret_cast<const __m256i*>({}))"
                if count == 2
                else ("_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>({})))")
            )
            halves.append(load.format(at))
        return f"_mm512_maskz_inserti64x4(0xFF, _mm512_castsi256_si512({halves[0]}), {halves[1]}, 1)"
    for col in (j, j + 8):
        at = [f"{ctx.bg} + {col * ctx.col_bytes} + ({blk} + {h}) * {fmt.unit_size} + 2" for h in range(count)]
        lo = f"_mm_loadu_si128(reinterpret_cast<const __m128i*>({at[0]}))"
        hi = f"_mm_loadu_si128(reinterpret_cast<const __m128i*>({at[1]}))" if count == 2 else "_mm_setzero_si128()"
        halves.append(f"_mm256_inserti128_si256(_mm256_castsi128_si256({lo}), {hi}, 1)")
    return f"_mm512_maskz_inserti64x4(0xFF, _mm512_castsi256_si512({halves[0]}), {halves[1]}, 1)"


def _dwords(fmt, h: int) -> list[tuple[int, int]]:
    """(transposed vector, dword of A's block) pairs of block h (0, 1) of a step: i8 and q8_0 hold block h's
    values in dwords 8h..8h+7; q4_0's vector 4h + i its values 4i..4i+3 (low nibbles, kept at 4h + i) and
    16 + 4i.. (high nibbles, at 8 + 4h + i); i4's the same of its copy of A (evens, then odds: _evens_odds)."""
    if fmt.bits == 4:
        return [(4 * h + i, i) for i in range(4)] + [(8 + 4 * h + i, 4 + i) for i in range(4)]
    return [(8 * h + i, i) for i in range(8)]


def _step(lw, ctx, blk: str, count: int, slots) -> None:
    """Blocks blk and blk + 1 (count 2; 1: blk alone) of the group's sixteen columns."""
    unused = "" if count == 2 else "[[maybe_unused]] "
    if ctx.fmt.bits == 4:
        ts = _nibbles(lw, _transpose8(lw, [_packed4(lw, ctx, j, blk, count) for j in range(LANES // 2)]), unused)
    else:
        ts = _transpose16(lw, [_bytes8(lw, ctx, j, blk, count) for j in range(LANES)], unused)
    for h in range(count):
        sb = ctx.channel or _block_scales(lw, ctx, blk, h, count)
        zf = (ctx.zchannel or _block_zeros(lw, ctx, blk, h, count)) if ctx.fmt.zero else None
        sums = [lw.fresh("s") for _ in ctx.aps]
        for r, s in enumerate(sums):
            lw.emit(f"__m512i {s} = _mm512_set1_epi32({ctx.corr}[{r * ctx.blocks} + {blk} + {h}]);")
        for i, (t, d) in enumerate(_dwords(ctx.fmt, h)):
            for r, (s, ap) in enumerate(zip(sums, ctx.aps)):
                word = f"{ap} + ({blk} + {h}) * {UNIT} + {4 + 4 * d}"
                if ctx.evens_odds:
                    word = f"{ctx.evens_odds} + ({r * ctx.blocks} + {blk} + {h}) * {BLOCK} + {4 * d}"
                lw.emit(f"{s} = _mm512_dpbusd_epi32({s}, {ts[t]}, _mm512_set1_epi32(load_i32({word})));")
            if h == 0:
                for stmt in slots[i]:
                    lw.emit(stmt)
        for r, (s, ap, acc) in enumerate(zip(sums, ctx.aps, ctx.accs)):
            sa = f"_mm512_set1_ps({lw.rt}::a8_scale({ap} + ({blk} + {h}) * {UNIT}))"
            sums = f"_mm512_maskz_cvtepi32_ps(0xFFFF, {s})"
            if zf:  # sum (weight + z) qa - z sum qa
                sums = f"_mm512_fnmadd_ps({zf}, _mm512_set1_ps({ctx.qsum}[{r * ctx.blocks} + {blk} + {h}]), {sums})"
            lw.emit(f"{acc} = _mm512_fmadd_ps({sums}, _mm512_mul_ps({sb}, {sa}), {acc});")


def _pairs(lw, names: list[str], op: str, mask: str, x: str, y: str, prefix: str = "") -> None:
    """names[0], names[1] = op's lo and hi forms (op holding {} for lo / hi) of x and y (masked: GCC 12 warns of
    the plain forms' undefined lanes)."""
    for name, half in zip(names, ("lo", "hi")):
        lw.emit(f"{prefix}const __m512i {name} = _mm512_maskz_{op.format(half)}({mask}, {x}, {y});")


def _transpose16(lw, rows: list[str], unused: str) -> list[str]:
    """The 16x16 dword transpose of rows (expressions): new names, result t holding dword t of every row."""
    xs = [lw.fresh("x") for _ in rows]
    for x, row in zip(xs, rows):
        lw.emit(f"const __m512i {x} = {row};")
    t, u, v, w = ([lw.fresh(c) for _ in range(LANES)] for c in "tuvw")
    for i in range(0, LANES, 2):
        _pairs(lw, t[i : i + 2], "unpack{}_epi32", "0xFFFF", xs[i], xs[i + 1])
    for i in range(0, LANES, 4):
        _pairs(lw, [u[i], u[i + 1]], "unpack{}_epi64", "0xFF", t[i], t[i + 2])
        _pairs(lw, [u[i + 2], u[i + 3]], "unpack{}_epi64", "0xFF", t[i + 1], t[i + 3])
    for i in range(4):  # 128-bit chunks: evens, odds of two rows' chunk pairs
        for lo, hi in ((i, i + 4), (i + 8, i + 12)):
            _shuffles(lw, (v[lo], v[hi]), u[lo], u[hi])
        for lo, hi in ((i, i + 8), (i + 4, i + 12)):
            _shuffles(lw, (w[lo], w[hi]), v[lo], v[hi], unused)
    return w


def _shuffles(lw, names, x: str, y: str, prefix: str = "") -> None:
    """names = the even and the odd 128-bit chunks of x then y (shuffle_i32x4 0x88, 0xDD)."""
    for name, imm in zip(names, ("0x88", "0xDD")):
        lw.emit(f"{prefix}const __m512i {name} = _mm512_maskz_shuffle_i32x4(0xFFFF, {x}, {y}, {imm});")


def _transpose8(lw, rows: list[str]) -> list[str]:
    """The 8x8 dword transposes of rows' 256-bit halves (8 expressions): result t holding dword t of every
    row's halves, lane l the l-th half's (rows 0..7 low halves, then their high halves)."""
    xs = [lw.fresh("x") for _ in rows]
    for x, row in zip(xs, rows):
        lw.emit(f"const __m512i {x} = {row};")
    t, u, v = ([lw.fresh(c) for _ in range(8)] for c in "tuv")
    for i in range(0, 8, 2):
        _pairs(lw, t[i : i + 2], "unpack{}_epi32", "0xFFFF", xs[i], xs[i + 1])
    for i in (0, 4):
        _pairs(lw, [u[i], u[i + 1]], "unpack{}_epi64", "0xFF", t[i], t[i + 2])
        _pairs(lw, [u[i + 2], u[i + 3]], "unpack{}_epi64", "0xFF", t[i + 1], t[i + 3])
    for i in range(4):  # qwords: chunk 0 of u[i], of u[i + 4], chunk 2 of both (v[i]); chunks 1 and 3 (v[i + 4])
        for name, idx in ((v[i], "0, 1, 8, 9, 4, 5, 12, 13"), (v[i + 4], "2, 3, 10, 11, 6, 7, 14, 15")):
            pick = f"_mm512_maskz_permutex2var_epi64(0xFF, {u[i]}, _mm512_setr_epi64({idx}), {u[i + 4]})"
            lw.emit(f"const __m512i {name} = {pick};")
    return v


def _nibbles(lw, packed: list[str], unused: str) -> list[str]:
    """The 16 vectors of unsigned bytes of 8 vectors of nibbles: 0..7 the low nibbles, 8..15 the high."""
    lo, hi = [lw.fresh("n") for _ in packed], [lw.fresh("n") for _ in packed]
    for p, a, b in zip(packed, lo, hi):
        lw.emit(f"{unused}const __m512i {a} = _mm512_and_si512({p}, nib);")
        lw.emit(f"{unused}const __m512i {b} = _mm512_and_si512(_mm512_maskz_srli_epi16(0xFFFFFFFF, {p}, 4), nib);")
    return lo + hi


def _block_scales(lw, ctx, blk: str, h: int, count: int) -> str:
    """A variable holding block blk + h's scale of each of the group's columns (a lane each)."""
    fmt, sb = ctx.fmt, lw.fresh("sb")
    if fmt.block:  # ggml: the block's fp16 d, the low half of the dword it starts
        at = f"{ctx.bg} + ({blk} + {h}) * {fmt.unit_size}"
        lw.emit(f"const __m512 {sb} = {_f16(_gather('bix', at))};")
        return sb
    per = fmt.group // BLOCK
    e = f"({blk} + {h}) / {per}" if per > 1 else f"({blk} + {h})"
    if fmt.scales == "f32":
        lw.emit(f"const __m512 {sb} = {_gather('six', f'{ctx.sg} + {e} * 4', ps=True)};")
    elif per == 1 and count == 2:  # blocks blk, blk + 1: one dword, both halves
        if h == 0:
            ctx.pair = lw.fresh("sp")
            lw.emit(f"const __m512i {ctx.pair} = {_gather('six', f'{ctx.sg} + {blk} * 2')};")
        lw.emit(f"const __m512 {sb} = {_half(fmt, ctx.pair, h)};")
    else:  # the dword ending with it (or, for the first group, starting with it): within the column's scales
        d = lw.fresh("sd")
        lw.emit(f"const ix {d}e = {e};")
        lw.emit(f"const __m512i {d} = {_gather('six', f'{ctx.sg} + ({d}e ? {d}e - 1 : 0) * 2')};")
        lw.emit(f"const __m512 {sb} = {d}e ? {_half(fmt, d, 1)} : {_half(fmt, d, 0)};")
    return sb


def _block_zeros(lw, ctx, blk: str, h: int, count: int) -> str:
    """A variable holding block blk + h's zero point of each of the group's columns, as f32 (a lane each),
    from a gather of the dword ending with it (a column's first 4: starting with it); block blk's brings
    blk + 1's where it is the same group (groups of an even number of blocks) or the next byte (of one)."""
    fmt, per = ctx.fmt, ctx.fmt.group // BLOCK
    if h == 1 and ctx.znext:
        return ctx.znext
    both = count == 2 and per == 1  # blk's and blk + 1's bytes: one dword
    e, z = f"({blk} + {h + both}) / {per}" if per > 1 else f"({blk} + {h + both})", lw.fresh("zf")
    lw.emit(f"const ix {z}e = {e}, {z}o = {z}e < 3 ? {z}e : 3;  // the last group; its byte in the dword read")
    lw.emit(f"const __m512i {z}d = {_gather('zix', f'{ctx.zg} + {z}e - {z}o')};")
    names = [f"{z}{i}" for i in range(1 + both)]
    for i, name in enumerate(names):
        lw.emit(f"const __m512 {name} = {_zero_byte(fmt, f'{z}d', f'{z}o - {both - i}')};")
    ctx.znext = names[-1] if count == 2 and (both or per % 2 == 0) else None  # blk is even
    return names[0]


def _zero_byte(fmt, d: str, byte: str) -> str:
    """The f32 value of byte ``byte`` of each dword of d (i8's zero points signed, i4's unsigned)."""
    top = f"_mm512_maskz_sllv_epi32(0xFFFF, {d}, _mm512_set1_epi32(int(24 - 8 * ({byte}))))"
    back = "srai" if fmt.name == "i8" else "srli"
    return f"_mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_{back}_epi32(0xFFFF, {top}, 24))"


def _channel_zeros(fmt, zg: str, zero_step: int) -> str:
    """One zero point per column (group = the kernel's K): the sixteen columns', as f32."""
    ctype = "int8_t" if fmt.name == "i8" else "uint8_t"
    if zero_step == 1:  # adjacent
        load = f"_mm_loadu_si128(reinterpret_cast<const __m128i*>({zg}))"
        widen = "cvtepi8" if fmt.name == "i8" else "cvtepu8"
        return f"_mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_{widen}_epi32(0xFFFF, {load}))"
    values = ", ".join(f"float({ctype}({zg}[{j * zero_step}]))" for j in range(LANES))
    return f"_mm512_setr_ps({values})"


def _gather(index: str, base: str, ps: bool = False) -> str:
    """The 16 dwords (ps: floats) at byte offsets index from base (masked: GCC 12 warns of the plain form)."""
    if ps:
        return f"_mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, {index}, {base}, 1)"
    return f"_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, {index}, {base}, 1)"


def _f16(dwords: str) -> str:
    """The f32 values of the fp16 halves in the low 16 bits of each dword (F16C)."""
    return f"_mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_cvtepi32_epi16(0xFFFF, {dwords}))"


def _half(fmt, v: str, high: int) -> str:
    """The f32 values of the low (0) or high (1) 16 bits of each dword of v (f16 or bf16 scales)."""
    if fmt.scales == "f16":
        return _f16(f"_mm512_maskz_srli_epi32(0xFFFF, {v}, 16)" if high else v)
    if high:
        return f"_mm512_castsi512_ps(_mm512_and_si512({v}, _mm512_set1_epi32(int(0xFFFF0000u))))"
    return f"_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, {v}, 16))"


def _channel_scales(fmt, sg: str, scale_step: int) -> str:
    """Per-channel scales (one per column): the sixteen columns' one scale."""
    if fmt.scales == "f32":
        return _gather("six", sg, ps=True)
    # one 16-bit scale per column: a dword from the last one would pass the array's end; a load each
    words = ", ".join(f"int(load_u16({sg} + {j * scale_step}))" for j in range(LANES))
    return _half(fmt, f"_mm512_setr_epi32({words})", 0)


DOT_INT_COLS16 = KernelDef(
    name="dot_int_cols16",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="aquant=i8 rows x groups of 16 i8 / i4 / q8_0 / q4_0 columns in lanes: a convert and FMA per 16 outputs",
    features=frozenset({"avx512f", "avx512bw", "avx512vnni", "f16c"}),
    vector_regs=_vector_regs,
)
