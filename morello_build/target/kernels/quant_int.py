"""Integer kernels of ``aquant=i8`` (ir/aquant.py): the quantizing copy of A, and dot products of the
quantized A (``Q8A`` blocks: f32 sa, 32 int8 qa) with integer weights (i8, i4, q8_0, q4_0).

- ``quantize_a`` (move): A's rows, block by block, into a Q8A buffer (runtime ``quantize_block_i8``); the
  search places it, ideally once per call outside the loop over N.
- ``dot_int`` (AVX2; also on the AVX-512 and Highway targets, whose functions include AVX2): per block
  of 32, each column's 32 integer weights in one ymm of int8 (``qb - z``), then ggml's sign trick
  (``mul_sum_i8_pairs``: ``maddubs`` multiplies u8 by s8, so |qb| times qa with qb's sign; |qb| <= 128 and
  |qa| <= 127 keep a pair's sum under 2^15), ``madd`` by ones to 8 int32 lanes, converted to f32 and
  FMA'd with ``sa * sb`` into the column's accumulator; one horizontal sum at the end. Exact integer
  block sums, so every ISA computes the same block sums; only the f32 sum over blocks differs in order.
  i8 with a zero point: ``sum qa*q - z * sum qa`` (``q - z`` does not fit an int8).
- ``dot_int_vnni``: the same with AVX-512 VNNI's ``vpdpbusd`` (u8 by s8, 4 products per int32 lane) in
  place of ``maddubs`` and ``madd``, on targets whose CPUs have VNNI (avx512_bf16: every CPU with
  AVX512_BF16 has AVX512_VNNI).
- ``dot_int_scalar``: the same in plain int32 loops (the scalar target, and any other's fallback).
"""

from __future__ import annotations

from morello_build.ir.aquant import BLOCK, Q8A, WEIGHTS, is_quantized_a
from morello_build.ir.formats import is_format
from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_from, lines_read, streams_read
from morello_build.target.kernels.common import F32, KernelDef, columns_unit_stride

MAX_COLS = 4
# Vector instructions turning one block of a format's weights into 32 int8 lanes of qb - z.
_WIDEN_OPS = {"q8_0": 0, "i8": 0, "q4_0": 5, "i4": 7}
_DOT_OPS = 6  # abs, sign, maddubs, madd, convert, broadcast of sa * sb (the FMA counted apart)


def _dot_applies(op, target, max_cols: int = MAX_COLS) -> bool:
    if op.kind != "matmul":
        return False
    b, m, k, n = op.iter_shape
    fmt = op.b.dtype
    return (
        b == 1
        and m == 1
        and n <= max_cols
        and op.accum
        and op.a.dtype == Q8A
        and op.a.level.is_memory
        and op.a.unit_stride(2)
        and is_format(fmt)
        and fmt.name in WEIGHTS
        and op.b.level.is_memory
        and columns_unit_stride(op.b)
        and op.c.level == Level.RF
        and op.c.dtype == F32
        and k % fmt.group == 0
        and k % BLOCK == 0
    )


def _operand_lines(op, n: int) -> Features:
    fmt, k = op.b.dtype, op.iter_shape[2]
    scale_lines = -(-int(n * k * fmt.scale_bytes) // 64) if op.b.level == Level.GL else 0
    return lines_read(op.a) + streams_read(op.b, n) + Features.of(gl_line=scale_lines)


def _dot_cost(op, target, vnni: bool = False) -> Features:
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    zero_i8 = fmt.name == "i8" and fmt.zero
    per_col = _WIDEN_OPS[fmt.name] + _DOT_OPS - vnni + 3 * zero_i8  # vpdpbusd: maddubs and madd in one
    feats = Features.of(
        vec_load=blocks * (1 + n),
        vec_op=blocks * (n * per_col + 2 * zero_i8),
        vec_fma=blocks * n,
        scalar_op=blocks * n * (2 + fmt.zero),
        hsum=n,
        loop_iter=blocks,
    )
    return feats + _operand_lines(op, n)


def _scalar_cost(op, target) -> Features:
    fmt, (_, _, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    feats = Features.of(scalar_op=blocks * n * (2 * BLOCK + 3 + fmt.zero), loop_iter=blocks)
    return feats + _operand_lines(op, n)


# -- emitters ---------------------------------------------------------------------------------------------
def _pointers(lw, a, b, n: int):
    """The C pointers of A's first block and each column's first unit, scales and zero points."""
    fmt = b.dtype
    ap = lw.fresh("ap")
    lw.emit(f"const uint8_t* {ap} = {lw.unit_ptr(a, (0, 0, 0))};")
    cols = []
    for j in range(n):
        bp = lw.fresh("bp")
        lw.emit(f"const {fmt.ctype}* {bp} = {lw.unit_ptr(b, (0, 0, j))};")
        extra = {}
        for suffix, ctype in fmt.extra_arrays():
            extra[suffix] = lw.fresh(suffix[0] + "p")
            lw.emit(f"const {ctype}* {extra[suffix]} = {b.root}_{suffix} + {lw.group_index(b, (0, 0, j))};")
        cols.append((bp, extra.get("scales"), extra.get("zeros")))
    return ap, cols


def _check_operands(lw, a, b, n: int, name: str) -> None:
    for j in range(n):
        if b.shape[1] > 1 and lw.step(b, (0, 0, j), (0, 1, j)) != 1:
            raise lw.error(f"{name}: a B column is not contiguous along K")
    if lw.step(a, (0, 0, 0), (0, 0, 1)) != 1:
        raise lw.error(f"{name}: A is not contiguous along K")


def _block(fmt, bp: str, blk: str) -> str:
    """The pointer to block ``blk`` of a column's weights (ggml blocks: their fp16 scale first)."""
    return f"{bp} + {blk} * {fmt.unit_size if fmt.block else fmt.bits * BLOCK // 8}"


def _scale_zero(lw, fmt, col, blk: str, f16c: bool = False):
    """(the block's weight scale, its zero point as an int expression or None) as C expressions; ``f16c``:
    halves converted by F16C's vcvtph2ps (the runtime's portable conversion is a dozen instructions)."""
    bp, sp, zp = col
    if fmt.block:
        p = f"({_block(fmt, bp, blk)})"
        if f16c:
            bits = f"[&] {{ uint16_t d; std::memcpy(&d, {p}, 2); return d; }}()"  # one 16-bit load
            return f"_cvtsh_ss({bits})", None
        return f"{lw.rt}::block_scale({p})", None
    g = f"{blk} / {fmt.group // BLOCK}" if fmt.group > BLOCK else blk
    z = f"int32_t({zp}[{g}])" if fmt.zero else ("8" if fmt.name == "i4" else None)
    if f16c and fmt.scales == "f16":
        return f"_cvtsh_ss({sp}[{g}])", z
    return f"{lw.rt}::scale_{fmt.scales}({sp}[{g}])", z


def _prologue(lw, node, binds, name: str):
    a, b, c = binds
    n = node.spec.op.iter_shape[3]
    if c.level != Level.RF:
        raise lw.error(f"{name} accumulates into scalar registers")
    _check_operands(lw, a, b, n, name)
    lw.open("{")
    lw.emit(f"// {name}: {n} column(s) of {b.dtype} weights · A quantized to int8 (aquant=i8), K = {a.shape[2]}")
    ap, cols = _pointers(lw, a, b, n)
    blk = lw.fresh("blk")
    return a, b, c, n, ap, cols, blk


def _scalar_emit(lw, node, binds) -> None:
    a, b, c, n, ap, cols, blk = _prologue(lw, node, binds, "dot_int_scalar")
    fmt, k = b.dtype, node.spec.op.iter_shape[2]
    accs = [lw.fresh("acc") for _ in range(n)]
    lw.emit("float " + ", ".join(f"{x} = 0.0f" for x in accs) + ";")
    lw.open(f"for (ix {blk} = 0; {blk} < {k // BLOCK}; ++{blk}) {{")
    lw.emit(f"const float sa = {lw.rt}::a8_scale({ap} + {blk} * {Q8A.unit_size});")
    lw.emit(f"const int8_t* qa = reinterpret_cast<const int8_t*>({ap} + {blk} * {Q8A.unit_size} + 4);")
    for acc, col in zip(accs, cols):
        sb, z = _scale_zero(lw, fmt, col, blk)
        q = lw.fresh("q")
        lw.emit(f"const {fmt.ctype}* {q} = {_block(fmt, col[0], blk)};")
        s = lw.fresh("s")
        lw.emit(f"int32_t {s} = 0;")
        zt = f" - {z}" if z else ""
        if fmt.name == "q8_0":
            lw.emit(f"for (int e = 0; e < 32; ++e) {s} += int32_t(qa[e]) * int32_t(int8_t({q}[2 + e]));")
        elif fmt.name == "q4_0":
            lw.emit(
                f"for (int e = 0; e < 16; ++e) {s} += int32_t(qa[e]) * (int32_t({q}[2 + e] & 15) - 8)"
                f" + int32_t(qa[e + 16]) * (int32_t({q}[2 + e] >> 4) - 8);"
            )
        elif fmt.name == "i8":
            lw.emit(f"for (int e = 0; e < 32; ++e) {s} += int32_t(qa[e]) * (int32_t({q}[e]){zt});")
        else:
            lw.emit(
                f"for (int e = 0; e < 16; ++e) {s} += int32_t(qa[2 * e]) * (int32_t({q}[e] & 15){zt})"
                f" + int32_t(qa[2 * e + 1]) * (int32_t({q}[e] >> 4){zt});"
            )
        lw.emit(f"{acc} += (sa * {sb}) * float({s});")
    lw.close()
    for j, acc in enumerate(accs):
        lw.emit(f"{lw.elem(c, (0, 0, j))} += {acc};")
    lw.close()


def _avx2_weights(fmt, p: str, z) -> str:
    """32 int8 lanes of a block's qb (minus the zero point or 8, except i8's: see the module doc)."""
    if fmt.name == "q8_0":
        return f"_mm256_loadu_si256(reinterpret_cast<const __m256i*>({p} + 2))"
    if fmt.name == "i8":
        return f"_mm256_loadu_si256(reinterpret_cast<const __m256i*>({p}))"
    x = f"_mm_loadu_si128(reinterpret_cast<const __m128i*>({p}{' + 2' if fmt.block else ''}))"
    lo = f"_mm_and_si128({x}, _mm_set1_epi8(15))"
    hi = f"_mm_and_si128(_mm_srli_epi16({x}, 4), _mm_set1_epi8(15))"
    if fmt.name == "q4_0":  # byte j: element j low, j + 16 high
        nib = f"_mm256_set_m128i({hi}, {lo})"
    else:  # i4: byte i: element 2i low, 2i + 1 high
        nib = f"_mm256_set_m128i(_mm_unpackhi_epi8({lo}, {hi}), _mm_unpacklo_epi8({lo}, {hi}))"
    return f"_mm256_sub_epi8({nib}, _mm256_set1_epi8(static_cast<char>({z or 8})))"


def _avx2_emit(lw, node, binds, vnni: bool = False) -> None:
    a, b, c, n, ap, cols, blk = _prologue(lw, node, binds, "dot_int_vnni" if vnni else "dot_int")
    fmt, k = b.dtype, node.spec.op.iter_shape[2]
    blocks = k // BLOCK
    chains = 2 if blocks > 1 else 1  # two FMA chains per column (even and odd blocks): latency, not FMAs, binds
    accs = [[lw.fresh("acc") for _ in range(chains)] for _ in range(n)]
    lw.emit("__m256 " + ", ".join(f"{x} = _mm256_setzero_ps()" for col in accs for x in col) + ";")
    if not vnni:
        lw.emit("const __m256i ones16 = _mm256_set1_epi16(1);")
    if chains == 2:
        lw.open(f"for (ix {blk} = 0; {blk} + 1 < {blocks}; {blk} += 2) {{")
        _avx2_block(lw, fmt, ap, cols, blk, [col[0] for col in accs], vnni)
        _avx2_block(lw, fmt, ap, cols, f"({blk} + 1)", [col[1] for col in accs], vnni)
        lw.close()
    if blocks % 2 or chains == 1:
        _avx2_block(lw, fmt, ap, cols, str(blocks - 1), [col[0] for col in accs], vnni)
    for j, col in enumerate(accs):
        h, acc = lw.fresh("h"), col[0] if chains == 1 else f"_mm256_add_ps({col[0]}, {col[1]})"
        lw.emit(f"__m256 {h}v = {acc};")
        lw.emit(f"__m128 {h} = _mm_add_ps(_mm256_castps256_ps128({h}v), _mm256_extractf128_ps({h}v, 1));")
        lw.emit(f"{h} = _mm_add_ps({h}, _mm_movehl_ps({h}, {h}));")
        lw.emit(f"{h} = _mm_add_ss({h}, _mm_movehdup_ps({h}));")
        lw.emit(f"{lw.elem(c, (0, 0, j))} += _mm_cvtss_f32({h});")
    lw.close()


def _products(u: str, s: str, vnni: bool) -> str:
    """8 int32 lanes, each the sum of 4 products of u8 ``u`` by s8 ``s``: maddubs then madd by ones (pairs
    of products at most 2 * 128 * 127, under 2^15), or one VNNI vpdpbusd."""
    if vnni:
        return f"_mm256_dpbusd_epi32(_mm256_setzero_si256(), {u}, {s})"
    return f"_mm256_madd_epi16(_mm256_maddubs_epi16({u}, {s}), ones16)"


def _avx2_block(lw, fmt, ap: str, cols, blk: str, accs, vnni: bool) -> None:
    """One block of 32 values: every column's integer block sum, times sa * sb, into its accumulator."""
    zero_i8 = fmt.name == "i8" and fmt.zero
    lw.open("{")
    lw.emit(f"const float sa = {lw.rt}::a8_scale({ap} + {blk} * {Q8A.unit_size});")
    lw.emit(f"const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>({ap} + {blk} * 36 + 4));")
    if zero_i8:  # sum qa per lane (maddubs of ones by qa)
        lw.emit(f"const __m256i suma = {_products('_mm256_set1_epi8(1)', 'qa', vnni)};")
    for acc, col in zip(accs, cols):
        sb, z = _scale_zero(lw, fmt, col, blk, f16c=True)
        qb, p = lw.fresh("qb"), lw.fresh("p")
        lw.emit(f"const __m256i {qb} = {_avx2_weights(fmt, _block(fmt, col[0], blk), None if zero_i8 else z)};")
        lw.emit(f"__m256i {p} = {_products(f'_mm256_sign_epi8({qb}, {qb})', f'_mm256_sign_epi8(qa, {qb})', vnni)};")
        if zero_i8:
            lw.emit(f"{p} = _mm256_sub_epi32({p}, _mm256_mullo_epi32(suma, _mm256_set1_epi32({z})));")
        lw.emit(f"{acc} = _mm256_fmadd_ps(_mm256_cvtepi32_ps({p}), _mm256_set1_ps(sa * {sb}), {acc});")
    lw.close()


def _vector_regs(op, target) -> int:
    return 2 * op.iter_shape[3] + 5  # two accumulators per column; qa, ones, a column's qb and products


# -- quantize_a: the quantizing copy -----------------------------------------------------------------------
def _quantize_applies(op, target) -> bool:
    src, dst = op.src, op.dst
    return (
        is_quantized_a(src.dtype)
        and dst.dtype == Q8A
        and src.level.is_memory
        and dst.level.is_memory
        and src.shape[0] == 1
        and src.shape[2] % BLOCK == 0
        and src.unit_stride(2)
        and dst.unit_stride(2)
    )


def _quantize_cost(op, target) -> Features:
    spill = op.dst.lines() if op.dst.level == Level.GL else 0  # a scratch block's lines leave L1
    return Features.of(copy_elem=4 * op.src.volume, l2_line=spill) + lines_from(op.src)


def _quantize_emit(lw, node, binds) -> None:
    src, dst = binds
    _, m, k = node.spec.op.src.shape
    lw.emit(f"// quantize_a: {m} row(s) of A into int8 blocks of 32 with f32 scales (aquant=i8)")
    if k > BLOCK and (lw.step(src, (0, 0, 0), (0, 0, 1)) != 1 or lw.step(dst, (0, 0, 0), (0, 0, 1)) != 1):
        raise lw.error("quantize_a: a row is not contiguous along K")
    for i in range(m):  # rows are few (decode): a loop over blocks each
        row, blk = lw.fresh("row"), lw.fresh("blk")
        lw.emit(f"const float* {row} = {lw.ptr(src, (0, i, 0))};")
        lw.emit(f"uint8_t* {row}q = {lw.unit_ptr(dst, (0, i, 0))};")
        lw.emit(
            f"for (ix {blk} = 0; {blk} < {k // BLOCK}; ++{blk}) "
            f"{lw.rt}::quantize_block_i8({row} + {blk} * {BLOCK}, {row}q + {blk} * {Q8A.unit_size});"
        )


QUANTIZE_A = KernelDef(
    name="quantize_a",
    kind="move",
    vector=False,
    applies=_quantize_applies,
    cost=_quantize_cost,
    emit=_quantize_emit,
    doc="aquant=i8: rows of f32 A quantized per block of 32 into int8 with an f32 scale (ir/aquant.py)",
)
DOT_INT = KernelDef(
    name="dot_int",
    kind="matmul",
    vector=True,
    applies=_dot_applies,
    cost=_dot_cost,
    emit=_avx2_emit,
    doc="n dot products of int8-quantized A with integer weights: AVX2 maddubs sign trick, f32 per block",
    features=frozenset({"avx2", "f16c"}),
    vector_regs=_vector_regs,
)
DOT_INT_VNNI = KernelDef(
    name="dot_int_vnni",
    kind="matmul",
    vector=True,
    applies=_dot_applies,
    cost=lambda op, target: _dot_cost(op, target, vnni=True),
    emit=lambda lw, node, binds: _avx2_emit(lw, node, binds, vnni=True),
    doc="dot_int with AVX-512 VNNI's vpdpbusd (on ymm, AVX512VL) in place of maddubs and madd",
    features=frozenset({"avx512vnni", "avx512vl", "f16c"}),
    vector_regs=_vector_regs,
)
DOT_INT_SCALAR = KernelDef(
    name="dot_int_scalar",
    kind="matmul",
    vector=False,
    applies=_dot_applies,
    cost=_scalar_cost,
    emit=_scalar_emit,
    doc="n dot products of int8-quantized A with integer weights in int32 scalar loops",
)
