"""``dot_int4``: ``aquant=i8`` dot products with 4-bit weights (``q4_0``; ``i4`` with or without zero points),
on AVX2 (ir/aquant.py: the semantics; quant_int.py: the general kernels).

Cheaper per block than ``dot_int``'s sign trick, with the same exact integer block sums:

- the nibbles stay unsigned: ``maddubs`` multiplies them (u8, 0..15) by qa (s8), and the offset is taken
  off once per A block for every column, as ``8 * sum qa`` (``maddubs`` of 8s by qa, int16: each lane's
  total stays under 12,000 in magnitude); with zero points (i4 ``zero``: z, 0..15, per group and column)
  the offset is ``z * sum qa``: each row's int16 sums of qa (``maddubs`` of 1s by qa, 4 values a lane, at
  most 508 in magnitude) once per step, times each column's z broadcast to its block's 16-bit lanes
  (``mullo_epi16``: at most 7,620, so a lane's total stays under 15,300);
- two blocks per step in one ymm: their nibbles are masked and shifted in place (no byte unpack), and A's
  two blocks are rearranged once per step for every column to match the weights' order (q4_0: byte j
  holds element j low, j + 16 high, so the 128-bit halves; i4: byte j holds 2j low, 2j + 1 high, so evens
  then odds: 6 shuffles a row against q4_0's 2, so with more rows than half the columns i4's masked nibbles
  are instead interleaved back into q4_0's order, 2 byte unpacks a column, ``nibbles_in_value_order``); the
  two blocks' int16 sums are added, summed to 8 int32 lanes (4 per block), converted and FMA'd with
  ``sa * sb`` of their block (one multiply and one permute per step);
- up to 8 outputs (rows x columns) per kernel (A's rearranged rows shared by its columns, each column's
  nibbles by its rows); each step prefetches the bytes that follow the kernel's
  last column, a share per step dealt out between its columns (quant_int_prefetch.prefetch_slots), so that the
  columns of a ``for n`` loop are read as one stream (without it, several short interleaved streams defeat
  the hardware prefetchers: 2-3x slower from DRAM here).

``dot_int4_vnni``: the same with AVX-512 VNNI's ``vpdpbusd``: per row the offsets as int32 lanes, negated,
once per step; per row and column two ``vpdpbusd`` onto them (the nibbles by A's halves) in place of two
``maddubs``, an add, a sub and a ``madd``. With zero points the row's lanes are -sum qa (``vpdpbusd`` of 1s,
8 values a lane: at most 1,016 in magnitude, so an int16 in the lane's low half, its sign in the high half)
and each output's sums start at ``madd_epi16`` of them by the column's z (in each int32 lane's low half, 0
in the high half): -z * sum qa exactly, one instruction per row and column (``mullo_epi32`` would be two
micro-ops and 10 cycles' latency on Intel; subtracting ``vpdpbusd`` of z's bytes by A's halves, three). With
more than 2 rows, two per column instead: the bytes 16 - z added to the column's nibbles (q + 16 - z, 1..31,
is an unsigned byte for ``vpdpbusd``), and the rows' offsets are 16 * sum qa, as 8 * sum qa without zero
points (1x2048x16384 i4 g32 at M = 4, 4x2 tiles, warm, Intel Xeon: 2.4% faster than the madd). The
same exact integer sums: ``vpdpbusd`` adds the same 4 products a lane in int32, and the int16 sums above
never saturate. ``dot_int4_vnni512`` (quant_int4_zmm.py): this one on zmm, four blocks per step.
``dot_int4_avxvnni``: dot_int4_vnni's code with AVX-VNNI's VEX-encoded ``vpdpbusd`` (avx2_vnni: no AVX-512).
"""

from __future__ import annotations

from dataclasses import replace

from morello_build.ir.aquant import BLOCK, Q8A
from morello_build.synth.cost import Features, lines_read
from morello_build.target.kernels.common import KernelDef
from morello_build.target.kernels.quant_int import block_ptr, dot_applies, dpbusd, prologue, scale_zero
from morello_build.target.kernels.quant_int_prefetch import prefetch_plan, prefetch_slots

MAX_OUTPUTS = 8  # rows x columns per kernel: M = 1 takes 8 columns, M = 4 4 x 2
_EVENS_ODDS = "0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15"


def _applies(op, target, vnni: bool = False) -> bool:
    fmt = op.b.dtype if op.kind == "matmul" else None
    return (
        dot_applies(op, target, max_cols=MAX_OUTPUTS)
        and fmt.name in ("q4_0", "i4")
        and _vector_regs(op, target, vnni) <= target.vector_regs
    )


def _cost(op, target, vnni: bool = False) -> Features:
    """Per pair of blocks: per row, A's two blocks rearranged (shuffles; q4_0 and i4 in value order: 2 permutes; i4:
    2 byte shuffles, 2 unpacks, 2 permutes), their offsets (2 maddubs, an add) and scales (an unpack); per column,
    the nibbles masked (and, shift, and; q4_0: an insert; i4 in value order: 2 unpacks) and the scales converted
    (a move, F16C); per row and column 2 maddubs and a madd, add, sub, convert, the scales' multiply (an FMA
    pipe's), permute and the FMA; zero points: per column the pair's z to 16-bit lanes (a load, a move, a
    broadcast; where a pair can straddle two groups a byte shuffle, and unless groups are 32 values two more
    scalar ops), per row and column a mullo_epi16. The odd last block: per row A's block rearranged (i4: a byte
    shuffle, a permute) and its offsets (a maddubs); per column the nibbles (shift, insert, and; zero points: a
    move and a broadcast); per row and column maddubs, madd, sub, convert, the broadcast of sa * sb and the FMA
    (zero points: a mullo). Prefetches are loads; B is read as one stream (the prefetches make the n columns one
    sequential run). Where registers run out (_vector_regs counts those the loop needs), each value beyond them
    costs a store and two loads a step. VNNI: the offsets' maddubs become dpbusd and their add a sub (the
    negation; the odd block: one more sub a row); per row and column 2 dpbusd and the convert in place of 2
    maddubs, madd, add, sub and convert (the odd block: a dpbusd and the convert); zero points: the z to 32-bit
    lanes as dot_int4's to 16-bit lanes, per row and column a madd in place of the mullo, or with more than 2 rows
    (_zero_width 8) per column 16 - z to bytes (one more scalar op) and its 2 adds to the nibbles, and no madd."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    pairs, per = prefetch_plan(fmt, k, n)
    q4, i4 = fmt.name == "q4_0", fmt.name == "i4"
    in_order = int(nibbles_in_value_order(op))  # i4's rows rearranged as q4_0's, 2 unpacks per column
    z, zsplit = int(fmt.zero), int(fmt.zero and _zero_halves(fmt, k))
    single = blocks % 2  # the odd last block: the same per block, no pairing
    v = int(vnni)
    products = 3 - v  # per row and column and pair: 2 maddubs and a madd, or 2 dpbusd (the odd block: one fewer)
    fold = int(fmt.zero and _zero_width(m, vnni) == 8)  # 16 - z added to each column's nibbles: 2 adds, 1 scalar
    zmul = z - fold  # zero points: per row and column a multiply by z (mullo_epi16, or VNNI's madd_epi16)
    spill = max(0, _vector_regs(op, target, vnni) + 4 * m - target.vector_regs)  # on the stack: a store, 2 loads a step
    feats = Features.of(
        vec_load=pairs * (4 * m + (1 + q4) * n + per + 2 * spill) + single * (2 * m + n),
        vec_store=pairs * spill,
        vec_op=pairs * (m + n * (5 + z + 2 * fold) + (3 - 2 * v) * m * n)
        + single * (v * m + n * (2 + z + fold) + (2 - v) * m * n),
        vec_shuffle=pairs * (m * (3 + 4 * (i4 - in_order)) + n * (q4 + 2 * in_order + (1 + zsplit) * z) + m * n)
        + single * (2 * i4 * m + n * (1 + z) + m * n),
        vec_imul=pairs * (2 * m + (products + zmul) * m * n) + single * (m + (products - 1 + zmul) * m * n),
        vec_fma=(pairs * 2 + single) * m * n,
        scalar_op=(pairs * (3 + z + fold + 2 * (zsplit and fmt.group > BLOCK)) + single * (2 + z + fold)) * n,
        hsum=m * n,
        loop_iter=pairs,
    )
    scale_lines = -(-int(n * k * fmt.scale_bytes) // 64) if not fmt.block else 0
    return feats + lines_read(op.a) + lines_read(op.b) + Features.of(gl_line=scale_lines)


# -- emitter -----------------------------------------------------------------------------------------------
def _emit(lw, node, binds, vnni: bool = False) -> None:
    c, aps, cols, blk = prologue(lw, node, binds, node.name)
    fmt, (_, m, k, n) = binds[1].dtype, node.spec.op.iter_shape
    pairs = prefetch_plan(fmt, k, n)[0]
    accs = [[lw.fresh("acc") for _ in range(n)] for _ in range(m)]
    lw.emit("__m256 " + ", ".join(f"{x} = _mm256_setzero_ps()" for row in accs for x in row) + ";")
    width = _zero_width(m, vnni)
    offs = f"_mm256_set1_epi8({_OFFSET[width] if fmt.zero else 8})"  # sum qa per lane times this
    ones = "" if vnni else " ones16 = _mm256_set1_epi16(1),"  # madd's: vpdpbusd sums to int32 itself
    lw.emit(f"const __m256i m15 = _mm256_set1_epi8(15),{ones} offs = {offs};")
    if fmt.zero and _zero_halves(fmt, k):
        lw.emit(f"const __m256i zspread = _mm256_setr_epi8({_zspread(width)});")
    if fmt.name == "i4" and (not nibbles_in_value_order(node.spec.op) or k // BLOCK % 2):  # A's rows split
        lw.emit(f"const __m256i evens_odds = _mm256_setr_epi8({_EVENS_ODDS}, {_EVENS_ODDS});")
    if pairs:
        lw.emit("const __m256i pair_lanes = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);")
        lw.open(f"for (ix {blk} = 0; {blk} + 1 < {k // BLOCK}; {blk} += 2) {{")
        slots = prefetch_slots(lw, binds[1], cols, k, n, blk, n)
        _pair(lw, fmt, aps, cols, blk, accs, vnni, slots, nibbles_in_value_order(node.spec.op))
        lw.close()
    if k // BLOCK % 2:
        _single(lw, fmt, aps, cols, str(k // BLOCK - 1), accs, vnni)
    for r, row in enumerate(accs):
        for j, acc in enumerate(row):
            h = lw.fresh("h")
            lw.emit(f"__m128 {h} = _mm_add_ps(_mm256_castps256_ps128({acc}), _mm256_extractf128_ps({acc}, 1));")
            lw.emit(f"{h} = _mm_add_ps({h}, _mm_movehl_ps({h}, {h}));")
            lw.emit(f"{h} = _mm_add_ss({h}, _mm_movehdup_ps({h}));")
            lw.emit(f"{lw.elem(c, (0, r, j))} += _mm_cvtss_f32({h});")
    lw.close()


def _load(p: str, bits: int = 256) -> str:
    return f"_mm{bits if bits > 128 else ''}_loadu_si{bits}(reinterpret_cast<const __m{bits}i*>({p}))"


def _pair(lw, fmt, aps, cols, blk: str, accs, vnni: bool, prefetches, in_order: bool) -> None:
    """Blocks blk and blk + 1: A's rows rearranged to the weights' order (in_order: i4's nibbles put in q4_0's
    order instead), then every column and row, each column followed by its slot of the following columns'
    prefetches (prefetch_slots)."""
    rows, dp = [], dpbusd(lw.target)
    for ap in aps:
        x0, x1, lo, hi, corr, sa = (lw.fresh(s) for s in ("x", "x", "alo", "ahi", "corr", "sa"))
        a0 = f"{ap} + {blk} * {Q8A.unit_size}"
        lw.emit(f"const __m256i {x0} = {_load(f'{a0} + 4')}, {x1} = {_load(f'{a0} + {Q8A.unit_size + 4}')};")
        if fmt.name == "q4_0" or in_order:  # halves: elements 0..15 of both blocks, then 16..31 of both
            lw.emit(f"const __m256i {lo} = _mm256_permute2x128_si256({x0}, {x1}, 0x20);")
            lw.emit(f"const __m256i {hi} = _mm256_permute2x128_si256({x0}, {x1}, 0x31);")
        else:  # even elements of both blocks, then odd ones
            lw.emit(f"const __m256i {x0}s = _mm256_shuffle_epi8({x0}, evens_odds);")
            lw.emit(f"const __m256i {x1}s = _mm256_shuffle_epi8({x1}, evens_odds);")
            lw.emit(f"const __m256i {lo} = _mm256_permute4x64_epi64(_mm256_unpacklo_epi64({x0}s, {x1}s), 0xD8);")
            lw.emit(f"const __m256i {hi} = _mm256_permute4x64_epi64(_mm256_unpackhi_epi64({x0}s, {x1}s), 0xD8);")
        if vnni:  # -offs * sum qa (_OFFSET), 4 values a lane, as int32: where each output's sums start
            both = f"{dp}({dp}(_mm256_setzero_si256(), offs, {lo}), offs, {hi})"
            lw.emit(f"const __m256i {corr} = _mm256_sub_epi32(_mm256_setzero_si256(), {both});")
        else:
            lw.emit(
                f"const __m256i {corr} = _mm256_add_epi16(_mm256_maddubs_epi16(offs, {lo}), "
                f"_mm256_maddubs_epi16(offs, {hi}));"
            )
        lw.emit(
            f"const __m128 {sa} = _mm_unpacklo_ps(_mm_load_ss(reinterpret_cast<const float*>({a0})), "
            f"_mm_load_ss(reinterpret_cast<const float*>({a0} + {Q8A.unit_size})));"
        )
        rows.append((lo, hi, corr, sa))
    width = _zero_width(len(aps), vnni)
    for j, col in enumerate(cols):
        v, lo, hi, sb = (lw.fresh(s) for s in ("v", "lo", "hi", "sb"))
        p0, p1 = block_ptr(fmt, col[0], blk), block_ptr(fmt, col[0], f"({blk} + 1)")
        if fmt.name == "q4_0":
            x = f"_mm256_castsi128_si256({_load(f'{p0} + 2', 128)})"
            lw.emit(f"const __m256i {v} = _mm256_inserti128_si256({x}, {_load(f'{p1} + 2', 128)}, 1);")
        else:  # the two blocks' bytes are adjacent
            lw.emit(f"const __m256i {v} = {_load(p0)};")
        zc = _zero_pair(lw, fmt, col, blk, width) if width == 8 else None  # 16 - z, added to the nibbles
        lw.emit(f"const __m256i {lo} = {_plus(f'_mm256_and_si256({v}, m15)', zc)};")
        lw.emit(f"const __m256i {hi} = {_plus(f'_mm256_and_si256(_mm256_srli_epi16({v}, 4), m15)', zc)};")
        if in_order:  # per block (128-bit half), evens and odds interleaved: values 0..15, then 16..31
            lo, hi = _interleaved(lw, lo, hi)
        lw.emit(f"const __m128 {sb} = {_scale_pair(lw, fmt, col, blk)};")
        zv = _zero_pair(lw, fmt, col, blk, width) if width > 8 else None
        for r, (alo, ahi, corr, sa) in enumerate(rows):
            s = lw.fresh("s")
            if vnni:  # int32 sums, the offsets' lanes first
                sums = f"{dp}({dp}({_vnni_base(corr, zv)}, {lo}, {alo}), {hi}, {ahi})"
            else:
                lw.emit(
                    f"const __m256i {s} = _mm256_sub_epi16(_mm256_add_epi16(_mm256_maddubs_epi16({lo}, {alo}), "
                    f"_mm256_maddubs_epi16({hi}, {ahi})), {_offset(corr, zv)});"
                )
                sums = f"_mm256_madd_epi16({s}, ones16)"
            scale = f"_mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps({sa}, {sb})), pair_lanes)"
            acc = accs[r][j]
            lw.emit(f"{acc} = _mm256_fmadd_ps(_mm256_cvtepi32_ps({sums}), {scale}, {acc});")
        for stmt in prefetches[j]:
            lw.emit(stmt)


def nibbles_in_value_order(op) -> bool:
    """Whether i4's masked nibbles are interleaved back into value order (2 byte unpacks per column and step)
    rather than A's rows split into evens and odds (4 more shuffles per row and step than q4_0's): with more
    rows than half the columns. The zmm kernel (quant_int4_zmm.py) chooses by the same rule."""
    _, m, _, n = op.iter_shape
    return op.b.dtype.name == "i4" and 2 * n < 4 * m


def _interleaved(lw, evens: str, odds: str) -> tuple[str, str]:
    """Per 128-bit lane (a block), its 16 evens and 16 odds as values 0..15 and 16..31."""
    lo, hi = lw.fresh("vlo"), lw.fresh("vhi")
    lw.emit(f"const __m256i {lo} = _mm256_unpacklo_epi8({evens}, {odds});")
    lw.emit(f"const __m256i {hi} = _mm256_unpackhi_epi8({evens}, {odds});")
    return lo, hi


def _offset(corr: str, zv: str | None) -> str:
    """The int16 lanes to take off: 8 * sum qa as is, or sum qa times the column's zero points."""
    return f"_mm256_mullo_epi16({corr}, {zv})" if zv else corr


def _vnni_base(corr: str, zv: str | None) -> str:
    """The int32 lanes a VNNI output's sums start at: the row's offsets as they are (-8 or -16 * sum qa), or
    -sum qa (at most 8 * 127 in magnitude: its low 16 bits, the high ones its sign) times the column's z (in
    the low 16 bits, the high ones 0) by madd_epi16, exactly (one uop; mullo_epi32 is two)."""
    return f"_mm256_madd_epi16({corr}, {zv})" if zv else corr


def _zero_width(m: int, vnni: bool) -> int:
    """How zero points are taken off, by the bits of the lanes that hold them: 16, mullo_epi16 of each row's
    int16 sums of qa by z (dot_int4); 32, madd_epi16 of each row's -sum qa by z, one per row and column
    (dot_int4_vnni); 8, bytes 16 - z added to each column's nibbles (q + 16 - z: 1..31, an unsigned byte),
    two per column, the rows' offsets 16 * sum qa (dot_int4_vnni with more than 2 rows)."""
    return 16 if not vnni else 8 if m > 2 else 32


_OFFSET = {16: 1, 32: 1, 8: 16}  # offs by _zero_width with zero points (without: 8): the offsets are offs * sum qa


def _plus(x: str, zc: str | None) -> str:
    """Nibbles (a vector expression) plus the bytes 16 - z where zero points are taken off there (zc)."""
    return f"_mm256_add_epi8({x}, {zc})" if zc else x


def _zspread(width: int) -> str:
    """pshufb's mask taking byte 0 to the low half's ``width``-bit lanes, byte 1 to the high half's, zero-extended."""
    lane = width // 8
    return ", ".join(", ".join([str(b)] + ["-128"] * (lane - 1)) for b in (0, 1) for _ in range(16 // lane))


def _zero_halves(fmt, k: int) -> bool:
    """Whether a pair of blocks can straddle two groups (so two zero points per step, not one)."""
    return fmt.group // BLOCK % 2 == 1 and k // BLOCK > 1


def _zero_pair(lw, fmt, col, blk: str, width: int = 16) -> str | None:
    """A variable holding the zero point of block blk in the low half's ``width``-bit lanes, blk + 1's in the
    high half (one broadcast where a group spans both), or None without zero points; width 8: 16 - z."""
    if not fmt.zero:
        return None
    zp, per, zv = col[2], fmt.group // BLOCK, lw.fresh("zv")
    g0, g1 = (f"({b}) / {per}" if per > 1 else b for b in (blk, f"{blk} + 1"))
    if per % 2 == 0:  # pairs start at even blocks: both in one group
        lw.emit(f"const __m256i {zv} = {_zero_lanes(f'{zp}[{g0}]', width)};")
        return zv
    if per == 1:  # the two blocks' zero points are adjacent bytes: one 16-bit load
        bits = f"[&] {{ uint16_t z; std::memcpy(&z, {zp} + {blk}, 2); return short(z); }}()"
    else:
        bits = f"short({zp}[{g0}] | {zp}[{g1}] << 8)"
    if width == 8:  # each byte 16 - z (z < 16: no borrow)
        bits = f"short(0x1010 - {bits})"
    lw.emit(f"const __m256i {zv} = _mm256_shuffle_epi8(_mm256_set1_epi16({bits}), zspread);")
    return zv


def _zero_lanes(z: str, width: int) -> str:
    """A zero point (a C expression) in every ``width``-bit lane (8: 16 - z in every byte)."""
    if width == 8:
        return f"_mm256_set1_epi8(char(16 - {z}))"
    return f"_mm256_set1_epi16(short({z}))" if width == 16 else f"_mm256_set1_epi32(int({z}))"


def _scale_pair(lw, fmt, col, blk: str) -> str:
    """(sb of block blk, sb of blk + 1, 0, 0): two halves converted at once where the scales are fp16."""
    bp, sp, _ = col
    if fmt.block:  # ggml's d, first in each block
        halves = [
            f"[&] {{ uint16_t d; std::memcpy(&d, {block_ptr(fmt, bp, b)}, 2); return d; }}()"
            for b in (blk, f"({blk} + 1)")
        ]
    elif fmt.scales == "f16":
        g = [f"({b}) / {fmt.group // BLOCK}" if fmt.group > BLOCK else b for b in (blk, f"{blk} + 1")]
        halves = [f"{sp}[{x}]" for x in g]
    else:
        s0, s1 = (scale_zero(lw, fmt, col, b, f16c=True)[0] for b in (blk, f"({blk} + 1)"))
        return f"_mm_setr_ps({s0}, {s1}, 0.0f, 0.0f)"
    bits = f"int(uint32_t({halves[0]}) | uint32_t({halves[1]}) << 16)"
    return f"_mm_cvtph_ps(_mm_cvtsi32_si128({bits}))"


def _single(lw, fmt, aps, cols, blk: str, accs, vnni: bool) -> None:
    """The odd last block: A's row rearranged to the nibbles' order (q4_0: as stored; i4: evens, odds)."""
    lw.open("{")
    rows, dp = [], dpbusd(lw.target)
    for ap in aps:
        a, corr, sa = lw.fresh("a"), lw.fresh("corr"), lw.fresh("sa")
        x = _load(f"{ap} + {blk} * {Q8A.unit_size} + 4")
        if fmt.name == "i4":
            x = f"_mm256_permute4x64_epi64(_mm256_shuffle_epi8({x}, evens_odds), 0xD8)"
        lw.emit(f"const __m256i {a} = {x};")
        if vnni:  # -offs * sum qa (_OFFSET) as int32 lanes
            lw.emit(
                f"const __m256i {corr} = _mm256_sub_epi32(_mm256_setzero_si256(), "
                f"{dp}(_mm256_setzero_si256(), offs, {a}));"
            )
        else:
            lw.emit(f"const __m256i {corr} = _mm256_maddubs_epi16(offs, {a});")
        lw.emit(f"const float {sa} = {lw.rt}::a8_scale({ap} + {blk} * {Q8A.unit_size});")
        rows.append((a, corr, sa))
    width = _zero_width(len(aps), vnni)
    for j, col in enumerate(cols):
        x, v = lw.fresh("x"), lw.fresh("v")
        p = block_ptr(fmt, col[0], blk) + (" + 2" if fmt.block else "")
        lw.emit(f"const __m128i {x} = {_load(p, 128)};")
        zv, zc = None, None
        sb, z = scale_zero(lw, fmt, col, blk, f16c=True)
        if fmt.zero and width == 8:  # 16 - z, added to the nibbles
            zc = lw.fresh("zc")
            lw.emit(f"const __m256i {zc} = {_zero_lanes(z, width)};")
        nibbles = f"_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16({x}, 4), {x}), m15)"
        lw.emit(f"const __m256i {v} = {_plus(nibbles, zc)};")
        if fmt.zero and width > 8:
            zv = lw.fresh("zv")
            lw.emit(f"const __m256i {zv} = {_zero_lanes(z, width)};")
        for r, (a, corr, sa) in enumerate(rows):
            s, acc = lw.fresh("s"), accs[r][j]
            if vnni:
                sums = f"{dp}({_vnni_base(corr, zv)}, {v}, {a})"
            else:
                lw.emit(f"const __m256i {s} = _mm256_sub_epi16(_mm256_maddubs_epi16({v}, {a}), {_offset(corr, zv)});")
                sums = f"_mm256_madd_epi16({s}, ones16)"
            lw.emit(f"{acc} = _mm256_fmadd_ps(_mm256_cvtepi32_ps({sums}), _mm256_set1_ps({sa} * ({sb})), {acc});")
    lw.close()


def _vector_regs(op, target, vnni: bool = False) -> int:
    _, m, _, n = op.iter_shape
    # accumulators, the constants (m15, offs and, but for VNNI, madd's ones16) and 4 temporaries (A's
    # per-row halves, offsets and scales can live on the stack: memory operands, priced in _cost); zero
    # points: one more temporary (a column's)
    return m * n + 3 - int(vnni) + 4 + int(op.b.dtype.zero)


DOT_INT4 = KernelDef(
    name="dot_int4",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="aquant=i8 dot products with q4_0 / i4: unsigned nibbles, offsets per A block, two blocks a step, prefetched",
    features=frozenset({"avx2", "f16c"}),
    vector_regs=_vector_regs,
)
DOT_INT4_VNNI = KernelDef(
    name="dot_int4_vnni",
    kind="matmul",
    vector=True,
    applies=lambda op, target: _applies(op, target, vnni=True),
    cost=lambda op, target: _cost(op, target, vnni=True),
    emit=lambda lw, node, binds: _emit(lw, node, binds, vnni=True),
    doc="dot_int4 with AVX-512 VNNI's vpdpbusd (on ymm, AVX512VL) in place of maddubs and madd, zero points included",
    features=frozenset({"avx512vnni", "avx512vl", "f16c"}),
    vector_regs=lambda op, target: _vector_regs(op, target, vnni=True),
)
DOT_INT4_AVXVNNI = replace(
    DOT_INT4_VNNI,
    name="dot_int4_avxvnni",
    doc="dot_int4_vnni's code with AVX-VNNI's vpdpbusd (VEX, on CPUs without AVX-512)",
    features=frozenset({"avxvnni", "avx2", "f16c"}),
)
