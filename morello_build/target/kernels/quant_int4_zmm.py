"""``dot_int4_vnni512``: ``dot_int4_vnni`` (quant_int4.py) on zmm, for small batches: four blocks per step, one
per 128-bit lane, the same exact integer block sums.

- A's four Q8A blocks (36 bytes each: f32 sa, 32 qa) are rearranged once per row and step for every column by
  ``vpermt2d`` from two 64-byte loads: lane L holds block L's qa 0..15 (``alo``) or 16..31 (``ahi``); one more
  ``vpermt2ps`` of the first pair of loads puts each block's sa into its lane's four dwords. i4's bytes hold
  values 2j and 2j + 1, so one side is put in the other's order: with more rows than half the columns each
  column's masked nibbles are interleaved back into value order (two byte unpacks), else each row's qa are
  split into evens and odds (a byte shuffle of each half, two unpacks).
- A column's four blocks of nibbles go to the lanes (q4_0: four 16-byte loads, three of them inserted; i4: one
  64-byte load), masked and shifted in place; its four scales to the lanes' dwords (a ``vpermps``).
- Offsets as dot_int4_vnni's with more than 2 rows: per row -offs * sum qa in int32 lanes, offs 8, or with
  zero points 16 with the bytes 16 - z added to the nibbles (q + 16 - z: 1..31, an unsigned byte). Per row
  and column two ``vpdpbusd`` onto them, a convert, the scales' multiply and the FMA.
- The last 1..3 blocks: the same step with masked loads (the absent lanes zero: qa, sa and sb 0).

Why: on a Golden Cove Xeon ``vpdpbusd zmm`` issues 2 per cycle (ports 0 and 5) as the ymm one does (ports 0
and 1), so a zmm does twice the multiply-adds per instruction; a row and column's step (2 ``vpdpbusd``,
convert, multiply, FMA) took 1.7-1.9 cycles for 128 values, dot_int4_vnni's (with its permute) 2.4-2.6 for
64 (microbenchmark, same CPU). Measured (2048x16384, warm, 1 thread, scripts/kernel_ab.py, 21 rounds), against
dot_int4_vnni: q4_0 M = 1, 2, 4, 8: 0.90-0.96, 0.94-0.95, 0.92-0.93, 0.93-0.95 of its time; i4 g32: 0.88-0.91,
0.85-0.87, 0.84-0.87, 0.84-0.85; with zero points 0.90-0.91, 0.89, 0.87-0.88, 0.84-0.86: far from the 2x of
the products alone (the rows' rearranging, the columns' nibbles and scales, the multiply and convert per
output stay; GCC 12 spills accumulators of 4x2 tiles, clang's code of the same header ran 17% faster than
the ymm kernel's, GCC's 5%, from L2). The cost counts the zmm instructions at the prices of their ymm kind (Golden
Cove: vpdpbusd and FMAs 2 a cycle, shuffles port 5 either way; Zen 4 splits a zmm op in two, which the
built-in table does not price for FMAs either).
"""

from __future__ import annotations

from morello_build.ir.aquant import BLOCK, Q8A
from morello_build.synth.cost import Features, lines_read
from morello_build.target.kernels.common import KernelDef
from morello_build.target.kernels.quant_int import block_group, block_ptr, dot_applies, prologue, scale_zero
from morello_build.target.kernels.quant_int4 import nibbles_in_value_order
from morello_build.target.kernels.quant_int_prefetch import prefetch_plan, prefetch_slots

SPAN = 4  # blocks per step: one per 128-bit lane
MAX_OUTPUTS = 8  # rows x columns per kernel
UNIT = Q8A.unit_size  # bytes of one A block (36: nine dwords)
_LOADS = ((0, 72), (20, 80))  # byte offsets in a step's A bytes of the load pairs for alo (and sa), for ahi
_EVENS_ODDS = "0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15"


def _index(first: int, loads: tuple[int, int]) -> str:
    """vpermt2d's index: lane L's dwords the four after dword 9L + first of the step's A bytes, taken from
    the two 64-byte loads at byte offsets ``loads`` (16 + i: the second's dword i)."""
    out = []
    for d in range(16):
        g = UNIT // 4 * (d // 4) + first + (d % 4 if first else 0)  # first 0: sa, in all 4 dwords
        lo, hi = (off // 4 for off in loads)
        out.append(g - lo if lo <= g < lo + 16 else 16 + g - hi)
        assert 0 <= g - hi < 16 or lo <= g < lo + 16
    return ", ".join(map(str, out))


def _applies(op, target) -> bool:
    fmt = op.b.dtype if op.kind == "matmul" else None
    return (
        dot_applies(op, target, max_cols=MAX_OUTPUTS)
        and fmt.name in ("q4_0", "i4")
        and fmt.group % BLOCK == 0
        and _vector_regs(op, target) <= target.vector_regs
    )


def _cost(op, target) -> Features:
    """Per step of 4 blocks: per row, 4 loads, 2 vpermt2d and a vpermt2ps (i4 in A's order: 2 byte shuffles, 2
    unpacks), the offsets (2 dpbusd and the negation); per column, the nibbles (q4_0: 4 loads, 3 inserts; i4: a
    load; in value order: 2 unpacks), masked (and, shift, and), the scales (a move and F16C's convert, the
    permute to the lanes; scalar: the halves or values put together), zero points (16 - z to bytes: a
    broadcast and a byte shuffle, scalar ops; 2 adds to the nibbles); per row and column 2 dpbusd, the
    scales' multiply (integer-multiply pipes as dot_int4_vnni counts it), convert and FMA. The last 1..3
    blocks: one more step (masked). Prefetches are loads; B is read as one stream (as dot_int4_vnni). Where
    registers run out, each value beyond them costs a store and two loads a step."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    full, per = prefetch_plan(fmt, k, n, SPAN)
    steps = full + int(blocks % SPAN > 0)
    q4, z = fmt.name == "q4_0", int(fmt.zero)
    i4_rows, i4_cols = fmt.name == "i4" and not nibbles_in_value_order(op), nibbles_in_value_order(op)
    spill = max(0, _vector_regs(op, target) + 4 * m - target.vector_regs)
    feats = Features.of(
        vec_load=steps * (4 * m + (1 + 3 * q4) * n + 2 * spill) + full * per,
        vec_store=steps * spill,
        vec_op=steps * (m + n * (3 + 3 * q4 + 2 + 2 * z) + m * n),
        vec_shuffle=steps * (m * (3 + 4 * i4_rows) + n * (1 + 2 * z + 2 * i4_cols)),
        vec_imul=steps * (2 * m + 3 * m * n),
        vec_fma=steps * m * n,
        scalar_op=steps * n * (3 + 3 * q4 + 3 * z),
        hsum=m * n,
        loop_iter=full,
    )
    scale_lines = -(-int(n * k * fmt.scale_bytes) // 64) if not fmt.block else 0
    return feats + lines_read(op.a) + lines_read(op.b) + Features.of(gl_line=scale_lines)


# -- emitter -----------------------------------------------------------------------------------------------
def _emit(lw, node, binds) -> None:
    c, aps, cols, blk = prologue(lw, node, binds, "dot_int4_vnni512")
    fmt, (_, m, k, n) = binds[1].dtype, node.spec.op.iter_shape
    blocks = k // BLOCK
    accs = [[lw.fresh("acc") for _ in range(n)] for _ in range(m)]
    lw.emit("__m512 " + ", ".join(f"{x} = _mm512_setzero_ps()" for row in accs for x in row) + ";")
    lw.emit(f"const __m512i m15 = _mm512_set1_epi8(15), offs = _mm512_set1_epi8({16 if fmt.zero else 8});")
    lw.emit(f"const __m512i alo_ix = _mm512_setr_epi32({_index(1, _LOADS[0])});")
    lw.emit(f"const __m512i ahi_ix = _mm512_setr_epi32({_index(5, _LOADS[1])});")
    lw.emit(f"const __m512i sa_ix = _mm512_setr_epi32({_index(0, _LOADS[0])});")
    if not _one_group(fmt):  # value L of 4 to every dword of lane L
        lw.emit(f"const __m512i lane_ix = _mm512_setr_epi32({', '.join(str(d // 4) for d in range(16))});")
    if fmt.zero and not _one_group(fmt):  # byte L of a broadcast dword to every byte of lane L
        lw.emit(f"const __m512i zspread = _mm512_setr_epi32({', '.join(hex(d // 4 * 0x01010101) for d in range(16))});")
    in_order = nibbles_in_value_order(node.spec.op)
    if fmt.name == "i4" and not in_order:
        lw.emit(f"const __m512i evens_odds = _mm512_maskz_broadcast_i32x4(0xFFFF, _mm_setr_epi8({_EVENS_ODDS}));")
    if blocks >= SPAN:
        lw.open(f"for (ix {blk} = 0; {blk} + {SPAN - 1} < {blocks}; {blk} += {SPAN}) {{")
        _step(lw, fmt, aps, cols, blk, SPAN, accs, prefetch_slots(lw, binds[1], cols, k, n, blk, n, SPAN), in_order)
        lw.close()
    if blocks % SPAN:
        lw.open("{")
        _step(lw, fmt, aps, cols, str(blocks - blocks % SPAN), blocks % SPAN, accs, [[] for _ in cols], in_order)
        lw.close()
    for r, row in enumerate(accs):
        for j, acc in enumerate(row):
            lw.emit(f"{lw.elem(c, (0, r, j))} += {lw.v}::hsum({acc});")
    lw.close()


def _load(p: str, mask: int = 0xFFFF) -> str:
    """A zmm of 16 dwords at p, those outside ``mask`` zero (and not read)."""
    if mask == 0xFFFF:
        return f"_mm512_loadu_si512({p})"
    return f"_mm512_maskz_loadu_epi32({hex(mask)}, {p})" if mask else "_mm512_setzero_si512()"


def _valid(first_byte: int, limit: int) -> int:
    """The mask of a load's dwords (from byte first_byte) before byte ``limit``."""
    return sum(1 << d for d in range(16) if first_byte + 4 * d < limit)


def _step(lw, fmt, aps, cols, blk: str, count: int, accs, prefetches, in_order: bool) -> None:
    """Blocks blk .. blk + count - 1 (count 4 but in the last step), a block per lane: A's rows rearranged,
    then every column and row, each column followed by its slot of the following columns' prefetches.
    in_order: i4's nibbles put in value order (else A's qa in the nibbles' order, evens then odds)."""
    rows = []
    for ap in aps:
        x0, y0, x1, y1, lo, hi, corr, sa = (lw.fresh(s) for s in ("x", "y", "x", "y", "alo", "ahi", "corr", "sa"))
        a0 = f"{ap} + {blk} * {UNIT}"
        (o0, o1), (o2, o3) = _LOADS
        loads = [
            (v, o, _load(f"{a0} + {o}", _valid(o, count * UNIT))) for v, o in ((x0, o0), (y0, o1), (x1, o2), (y1, o3))
        ]
        lw.emit("const __m512i " + ", ".join(f"{v} = {x}" for v, _, x in loads) + ";")
        lw.emit(f"__m512i {lo} = _mm512_permutex2var_epi32({x0}, alo_ix, {y0});")
        lw.emit(f"__m512i {hi} = _mm512_permutex2var_epi32({x1}, ahi_ix, {y1});")
        if fmt.name == "i4" and not in_order:  # evens of each block's 32 values, then odds: the nibbles' order
            shuffled = (f"{x}s = _mm512_shuffle_epi8({x}, evens_odds)" for x in (lo, hi))
            lw.emit(f"const __m512i {', '.join(shuffled)};")
            lw.emit(f"{lo} = _mm512_maskz_unpacklo_epi64(0xFF, {lo}s, {hi}s);")
            lw.emit(f"{hi} = _mm512_maskz_unpackhi_epi64(0xFF, {lo}s, {hi}s);")
        lw.emit(
            f"const __m512 {sa} = _mm512_permutex2var_ps(_mm512_castsi512_ps({x0}), sa_ix, _mm512_castsi512_ps({y0}));"
        )
        both = f"_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), offs, {lo}), offs, {hi})"
        lw.emit(f"const __m512i {corr} = _mm512_sub_epi32(_mm512_setzero_si512(), {both});")
        rows.append((lo, hi, corr, sa))
    for j, col in enumerate(cols):
        v, lo, hi, sb = (lw.fresh(s) for s in ("v", "lo", "hi", "sb"))
        lw.emit(f"const __m512i {v} = {_nibbles(fmt, col, blk, count)};")
        zc = _zeros(lw, fmt, col, blk, count)
        lw.emit(f"const __m512i {lo} = {_plus(f'_mm512_and_si512({v}, m15)', zc)};")
        lw.emit(f"const __m512i {hi} = {_plus(f'_mm512_and_si512(_mm512_srli_epi16({v}, 4), m15)', zc)};")
        if in_order:  # bytes j: values 2j (lo) and 2j + 1 (hi), interleaved back into 0..15 and 16..31
            lo, hi = _interleaved(lw, lo, hi)
        lw.emit(f"const __m512 {sb} = {_scales(lw, fmt, col, blk, count)};")
        for r, (alo, ahi, corr, sa) in enumerate(rows):
            sums = f"_mm512_dpbusd_epi32(_mm512_dpbusd_epi32({corr}, {lo}, {alo}), {hi}, {ahi})"
            acc = accs[r][j]
            lw.emit(
                f"{acc} = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, {sums}), _mm512_mul_ps({sa}, {sb}), {acc});"
            )
        for stmt in prefetches[j]:
            lw.emit(stmt)


def _interleaved(lw, evens: str, odds: str) -> tuple[str, str]:
    """Per 128-bit lane, the block's 16 evens and 16 odds as values 0..15 and 16..31."""
    lo, hi = lw.fresh("vlo"), lw.fresh("vhi")
    lw.emit(f"const __m512i {lo} = _mm512_unpacklo_epi8({evens}, {odds});")
    lw.emit(f"const __m512i {hi} = _mm512_unpackhi_epi8({evens}, {odds});")
    return lo, hi


def _plus(x: str, zc: str | None) -> str:
    return f"_mm512_add_epi8({x}, {zc})" if zc else x


def _nibbles(fmt, col, blk: str, count: int) -> str:
    """A zmm whose lane L holds block blk + L's 16 bytes of nibbles (absent blocks: zero)."""
    if fmt.name == "i4":  # the blocks' bytes are adjacent
        return _load(block_ptr(fmt, col[0], blk), (1 << 4 * count) - 1)
    parts = [
        f"_mm_loadu_si128(reinterpret_cast<const __m128i*>({block_ptr(fmt, col[0], f'({blk} + {i})')} + 2))"
        for i in range(count)
    ]
    x = f"_mm512_zextsi128_si512({parts[0]})"
    for i, p in enumerate(parts[1:], 1):
        x = f"_mm512_inserti32x4({x}, {p}, {i})"
    return x


def _one_group(fmt) -> bool:
    """Whether a step's 4 blocks share one scale and zero point (groups of a multiple of 128 values)."""
    return not fmt.block and fmt.group // BLOCK % SPAN == 0


def _groups(fmt, blk: str, count: int) -> list[str]:
    """The group index of each block of the step (C expressions)."""
    return [block_group(fmt, f"({blk} + {i})") for i in range(count)]


def _scales(lw, fmt, col, blk: str, count: int) -> str:
    """A zmm of each block's weight scale in its lane's dwords (absent blocks: 0)."""
    bp, sp, _ = col
    per = fmt.group // BLOCK
    if _one_group(fmt):
        return f"_mm512_set1_ps({scale_zero(lw, fmt, col, blk, f16c=True)[0]})"
    if not fmt.block and fmt.scales == "f16" and per == 1 and count == SPAN:  # 4 adjacent halves
        four = f"_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>({sp} + {blk})))"
    elif fmt.block or fmt.scales == "f16":
        halves = [
            f"[&] {{ uint16_t d; std::memcpy(&d, {block_ptr(fmt, bp, f'({blk} + {i})')}, 2); return d; }}()"
            if fmt.block
            else f"{sp}[{g}]"
            for i, g in enumerate(_groups(fmt, blk, count))
        ]
        bits = " | ".join(f"uint64_t({h}) << {16 * i}" for i, h in enumerate(halves))
        four = f"_mm_cvtph_ps(_mm_cvtsi64_si128((long long)({bits})))"
    else:
        values = [scale_zero(lw, fmt, col, f"({blk} + {i})", f16c=True)[0] for i in range(count)]
        four = f"_mm_setr_ps({', '.join(values + ['0.0f'] * (SPAN - count))})"
    return f"_mm512_maskz_permutexvar_ps(0xFFFF, lane_ix, _mm512_zextps128_ps512({four}))"


def _zeros(lw, fmt, col, blk: str, count: int) -> str | None:
    """A variable holding 16 - z of each block in every byte of its lane, or None without zero points."""
    if not fmt.zero:
        return None
    zp, per, zc = col[2], fmt.group // BLOCK, lw.fresh("zc")
    if _one_group(fmt):
        lw.emit(f"const __m512i {zc} = _mm512_set1_epi8(char(16 - {zp}[{blk} / {per}]));")
        return zc
    if per == 1 and count == SPAN:  # 4 adjacent bytes, each 16 - z (z < 16: no borrow)
        bits = f"[&] {{ uint32_t z; std::memcpy(&z, {zp} + {blk}, 4); return int(0x10101010u - z); }}()"
    else:
        bits = "int(" + " | ".join(f"(16 - {zp}[{g}]) << {8 * i}" for i, g in enumerate(_groups(fmt, blk, count))) + ")"
    lw.emit(f"const __m512i {zc} = _mm512_shuffle_epi8(_mm512_set1_epi32({bits}), zspread);")
    return zc


def _vector_regs(op, target) -> int:
    _, m, _, n = op.iter_shape
    fmt = op.b.dtype
    # accumulators, the constants (m15, offs, 4 indexes; zspread, evens_odds) and 4 temporaries (A's per-row
    # halves, offsets and scales can live on the stack: memory operands, priced in _cost)
    return m * n + 6 + int(fmt.zero) + int(fmt.name == "i4" and not nibbles_in_value_order(op)) + 4


DOT_INT4_VNNI512 = KernelDef(
    name="dot_int4_vnni512",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="dot_int4_vnni on zmm: four blocks a step, one per 128-bit lane (vpdpbusd zmm), zero points included",
    features=frozenset({"avx512f", "avx512bw", "avx512vnni", "f16c"}),
    vector_regs=_vector_regs,
)
