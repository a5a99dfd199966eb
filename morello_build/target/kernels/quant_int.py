"""Integer kernels of ``aquant=i8`` (ir/aquant.py): the quantizing copy of A, and dot products of the
quantized A (``Q8A`` blocks: f32 sa, 32 int8 qa) with integer weights (i8, i4, q8_0, q4_0).

- ``quantize_a`` (move): A's rows, block by block, into a Q8A buffer (runtime ``quantize_block_i8``); the
  search places it, ideally once per call outside the loop over N.
- ``dot_int`` (AVX2; also on the AVX-512 and Highway targets, whose functions include AVX2): per block
  of 32, each column's 32 integer weights in one ymm of int8 (``qb - z``), then ggml's sign trick
  (``mul_sum_i8_pairs``: ``maddubs`` multiplies u8 by s8, so |qb| times qa with qb's sign; |qb| <= 128 and
  |qa| <= 127 keep a pair's sum under 2^15), ``madd`` by ones to 8 int32 lanes, converted to f32 and
  FMA'd with ``sa * sb`` into the output's accumulator (two chains: even and odd blocks); one horizontal
  sum at the end. Up to 4 outputs (rows x columns) per kernel: a column's weights (and |qb|) are widened
  once for all rows (small batches). (ggml takes |qa| and qb's sign instead: wrong for a q8_0 weight of
  -128, whose negation overflows.) Exact integer block sums, so every ISA computes the same block sums;
  only the f32 sum over blocks differs in order. i8 with a zero point: ``sum qa*q - z * sum qa`` (``q - z``
  does not fit an int8).
- ``dot_int_vnni``: the same with AVX-512 VNNI's ``vpdpbusd`` (u8 by s8, 4 products per int32 lane) in
  place of ``maddubs`` and ``madd``, on targets whose CPUs have VNNI (avx512_bf16: every CPU with
  AVX512_BF16 has AVX512_VNNI); ``dot_int_vnni512`` (quant_int_zmm.py): on zmm, two blocks a step.
  ``dot_int_avxvnni``: the same code with AVX-VNNI's VEX-encoded ``vpdpbusd`` (the avx2_vnni target: no
  AVX-512), the instruction's semantics unchanged (``dpbusd``).
- ``dot_int_scalar``: the same in plain int32 loops (the scalar target, and any other's fallback).
"""

from __future__ import annotations

from dataclasses import replace

from morello_build.ir.aquant import BLOCK, Q8A, WEIGHTS, is_quantized_a
from morello_build.ir.formats import is_format
from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_from, lines_read, streams_read
from morello_build.target.kernels.common import F32, KernelDef, check_dot_operands, columns_unit_stride
from morello_build.target.kernels.quant_int_prefetch import prefetch_plan, prefetch_slots

MAX_COLS = 4  # rows x columns of C per kernel (decode: one row, a few columns; small batches: rows share B)
# Vector instructions turning one block of a format's weights into 32 int8 lanes of qb - z, as (ALU ops,
# shuffles): 4-bit ones mask and shift the nibbles (and, shift, and) and subtract z, and put the halves together
# (q4_0: one insert; i4: two unpacks and an insert; i4 with zero points: z broadcast too).
_WIDEN_OPS = {"q8_0": (0, 0), "i8": (0, 0), "q4_0": (4, 1), "i4": (4, 3)}


def dot_applies(op, target, max_cols: int = MAX_COLS) -> bool:
    if op.kind != "matmul":
        return False
    b, m, k, n = op.iter_shape
    fmt = op.b.dtype
    return (
        b == 1
        and m * n <= max_cols
        and op.accum
        and op.a.dtype == Q8A
        and op.a.level.is_memory
        and op.a.tile((1, 1, k)).unit_stride(2)  # each row dense along K
        and is_format(fmt)
        and fmt.name in WEIGHTS
        and op.b.level.is_memory
        and columns_unit_stride(op.b)
        and op.c.level == Level.RF
        and op.c.dtype == F32
        and k % fmt.group == 0
        and k % BLOCK == 0
    )


def operand_lines(op, n: int, one_stream: bool = False) -> Features:
    """A's and B's lines (``one_stream``: the prefetches make B's n columns one sequential run)."""
    fmt, k = op.b.dtype, op.iter_shape[2]
    scale_lines = -(-int(n * k * fmt.scale_bytes) // 64) if op.b.level == Level.GL else 0
    b_lines = lines_read(op.b) if one_stream else streams_read(op.b, n)
    return lines_read(op.a) + b_lines + Features.of(gl_line=scale_lines)


def _dot_cost(op, target, vnni: bool = False) -> Features:
    """Per block: each column's weights widened once (_WIDEN_OPS) and |qb| (sign), then per row and column
    qa's sign, the products (maddubs and madd, or vpdpbusd), the conversion, the broadcast of sa * sb (a
    shuffle) and the FMA; i8 with zero points: per row sum qa (maddubs and madd, or vpdpbusd), per row and
    column z broadcast, mullo and sub. Per pair of blocks the prefetches (loads), and B read as one stream
    (without them, 4-bit weights at M = 4 ran 2.3x slower from L3 than dot_int4's prefetching loop)."""
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    pairs, per = prefetch_plan(fmt, k, n)
    zero_i8 = fmt.name == "i8" and fmt.zero
    widen_alu, widen_shuffles = _WIDEN_OPS[fmt.name]
    z4 = fmt.name == "i4" and fmt.zero  # the block's z broadcast to bytes
    products = 1 if vnni else 2
    feats = Features.of(
        vec_load=blocks * (m + n) + pairs * per,
        vec_op=blocks * (n * (widen_alu + 1) + m * n * (2 + zero_i8)),
        vec_shuffle=blocks * (n * (widen_shuffles + z4) + m * n * (1 + zero_i8)),
        vec_imul=blocks * (m * n * (products + zero_i8) + m * products * zero_i8),
        vec_fma=blocks * m * n,
        scalar_op=blocks * n * (1 + fmt.zero + m),
        hsum=m * n,
        loop_iter=blocks,
    )
    return feats + operand_lines(op, n, one_stream=pairs > 0)


def _scalar_cost(op, target) -> Features:
    fmt, (_, m, k, n) = op.b.dtype, op.iter_shape
    blocks = k // BLOCK
    feats = Features.of(scalar_op=blocks * m * n * (2 * BLOCK + 3 + fmt.zero), loop_iter=blocks)
    return feats + operand_lines(op, n)


# -- emitters ---------------------------------------------------------------------------------------------
def _pointers(lw, a, b, m: int, n: int):
    """The C pointers of each A row's first block and each column's first unit, scales and zero points; with
    more than _POINTER_REGS column pointers, a column a constant distance from the first as the first's plus
    constants, all addressed from one base register per array (dot_int4_vnni, 8 columns of 1x2048x16384 i4
    g32, warm, Intel Xeon: 24 pointers (zero points) 1038 -> 978 us, 16: 917 -> 878; 4 q8_0 columns: 4-6% slower)."""
    fmt = b.dtype
    aps = row_pointers(lw, a, m)
    cols, crowded = [], n * (1 + len(fmt.extra_arrays())) > _POINTER_REGS
    for j in range(n):
        step = lw.step(b, (0, 0, 0), (0, 0, j)) if j and crowded else None
        near = step is not None and step % fmt.group == 0 and step % fmt.unit == 0
        values, *points = lw.stream_points(b, j)
        bp = lw.fresh("bp")
        at = f"{cols[0][0]} + {step // fmt.unit * fmt.unit_size}" if near else values
        lw.emit(f"const {fmt.ctype}* {bp} = {at};")
        extra = {}
        for (suffix, ctype), at in zip(fmt.extra_arrays(), points):
            extra[suffix] = lw.fresh(suffix[0] + "p")
            at = f"{cols[0][_COLUMN_ARRAYS.index(suffix)]} + {step // fmt.group}" if near else at
            lw.emit(f"const {ctype}* {extra[suffix]} = {at};")
        cols.append((bp, extra.get("scales"), extra.get("zeros")))
    return aps, cols


def row_pointers(lw, a, m: int) -> list[str]:
    """The C pointers (declared) of the first Q8A block of each of A's m rows."""
    aps = [lw.fresh("ap") for _ in range(m)]
    for r, ap in enumerate(aps):
        lw.emit(f"const uint8_t* {ap} = {lw.unit_ptr(a, (0, r, 0))};")
    return aps


_COLUMN_ARRAYS = ("values", "scales", "zeros")  # a column's pointers, in _pointers' tuples
_POINTER_REGS = 12  # of the 16 GPRs, those left for column pointers (A's rows, the loop's counter, the stack's)


def block_ptr(fmt, bp: str, blk: str) -> str:
    """The pointer to block ``blk`` of a column's weights (ggml blocks: their fp16 scale first)."""
    return f"{bp} + {blk} * {fmt.unit_size if fmt.block else fmt.bits * BLOCK // 8}"


def block_group(fmt, blk: str) -> str:
    """The group of block ``blk`` (C expressions): its index in the separate scale and zero-point arrays."""
    per = fmt.group // BLOCK
    return f"{blk} / {per}" if per > 1 else blk


def scale_zero(lw, fmt, col, blk: str, f16c: bool = False):
    """(the block's weight scale, its zero point as an int expression or None) as C expressions; ``f16c``:
    halves converted by F16C's vcvtph2ps (the runtime's portable conversion is a dozen instructions)."""
    bp, sp, zp = col
    if fmt.block:
        p = f"({block_ptr(fmt, bp, blk)})"
        if f16c:
            bits = f"[&] {{ uint16_t d; std::memcpy(&d, {p}, 2); return d; }}()"  # one 16-bit load
            return f"_cvtsh_ss({bits})", None
        return f"{lw.rt}::block_scale({p})", None
    g = block_group(fmt, blk)
    z = f"int32_t({zp}[{g}])" if fmt.zero else ("8" if fmt.name == "i4" else None)
    if f16c and fmt.scales == "f16":
        return f"_cvtsh_ss({sp}[{g}])", z
    return f"{lw.rt}::scale_{fmt.scales}({sp}[{g}])", z


def prologue(lw, node, binds, name: str):
    a, b, c = binds
    _, m, k, n = node.spec.op.iter_shape
    check_dot_operands(lw, name, a, (b,), (c,), m, k, n)
    lw.open("{")
    lw.emit(f"// {name}: {m} row(s) of A quantized to int8 (aquant=i8) · {n} column(s) of {b.dtype}, K = {k}")
    aps, cols = _pointers(lw, a, b, m, n)
    return c, aps, cols, lw.fresh("blk")


def _scalar_emit(lw, node, binds) -> None:
    c, aps, cols, blk = prologue(lw, node, binds, "dot_int_scalar")
    fmt, (_, m, k, n) = binds[1].dtype, node.spec.op.iter_shape
    accs = [[lw.fresh("acc") for _ in range(n)] for _ in range(m)]
    lw.emit("float " + ", ".join(f"{x} = 0.0f" for row in accs for x in row) + ";")
    lw.open(f"for (ix {blk} = 0; {blk} < {k // BLOCK}; ++{blk}) {{")
    for ap, row in zip(aps, accs):
        lw.open("{")
        lw.emit(f"const float sa = {lw.rt}::a8_scale({ap} + {blk} * {Q8A.unit_size});")
        lw.emit(f"const int8_t* qa = reinterpret_cast<const int8_t*>({ap} + {blk} * {Q8A.unit_size} + 4);")
        for acc, col in zip(row, cols):
            _scalar_block(lw, fmt, col, blk, acc)
        lw.close()
    lw.close()
    for r, row in enumerate(accs):
        for j, acc in enumerate(row):
            lw.emit(f"{lw.elem(c, (0, r, j))} += {acc};")
    lw.close()


def _scalar_block(lw, fmt, col, blk: str, acc: str) -> None:
    """acc += sa * sb * (the block's int32 sum of qa * (qb - z)), for one row (sa, qa) and column."""
    sb, z = scale_zero(lw, fmt, col, blk)
    q, s = lw.fresh("q"), lw.fresh("s")
    lw.emit(f"const {fmt.ctype}* {q} = {block_ptr(fmt, col[0], blk)};")
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
    c, aps, cols, blk = prologue(lw, node, binds, node.name)
    fmt, (_, m, k, n) = binds[1].dtype, node.spec.op.iter_shape
    blocks = k // BLOCK
    chains = 2 if blocks > 1 else 1  # two FMA chains per output (even and odd blocks): latency, not FMAs, binds
    accs = [[[lw.fresh("acc") for _ in range(chains)] for _ in range(n)] for _ in range(m)]
    lw.emit("__m256 " + ", ".join(f"{x} = _mm256_setzero_ps()" for r in accs for o in r for x in o) + ";")
    if not vnni:
        lw.emit("const __m256i ones16 = _mm256_set1_epi16(1);")

    def chain(i):
        return [[o[i] for o in row] for row in accs]

    if chains == 2:
        lw.open(f"for (ix {blk} = 0; {blk} + 1 < {blocks}; {blk} += 2) {{")
        slots = prefetch_slots(lw, binds[1], cols, k, n, blk, 2 * n)  # after each column of both blocks
        _avx2_block(lw, fmt, aps, cols, blk, chain(0), vnni, slots[:n])
        _avx2_block(lw, fmt, aps, cols, f"({blk} + 1)", chain(1), vnni, slots[n:])
        lw.close()
    if blocks % 2 or chains == 1:
        _avx2_block(lw, fmt, aps, cols, str(blocks - 1), chain(0), vnni)
    for r, row in enumerate(accs):
        for j, o in enumerate(row):
            h, acc = lw.fresh("h"), o[0] if chains == 1 else f"_mm256_add_ps({o[0]}, {o[1]})"
            lw.emit(f"__m256 {h}v = {acc};")
            lw.emit(f"__m128 {h} = _mm_add_ps(_mm256_castps256_ps128({h}v), _mm256_extractf128_ps({h}v, 1));")
            lw.emit(f"{h} = _mm_add_ps({h}, _mm_movehl_ps({h}, {h}));")
            lw.emit(f"{h} = _mm_add_ss({h}, _mm_movehdup_ps({h}));")
            lw.emit(f"{lw.elem(c, (0, r, j))} += _mm_cvtss_f32({h});")
    lw.close()


def dpbusd(target) -> str:
    """The intrinsic of ymm ``vpdpbusd`` on ``target``: AVX512_VNNI's (EVEX, with AVX512VL) or AVX-VNNI's (VEX).
    The same operation (Intel SDM: VPDPBUSD): each int32 lane plus its 4 products of u8 by s8, wrapping."""
    return "_mm256_dpbusd_epi32" if target.has("avx512vnni") else "_mm256_dpbusd_avx_epi32"


def _products(u: str, s: str, vnni: bool, target) -> str:
    """8 int32 lanes, each the sum of 4 products of u8 ``u`` by s8 ``s``: maddubs then madd by ones (pairs
    of products at most 2 * 128 * 127, under 2^15), or one VNNI vpdpbusd."""
    if vnni:
        return f"{dpbusd(target)}(_mm256_setzero_si256(), {u}, {s})"
    return f"_mm256_madd_epi16(_mm256_maddubs_epi16({u}, {s}), ones16)"


def _avx2_block(lw, fmt, aps, cols, blk: str, accs, vnni: bool, prefetches=None) -> None:
    """One block of 32 values: each column's weights widened once (and |qb|), then for every row its
    integer block sum with that column, times sa * sb, into the row and column's accumulator; after column
    j, the statements prefetches[j] (prefetch_slots)."""
    zero_i8 = fmt.name == "i8" and fmt.zero
    lw.open("{")
    sas, qas = [], []
    for ap in aps:
        sas.append(lw.fresh("sa"))
        qas.append(lw.fresh("qa"))
        lw.emit(f"const float {sas[-1]} = {lw.rt}::a8_scale({ap} + {blk} * {Q8A.unit_size});")
        lw.emit(
            f"const __m256i {qas[-1]} = _mm256_loadu_si256(reinterpret_cast<const __m256i*>({ap} + {blk} * 36 + 4));"
        )
        if zero_i8:  # sum qa per lane (maddubs of ones by qa)
            lw.emit(f"const __m256i {qas[-1]}s = {_products('_mm256_set1_epi8(1)', qas[-1], vnni, lw.target)};")
    for j, col in enumerate(cols):
        sb, z = scale_zero(lw, fmt, col, blk, f16c=True)
        qb, sbv = lw.fresh("qb"), lw.fresh("sb")
        lw.emit(f"const __m256i {qb} = {_avx2_weights(fmt, block_ptr(fmt, col[0], blk), None if zero_i8 else z)};")
        lw.emit(f"const __m256i {qb}u = _mm256_sign_epi8({qb}, {qb});")
        lw.emit(f"const float {sbv} = {sb};")
        for r, (sa, qa) in enumerate(zip(sas, qas)):
            p = lw.fresh("p")
            lw.emit(f"__m256i {p} = {_products(f'{qb}u', f'_mm256_sign_epi8({qa}, {qb})', vnni, lw.target)};")
            if zero_i8:
                lw.emit(f"{p} = _mm256_sub_epi32({p}, _mm256_mullo_epi32({qa}s, _mm256_set1_epi32({z})));")
            acc = accs[r][j]
            lw.emit(f"{acc} = _mm256_fmadd_ps(_mm256_cvtepi32_ps({p}), _mm256_set1_ps({sa} * {sbv}), {acc});")
        for stmt in prefetches[j] if prefetches else ():
            lw.emit(stmt)
    lw.close()


def _vector_regs(op, target) -> int:
    _, m, _, n = op.iter_shape
    return 2 * m * n + m + 4  # two accumulators per output, each row's qa; ones, a column's qb, |qb|, products


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
        and src.tile((1, 1, src.shape[2])).unit_stride(2)  # each row dense along K
        and dst.tile((1, 1, dst.shape[2])).unit_stride(2)
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
    applies=dot_applies,
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
    applies=dot_applies,
    cost=lambda op, target: _dot_cost(op, target, vnni=True),
    emit=lambda lw, node, binds: _avx2_emit(lw, node, binds, vnni=True),
    doc="dot_int with AVX-512 VNNI's vpdpbusd (on ymm, AVX512VL) in place of maddubs and madd",
    features=frozenset({"avx512vnni", "avx512vl", "f16c"}),
    vector_regs=_vector_regs,
)
DOT_INT_AVXVNNI = replace(
    DOT_INT_VNNI,
    name="dot_int_avxvnni",
    doc="dot_int_vnni's code with AVX-VNNI's vpdpbusd (VEX, on CPUs without AVX-512)",
    features=frozenset({"avxvnni", "avx2", "f16c"}),
)
DOT_INT_SCALAR = KernelDef(
    name="dot_int_scalar",
    kind="matmul",
    vector=False,
    applies=dot_applies,
    cost=_scalar_cost,
    emit=_scalar_emit,
    doc="n dot products of int8-quantized A with integer weights in int32 scalar loops",
)
