"""``dot_int_vnni512``: ``aquant=i8`` dot products with 8-bit weights (``q8_0``; ``i8`` with or without zero
points) on zmm, for small batches: two blocks per step, one per 256-bit half, the same exact integer block sums
as ``dot_int_vnni`` (quant_int.py).

- No sign trick: the weights become unsigned bytes qb + 128 (an xor), ``vpdpbusd`` multiplies them by qa, and
  each output's sums start at the row's -128 * sum qa (per row and step a ``vpdpbusd`` of 0x80 bytes by qa
  and a negation); with zero points at -(128 + z) * sum qa: the row's -sum qa (at most 4 * 127 in magnitude:
  an int16 in each int32 lane's low half, its sign in the high half) ``madd_epi16`` by the column's 128 + z
  (in each lane's low half, 0 in the high half), exactly, one instruction per row and column.
- Per row and step A's two blocks in the halves (a 256-bit load and an insert) and their sa in the halves'
  lanes (a load and a permute); per column the two blocks' weights (q8_0: a load and an insert; i8: one
  load), the xor, the scales to the halves' lanes. Per row and column: one ``vpdpbusd``, convert, the
  scales' multiply and the FMA for 64 values, where dot_int_vnni spends two signs, two ``vpdpbusd``, two
  converts, two broadcasts and two FMAs.
- The odd last block: the same step with the upper half zero (masked loads).

Measured (2048x16384, warm, 1 thread, Intel Xeon, scripts/kernel_ab.py, 21 rounds), against dot_int_vnni:
q8_0 M = 1, 2, 4, 8: 0.96, 0.93, 0.92, 1.00 of its time; i8 g32 f16 with zero points: 0.89, 0.91, 0.71, 0.70.
"""

from __future__ import annotations

from morello_build.ir.aquant import BLOCK, Q8A
from morello_build.synth.cost import Features
from morello_build.target.kernels.common import KernelDef
from morello_build.target.kernels.quant_int import (
    block_group,
    block_ptr,
    dot_applies,
    operand_lines,
    prologue,
    scale_zero,
)
from morello_build.target.kernels.quant_int_prefetch import prefetch_plan, prefetch_slots

MAX_OUTPUTS = 8  # rows x columns per kernel
UNIT = Q8A.unit_size  # bytes of one A block (36: nine dwords)


def _applies(op, target) -> bool:
    fmt = op.b.dtype if op.kind == "matmul" else None
    return (
        dot_applies(op, target, max_cols=MAX_OUTPUTS)
        and fmt.name in ("q8_0", "i8")
        and fmt.group % BLOCK == 0
        and _vector_regs(op, target) <= target.vector_regs
    )


def _cost(op, target) -> Features:
    """Per step of 2 blocks: per row, 3 loads, an insert and a permute (sa), the offsets (a dpbusd and the
    negation); per column, the weights (q8_0: 2 loads and an insert; i8: a load) and the xor, the scales
    (a move and F16C's convert, the permute to the halves; scalar ops putting them together), zero points
    (128 + z in the halves: 2 broadcasts and a blend, scalar ops); per row and column a dpbusd, the scales'
    multiply (integer-multiply pipes as dot_int4_vnni counts it), convert and FMA (zero points: a madd). The
    odd last block: one more step. Prefetches are loads; B is read as one stream."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    full, per = prefetch_plan(fmt, k, n)
    steps = full + blocks % 2
    q8, z = fmt.name == "q8_0", int(fmt.zero)
    feats = Features.of(
        vec_load=steps * (3 * m + (1 + q8) * n) + full * per,
        vec_op=steps * (2 * m + n * (2 + q8 + z) + m * n),
        vec_shuffle=steps * (m + n * (1 + 2 * z)),
        vec_imul=steps * (m + (2 + z) * m * n),
        vec_fma=steps * m * n,
        scalar_op=steps * n * (3 + 2 * z),
        hsum=m * n,
        loop_iter=full,
    )
    return feats + operand_lines(op, n, one_stream=full > 0)


# -- emitter -----------------------------------------------------------------------------------------------
def _emit(lw, node, binds) -> None:
    c, aps, cols, blk = prologue(lw, node, binds, "dot_int_vnni512")
    fmt, (_, m, k, n) = binds[1].dtype, node.spec.op.iter_shape
    blocks = k // BLOCK
    accs = [[lw.fresh("acc") for _ in range(n)] for _ in range(m)]
    lw.emit("__m512 " + ", ".join(f"{x} = _mm512_setzero_ps()" for row in accs for x in row) + ";")
    lw.emit("const __m512i flip = _mm512_set1_epi8(char(0x80));")
    if fmt.zero:
        lw.emit("const __m512i ones8 = _mm512_set1_epi8(1);")
    sa_ix = ", ".join(str(UNIT // 4 * (d // 8)) for d in range(16))  # block h's sa (dword 9h) to half h
    lw.emit(f"const __m512i sa_ix = _mm512_setr_epi32({sa_ix}), half_ix = _mm512_setr_epi32({_halves(0, 1)});")
    if blocks >= 2:
        lw.open(f"for (ix {blk} = 0; {blk} + 1 < {blocks}; {blk} += 2) {{")
        _step(lw, fmt, aps, cols, blk, 2, accs, prefetch_slots(lw, binds[1], cols, k, n, blk, n))
        lw.close()
    if blocks % 2:
        lw.open("{")
        _step(lw, fmt, aps, cols, str(blocks - 1), 1, accs, [[] for _ in cols])
        lw.close()
    for r, row in enumerate(accs):
        for j, acc in enumerate(row):
            lw.emit(f"{lw.elem(c, (0, r, j))} += {lw.v}::hsum({acc});")
    lw.close()


def _halves(x, y) -> str:
    return ", ".join([str(x)] * 8 + [str(y)] * 8)


def _pair(lo: str, hi: str | None) -> str:
    """A zmm of two 32-byte runs (pointers), the second zero where None."""
    first = f"_mm512_maskz_loadu_epi32(0xFF, {lo})"  # masked forms: GCC 12 warns of the plain ones' undefined lanes
    if hi is None:
        return first
    return f"_mm512_maskz_inserti64x4(0xFF, {first}, _mm256_loadu_si256(reinterpret_cast<const __m256i*>({hi})), 1)"


def _step(lw, fmt, aps, cols, blk: str, count: int, accs, prefetches) -> None:
    """Blocks blk and blk + 1 (count 2; 1: blk alone), a block per 256-bit half: each row's qa, offsets and sa,
    then every column and row, each column followed by its slot of the following columns' prefetches."""
    rows = []
    for ap in aps:
        a, corr, sa = lw.fresh("a"), lw.fresh("corr"), lw.fresh("sa")
        a0 = f"{ap} + {blk} * {UNIT}"
        lw.emit(f"const __m512i {a} = {_pair(f'{a0} + 4', f'{a0} + {UNIT + 4}' if count == 2 else None)};")
        # -128 * sum qa, or with zero points -sum qa (4 values a lane), as int32: where each output's sums start
        ones = f"_mm512_dpbusd_epi32(_mm512_setzero_si512(), {'ones8' if fmt.zero else 'flip'}, {a})"
        lw.emit(f"const __m512i {corr} = _mm512_sub_epi32(_mm512_setzero_si512(), {ones});")
        scales = f"_mm512_loadu_si512({a0})" if count == 2 else f"_mm512_maskz_loadu_epi32(0x1FF, {a0})"
        lw.emit(f"const __m512 {sa} = _mm512_maskz_permutexvar_ps(0xFFFF, sa_ix, _mm512_castsi512_ps({scales}));")
        rows.append((a, corr, sa))
    for j, col in enumerate(cols):
        u, sb = lw.fresh("u"), lw.fresh("sb")
        ptrs = [block_ptr(fmt, col[0], f"({blk} + {h})") + (" + 2" if fmt.block else "") for h in range(count)]
        both = f"_mm512_loadu_si512({ptrs[0]})" if count == 2 and not fmt.block else None  # i8: adjacent blocks
        lw.emit(
            f"const __m512i {u} = _mm512_xor_si512({both or _pair(ptrs[0], ptrs[1] if count == 2 else None)}, flip);"
        )
        lw.emit(f"const __m512 {sb} = {_scales(lw, fmt, col, blk, count)};")
        zc = _zeros(lw, fmt, col, blk, count)
        for r, (a, corr, sa) in enumerate(rows):
            start = f"_mm512_madd_epi16({corr}, {zc})" if zc else corr
            sums = f"_mm512_dpbusd_epi32({start}, {u}, {a})"
            acc = accs[r][j]
            lw.emit(
                f"{acc} = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, {sums}), _mm512_mul_ps({sa}, {sb}), {acc});"
            )
        for stmt in prefetches[j]:
            lw.emit(stmt)


def _scales(lw, fmt, col, blk: str, count: int) -> str:
    """A zmm of each block's weight scale in its half's lanes (an absent block's: 0)."""
    bp, sp, _ = col
    if fmt.block or fmt.scales == "f16":
        halves = [
            f"[&] {{ uint16_t d; std::memcpy(&d, {block_ptr(fmt, bp, f'({blk} + {h})')}, 2); return d; }}()"
            if fmt.block
            else f"{sp}[{block_group(fmt, f'({blk} + {h})')}]"
            for h in range(count)
        ]
        bits = " | ".join(f"uint32_t({x}) << {16 * h}" for h, x in enumerate(halves))
        two = f"_mm_cvtph_ps(_mm_cvtsi32_si128(int({bits})))"
    else:
        values = [scale_zero(lw, fmt, col, f"({blk} + {h})", f16c=True)[0] for h in range(count)]
        two = f"_mm_setr_ps({', '.join(values + ['0.0f'] * (3 - len(values)))}, 0.0f)"
    return f"_mm512_maskz_permutexvar_ps(0xFFFF, half_ix, _mm512_zextps128_ps512({two}))"


def _zeros(lw, fmt, col, blk: str, count: int) -> str | None:
    """A variable holding 128 + z of each block in its half's int32 lanes (low 16 bits), or None."""
    if not fmt.zero:
        return None
    zc, zp = lw.fresh("zc"), col[2]
    z = [f"128 + int({zp}[{block_group(fmt, f'({blk} + {h})')}])" for h in range(count)] + ["0"] * (2 - count)
    lw.emit(
        f"const __m512i {zc} = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32({z[0]}), _mm512_set1_epi32({z[1]}));"
    )
    return zc


def _vector_regs(op, target) -> int:
    _, m, _, n = op.iter_shape
    # accumulators, the constants (flip, offs, 2 indexes) and 4 temporaries (A's per-row values can live on
    # the stack: memory operands); zero points: one more (a column's)
    return m * n + 4 + 4 + int(op.b.dtype.zero)


DOT_INT_VNNI512 = KernelDef(
    name="dot_int_vnni512",
    kind="matmul",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="aquant=i8 dot products with q8_0 / i8 on zmm: two blocks a step, weights + 128 (vpdpbusd), zero points",
    features=frozenset({"avx512f", "avx512bw", "avx512vnni", "f16c"}),
    vector_regs=_vector_regs,
)
