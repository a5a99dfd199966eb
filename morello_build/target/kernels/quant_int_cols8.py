"""``dot_int_cols8``: ``aquant=i8`` products of a few rows of A with 4-bit weights (``q4_0``, ``i4`` with or without
zero points) eight columns at a time, one column per int32 lane of a ymm: AVX2's form of ``dot_int_cols16``
(quant_int_cols.py) for small batches (M = 2..4).

``dot_int4`` (quant_int4.py) gives each output (row, column) its own vector: per pair of blocks two ``maddubs``,
a ``madd``, an add, a sub, a convert, a permute and the FMA. Here each block of an 8-column group is loaded as
the columns' 16 bytes (two columns to a ymm, 4 loads), transposed so that vector d holds every column's dword d
(a 4x4 dword transpose in each 128-bit lane: 8 unpacks), and split into low and high nibbles (and, shift, and):
those are unsigned bytes that every row shares. Per row and block eight ``maddubs`` by A's dwords broadcast
(q4_0's byte i holds values i and i + 16, so dword d's low nibbles meet A's dword d and its high ones dword
4 + d; i4's holds 2i and 2i + 1, so the kernel reads a copy of A with each block's evens first, then its odds,
made once per call on the stack), added in int16 (a lane's sum of 8 pairs stays under 8 x 2 x 15 x 127 =
30,480: no saturation; by ``adds``, which GCC does not reassociate: the plain adds it regrouped into a tree of
all 32 products at once, spilling them), then ONE ``madd`` to int32, the offset (-8 sum qa, per row and block,
computed once per call), a convert, the scales' multiply and an FMA for eight outputs. With zero points (i4's
uint8 z per group and column) the sums start at 0 and each block's converted sums lose z x sum qa by one FMA per
row (exact: both are integers below 2^21), z read per block like a scale, or once per group of columns when
per-channel.

Scales: per block the eight columns' (q4_0: each block's fp16 d) by scalar loads put together in an xmm, then
converted (F16C, or a shift for bf16; an AVX2 gather of them ran the kernel 1.2-1.3x slower on Zen 3);
per-channel scales once per group of columns. C is in memory, each row's columns dense: the kernel adds its
sums to it per group (it accumulates: the search zeroes C first). B's next group is prefetched into L2 over a
group's blocks (quant_int_prefetch.step_slots), so the group loop reads B as one stream.

``dot_int_cols8_avxvnni`` (avx2_vnni: AVX-VNNI without AVX-512) is the same kernel with ``vpdpbusd`` (VEX): per
row and block 8 of them onto one int32 sum in place of the 8 ``maddubs``, the 7 adds and the ``madd``. Not
measured: no AVX-VNNI CPU was at hand (tests run it with the instruction emulated); priced by the same features.

Registers: the 4 transposed vectors, a nibble vector, A's dword, per row an int16 sum and an accumulator:
2 M + 6 of AVX2's 16, so at most 4 rows (the constants are memory operands).

Measured on Zen 3 (AMD EPYC, family 25 model 1), 1 thread, scripts/kernel_ab.py against dot_int4 (the search's
tiles, 2 x 4): from DRAM 4x2048x16384 q4_0 4379 us vs 6556, i4 g32 3598 vs 6198, 3x2560x10240 q4_0 2379 vs
3899, 2x2048x16384 q4_0 2895 vs 3057, 4x2048x16384 i4 g32 with zero points 3816 vs dot_int 4x1 (the search's
pick without this kernel) 6577; warm (4x2048x128) 0.63x. M = 1 is left to dot_int4: warm 0.71x its time,
but from DRAM 1.13x (1x2048x16384 q4_0: 2672 vs 2370 us; the eight columns' interleaved streams, not established).
"""

from __future__ import annotations

from dataclasses import replace

from morello_build.ir.aquant import BLOCK, Q8A
from morello_build.ir.formats import SCALE_DTYPES
from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_read
from morello_build.target.kernels.common import KernelDef
from morello_build.target.kernels.quant_int import dpbusd
from morello_build.target.kernels.quant_int_cols import (
    columns_apply,
    evens_odds,
    group_jumps,
    group_pointers,
    offsets,
    open_columns,
    per_channel,
)
from morello_build.target.kernels.quant_int_prefetch import prefetch_plan, step_slots

LANES = 8  # columns per group: one per int32 lane of a ymm
MAX_ROWS = 4  # _vector_regs: 2 M + 6 of 16 ymm
UNIT = Q8A.unit_size  # bytes of one A block (36: f32 sa, 32 qa)
FORMATS = ("q4_0", "i4")
SLOTS = 4  # prefetch points a block: after each transposed vector's products


def _applies(op, target) -> bool:
    # M = 1 from DRAM: 1.13x dot_int4 1x4's time (Zen 3, 1x2048x16384 q4_0): from 2 rows
    return columns_apply(op, LANES, MAX_ROWS, FORMATS) and _vector_regs(op, target) <= target.vector_regs


def _vector_regs(op, target) -> int:
    return 2 * op.iter_shape[1] + 6


def _cost(op, target, vnni: bool = False) -> Features:
    """Per group and block: the columns' 8 loads (4 of them inserts: a shuffle each) and 8 unpacks, the nibbles
    (and, shift, and per transposed vector), the scales (8 scalar loads and inserts, the conversion); per row
    and block 8 broadcasts of A's dwords, 8 ``maddubs`` and a ``madd`` (the integer
    multipliers), 7 adds, the offset's broadcast and add, the convert, sa's broadcast, the scales' multiply and
    the FMA; per group and row C's load, add and store; the prefetches; per call the offsets (a scalar op per 8
    of A's values) and i4's copy of A (a load, 2 shuffles and a store a block). Zero points: per block their 8
    loads, inserts and 2 converts (as the scales); per row and block sum qa's broadcast and an FMA in place of the
    offset's broadcast and add. ``vnni``: per row and block 8 ``vpdpbusd`` onto one int32 sum in place of the
    ``maddubs``, the 7 adds and the ``madd``."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks, groups = k // BLOCK, n // LANES
    i4 = fmt.name == "i4"
    scales = 0 if per_channel(fmt, k) else blocks  # per block: 8 loads, 8 inserts and the conversion
    z = int(fmt.zero)
    zeros = z * scales  # the same, but two converts
    full, per = prefetch_plan(fmt, k, LANES, steps=blocks)
    feats = Features.of(
        vec_load=groups * (blocks * (8 + m * 10) + (scales + zeros) * LANES + full * per + m) + i4 * m * blocks,
        vec_store=groups * m + i4 * m * blocks,
        vec_op=groups * (blocks * (12 + m * (9 - z - 7 * vnni)) + m),
        vec_shuffle=groups * (blocks * 12 + scales * (LANES + 1) + zeros * (LANES + 2)) + 2 * i4 * m * blocks,
        vec_imul=groups * blocks * m * (9 - vnni),
        vec_fma=groups * blocks * m * (2 + z),  # the scales' multiply and the FMA (zero points: one more)
        scalar_op=m * k // 8,  # the offsets
        loop_iter=groups * blocks,
    )
    scale_lines = -(-int(n * k * fmt.scale_bytes) // 64) if op.b.level == Level.GL else 0
    return feats + lines_read(op.a) + lines_read(op.b) + Features.of(gl_line=scale_lines) + lines_read(op.c)


# -- emitter -----------------------------------------------------------------------------------------------
def _emit(lw, node, binds, vnni: bool = False) -> None:
    b = binds[1]
    fmt, (_, m, k, n) = b.dtype, node.spec.op.iter_shape
    cols = open_columns(lw, node.name, binds, (m, k, n), LANES)
    aps, cps = cols.aps, cols.cps
    blocks, col_bytes, scale_step, zero_step = cols.blocks, cols.col_bytes, cols.scale_step, cols.zero_step
    corr = lw.fresh("offs")
    channel = per_channel(fmt, k)
    lw.emit("auto load_i32 = [](const uint8_t* p) { int32_t w; std::memcpy(&w, p, 4); return w; };")
    if fmt.scales == "f32":
        lw.emit("auto load_f32 = [](const uint8_t* p) { float w; std::memcpy(&w, p, 4); return w; };")
    else:
        lw.emit("auto load_u16 = [](const uint8_t* p) { uint16_t w; std::memcpy(&w, p, 2); return w; };")
    qsum = lw.fresh("qsum") if fmt.zero else None
    offsets(lw, aps, blocks, 8, None if fmt.zero else corr, qsum)
    a_copy = evens_odds(lw, aps, blocks) if fmt.name == "i4" else None
    ones = "" if vnni else ", ones16 = _mm256_set1_epi16(1)"  # madd's multiplier (vpdpbusd sums in int32)
    lw.emit(f"const __m256i nib = _mm256_set1_epi8(0x0F){ones};")
    g, blk = lw.fresh("g"), lw.fresh("blk")
    lw.open(f"for (ix {g} = 0; {g} < {n // LANES}; ++{g}) {{")
    bg, sg, zg, last = group_pointers(lw, cols, fmt, g, LANES)
    accs = [lw.fresh("acc") for _ in range(m)]
    lw.emit("__m256 " + ", ".join(f"{x} = _mm256_setzero_ps()" for x in accs) + ";")
    sbc = zc = None
    if channel:
        sbc, zc = lw.fresh("sbc"), lw.fresh("zc") if fmt.zero else None
        lw.emit(f"const __m256 {sbc} = {_scales_at(fmt.scales, [f'{sg} + {j * scale_step}' for j in range(LANES)])};")
        if zc:
            lw.emit(f"const __m256 {zc} = {_zeros_at([f'{zg} + {j * zero_step}' for j in range(LANES)])};")
    jumps = group_jumps(lw, lw.stream_jumps(b), g, n // LANES)
    lw.open(f"for (ix {blk} = 0; {blk} < {blocks}; ++{blk}) {{")
    slots = step_slots(lw, b, last, k, LANES, blk, blocks, SLOTS, jumps)
    ts = _transposed(lw, fmt, bg, col_bytes, blk)
    sums = [lw.fresh("s") for _ in aps]
    for d, t in enumerate(ts):
        lo, hi = lw.fresh("lo"), lw.fresh("hi")
        lw.emit(f"const __m256i {lo} = _mm256_and_si256({t}, nib);")
        lw.emit(f"const __m256i {hi} = _mm256_and_si256(_mm256_srli_epi16({t}, 4), nib);")
        for r, (s, ap) in enumerate(zip(sums, aps)):
            words = [f"{ap} + {blk} * {UNIT} + {4 + 4 * x}" for x in (d, 4 + d)]
            if a_copy:
                words = [f"{a_copy} + ({r * blocks} + {blk}) * {BLOCK} + {4 * x}" for x in (d, 4 + d)]
            a0, a1 = (f"_mm256_set1_epi32(load_i32({w}))" for w in words)
            if vnni:  # onto int32 sums: no saturation, no madd
                dp, start = dpbusd(lw.target), "_mm256_setzero_si256()" if d == 0 else s
                both = f"{dp}({dp}({start}, {lo}, {a0}), {hi}, {a1})"
            else:
                both = f"_mm256_adds_epi16(_mm256_maddubs_epi16({lo}, {a0}), _mm256_maddubs_epi16({hi}, {a1}))"
                both = both if d == 0 else f"_mm256_adds_epi16({s}, {both})"
            lw.emit(f"__m256i {s} = {both};" if d == 0 else f"{s} = {both};")
        for stmt in slots[d]:
            lw.emit(stmt)
    sb = sbc or _block_scales(lw, fmt, bg, sg, blk, col_bytes, scale_step)
    zf = (zc or _block_zeros(lw, fmt, zg, blk, zero_step)) if fmt.zero else None
    for r, (s, ap, acc) in enumerate(zip(sums, aps, accs)):
        at = f"{r * blocks} + {blk}"
        i32 = s if vnni else f"_mm256_madd_epi16({s}, ones16)"
        if not fmt.zero:
            i32 = f"_mm256_add_epi32({i32}, _mm256_set1_epi32({corr}[{at}]))"
        total = f"_mm256_cvtepi32_ps({i32})"
        if zf:  # sum (weight + z) qa - z sum qa
            total = f"_mm256_fnmadd_ps({zf}, _mm256_set1_ps({qsum}[{at}]), {total})"
        sa = f"_mm256_set1_ps({lw.rt}::a8_scale({ap} + {blk} * {UNIT}))"
        lw.emit(f"{acc} = _mm256_fmadd_ps({total}, _mm256_mul_ps({sb}, {sa}), {acc});")
    lw.close()
    for cp, acc in zip(cps, accs):
        at = f"{cp} + {g} * {LANES}"
        lw.emit(f"_mm256_storeu_ps({at}, _mm256_add_ps(_mm256_loadu_ps({at}), {acc}));")
    lw.close()
    lw.close()


def _transposed(lw, fmt, bg: str, col_bytes: int, blk: str) -> list[str]:
    """Block blk of the group's eight columns as 4 vectors, vector d holding each column's dword d (lane j column
    j): columns j and j + 4 loaded into a ymm's halves, then a 4x4 dword transpose in each 128-bit lane."""
    xs = [lw.fresh("x") for _ in range(4)]
    unit, skip = (fmt.unit_size, 2) if fmt.block else (16, 0)  # ggml's fp16 d before the block's 16 bytes
    for j, x in enumerate(xs):
        lo, hi = (_load128(f"{bg} + {col * col_bytes} + {blk} * {unit} + {skip}") for col in (j, j + 4))
        lw.emit(f"const __m256i {x} = _mm256_inserti128_si256(_mm256_castsi128_si256({lo}), {hi}, 1);")
    t = [lw.fresh("t") for _ in range(4)]
    for i, (op, p, q) in enumerate(
        (("unpacklo_epi32", 0, 1), ("unpackhi_epi32", 0, 1), ("unpacklo_epi32", 2, 3), ("unpackhi_epi32", 2, 3))
    ):
        lw.emit(f"const __m256i {t[i]} = _mm256_{op}({xs[p]}, {xs[q]});")
    v = [lw.fresh("v") for _ in range(4)]
    for i, (op, p, q) in enumerate(
        (("unpacklo_epi64", 0, 2), ("unpackhi_epi64", 0, 2), ("unpacklo_epi64", 1, 3), ("unpackhi_epi64", 1, 3))
    ):
        lw.emit(f"const __m256i {v[i]} = _mm256_{op}({t[p]}, {t[q]});")
    return v


def _load128(p: str) -> str:
    return f"_mm_loadu_si128(reinterpret_cast<const __m128i*>({p}))"


def _block_scales(lw, fmt, bg: str, sg: str, blk: str, col_bytes: int, scale_step: int) -> str:
    """A variable holding block blk's scale of each of the group's columns (a lane each): eight scalar loads
    (an AVX2 gather of them ran the kernel 1.2-1.3x slower, warm, on Zen 3)."""
    sb = lw.fresh("sb")
    if fmt.block:  # ggml: the block's fp16 d, first in the block
        ats = [f"{bg} + {j * col_bytes} + {blk} * {fmt.unit_size}" for j in range(LANES)]
        lw.emit(f"const __m256 {sb} = {_scales_at('f16', ats)};")
        return sb
    per, size = fmt.group // BLOCK, SCALE_DTYPES[fmt.scales][1]
    e = f"{blk} / {per}" if per > 1 else blk
    ats = [f"{sg} + {j * scale_step} + ({e}) * {size}" for j in range(LANES)]
    lw.emit(f"const __m256 {sb} = {_scales_at(fmt.scales, ats)};")
    return sb


def _block_zeros(lw, fmt, zg: str, blk: str, zero_step: int) -> str:
    """A variable holding block blk's zero point of each of the group's columns, as f32 (a lane each)."""
    zf, per = lw.fresh("zf"), fmt.group // BLOCK
    e = f"{blk} / {per}" if per > 1 else blk
    lw.emit(f"const __m256 {zf} = {_zeros_at([f'{zg} + {j * zero_step} + ({e})' for j in range(LANES)])};")
    return zf


def _zeros_at(ats: list[str]) -> str:
    """The eight uint8 zero points at the byte pointers ats, as f32 lanes."""
    halves = f"_mm_setr_epi16({', '.join(f'short(*({at}))' for at in ats)})"
    return f"_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32({halves}))"


def _scales_at(dtype: str, ats: list[str]) -> str:
    """The eight scales (f32, f16 or bf16) at the byte pointers ats, as f32 lanes."""
    if dtype == "f32":
        return f"_mm256_setr_ps({', '.join(f'load_f32({at})' for at in ats)})"
    halves = f"_mm_setr_epi16({', '.join(f'short(load_u16({at}))' for at in ats)})"
    if dtype == "f16":
        return f"_mm256_cvtph_ps({halves})"
    return f"_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32({halves}), 16))"  # bf16


DOT_INT_COLS8 = KernelDef(
    name="dot_int_cols8",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="aquant=i8 rows x groups of 8 q4_0 / i4 columns (zero points too) in lanes (AVX2): a madd, FMA per 8 outputs",
    features=frozenset({"avx2", "f16c"}),
    vector_regs=_vector_regs,
)
DOT_INT_COLS8_AVXVNNI = replace(
    DOT_INT_COLS8,
    name="dot_int_cols8_avxvnni",
    cost=lambda op, target: _cost(op, target, vnni=True),
    emit=lambda lw, node, binds: _emit(lw, node, binds, vnni=True),
    doc="dot_int_cols8 with AVX-VNNI's vpdpbusd (VEX, CPUs without AVX-512) in place of maddubs, adds and madd",
    features=frozenset({"avxvnni", "avx2", "f16c"}),
)
