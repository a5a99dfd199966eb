"""int8 dynamic quantization of the activations A (the spec token ``aquant=i8``): the one definition.

With ``aquant=i8`` the program quantizes A itself, once per call (a Move of A into a ``Q8A`` buffer, placed
by the search), and multiplies it with integer weights by integer dot products, as ggml's Q8_0·Q8_0 and
Q4_0·Q8_0 paths and ONNX Runtime's MatMulNBits (accuracy_level 4) do. The numbers change, so it is opt-in.

Semantics (``quantize``, ``matmul``; the header's reference loop and every kernel compute the same):

- A is cut into blocks of ``BLOCK`` = 32 values along K (each row on its own); for a block x,
  ``sa = max|x| / 127`` and ``qa = round_half_even(x * (127 / max|x|))`` clamped to [-127, 127], both
  products and quotients in f32 (an all-zero block: sa = 0, qa = 0). A must be finite.
- C = sum over blocks of ``sa * sb * sum_j qa_j * (qb_j - z)``, with ``qb - z`` the weight's integer value
  (q8_0: q; q4_0: nibble - 8; i8/i4: q - zero point, or q - 8 for i4 without one) and ``sb`` its scale
  (B's groups are multiples of 32 values, so one scale per block). The integer sums are exact; the
  products by ``sa * sb`` and the sum over blocks are f32, in an order fixed by the program.
- Error against the f32 product with unquantized A: |a - sa * qa| <= sa / 2 per value, so
  |C - A·B| <= sum over blocks of |sb| * sa / 2 * sum_j |qb_j - z| (plus the f32 rounding of the sums).

``Q8A`` is the buffer's format: a block of 32 values in 36 bytes, the f32 ``sa`` then the 32 int8 ``qa``.
``F32Q8`` is A's dtype in a spec with ``aquant=i8``: f32 values (as the caller passes them) that only the
quantizing copy reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir.formats import Format

BLOCK = 32
WEIGHTS = ("i8", "i4", "q8_0", "q4_0")  # the weight formats whose values are integers
Q8A = Format("q8a", 8, "uint8_t", BLOCK, BLOCK + 4, BLOCK)


@dataclass(frozen=True)
class QuantizedF32:
    """A's dtype under ``aquant=i8``: f32 in memory, to be quantized (``quantize``) before any product."""

    value: str = "f32.qi8"  # DB keys and descriptions
    bytes: int = 4
    ctype: str = "float"

    def __str__(self) -> str:
        return self.value


F32Q8 = QuantizedF32()


def is_quantized_a(dtype) -> bool:
    return isinstance(dtype, QuantizedF32)


def from_value(text: str):
    """The dtype or buffer format whose value is ``text`` (DB keys), or None."""
    return {F32Q8.value: F32Q8, Q8A.value: Q8A}.get(text)


def problem(b_format, a_dtype, k: int) -> str | None:
    """Why ``aquant=i8`` cannot serve a spec whose B has ``b_format``, A ``a_dtype`` (None: it can)."""
    name = getattr(b_format, "name", None)
    if name not in WEIGHTS:
        what = b_format.value if b_format is not None else "f32"
        return f"B must hold integers ({', '.join('b=' + w for w in WEIGHTS)}), not {what}"
    if getattr(a_dtype, "value", "") != "f32":
        return f"A must be f32 (the quantizing copy reads f32), not {a_dtype.value}"
    if k % BLOCK:
        return f"K = {k} is not a multiple of the {BLOCK}-value blocks A is quantized in"
    if b_format.group % BLOCK:
        return f"B's group of {b_format.group} values is not a multiple of A's {BLOCK}-value blocks"
    return None


# -- numpy: the definitions ---------------------------------------------------------------------------------
def quantize(a):
    """(qa int8, sa f32): A (..., K) quantized per block of 32 along K (qa (..., K), sa (..., K/32))."""
    import numpy as np

    x = np.asarray(a, np.float32)
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
    amax = np.max(np.abs(blocks), axis=-1)
    sa = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((blocks * inv[..., None]).astype(np.float32)), -127, 127).astype(np.int8)
    return q.reshape(x.shape), sa


def fake_quantize(a):
    """A's values as the integer kernels see them, sa * qa, in f32 (the interpreter's Q8A buffers)."""
    import numpy as np

    q, sa = quantize(a)
    blocks = q.reshape(*q.shape[:-1], -1, BLOCK).astype(np.float32) * sa[..., None]
    return blocks.reshape(q.shape).astype(np.float32)


def integer_weights(fmt, data, k: int, scales=None, zeros=None):
    """(qb - z as int32 (columns, K), sb f32 (columns, K/32)): B's integer values and per-block scales."""
    import numpy as np

    from morello_build.ir.formats import _scales_f32, stored_integers

    q, d = stored_integers(fmt, np.ascontiguousarray(data).reshape(-1))
    if d is not None:  # ggml's blocks
        return q.reshape(-1, k), d.reshape(-1, k // BLOCK)
    q = q.reshape(-1, fmt.group)
    z = np.asarray(zeros).reshape(-1, 1).astype(np.int32) if fmt.zero else (8 if fmt.name == "i4" else 0)
    s = _scales_f32(scales, fmt.scales)
    sb = np.repeat(s.reshape(-1), fmt.group // BLOCK)
    return (q - z).reshape(-1, k), sb.reshape(-1, k // BLOCK)


def matmul(a, fmt, data, scales=None, zeros=None):
    """C = the exact semantics (float64) for A (M, K) f32 and B columns stored in ``fmt``: (M, N)."""
    import numpy as np

    a = np.asarray(a, np.float32)
    k = a.shape[-1]
    qa, sa = quantize(a)
    qb, sb = integer_weights(fmt, data, k, scales, zeros)
    m, n, nb = a.shape[0], qb.shape[0], k // BLOCK
    isum = np.einsum("mbj,nbj->mnb", qa.reshape(m, nb, BLOCK).astype(np.int64), qb.reshape(n, nb, BLOCK))
    return np.einsum("mnb,mb,nb->mn", isum.astype(np.float64), sa.astype(np.float64), sb.astype(np.float64))


def error_bound(a, fmt, data, scales=None, zeros=None):
    """The bound on |matmul - A · dequantized B| per output (M, N), without the float rounding."""
    import numpy as np

    a = np.asarray(a, np.float32)
    k = a.shape[-1]
    _, sa = quantize(a)
    qb, sb = integer_weights(fmt, data, k, scales, zeros)
    absq = np.abs(qb).reshape(qb.shape[0], k // BLOCK, BLOCK).sum(axis=-1).astype(np.float64)
    return np.einsum("mb,nb->mn", sa.astype(np.float64) / 2, np.abs(sb).astype(np.float64) * absq)
