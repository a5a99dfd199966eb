"""Weight formats of the quantized-weights benchmark: random tensors in ggml's Q8_0 / Q4_0 block layouts, the
same values in ONNX Runtime's MatMulNBits layout, and references that dequantize exactly as the formats define.

ggml (ggml/src/ggml-common.h, ggml-quants.c ``dequantize_row_q8_0`` / ``dequantize_row_q4_0``), a row of K
values is K/32 blocks, one block 32 values:
- ``block_q8_0`` (34 bytes): ``ggml_half d; int8_t qs[32]``; value i = d * qs[i].
- ``block_q4_0`` (18 bytes): ``ggml_half d; uint8_t qs[16]``; value i = d * ((qs[i] & 0xF) - 8) and value
  i + 16 = d * ((qs[i] >> 4) - 8) for i < 16 (low nibbles: the first half of the block).
ONNX Runtime ``MatMulNBits`` (com.microsoft, docs/ContribOperators.md): B is uint8 ``[N, K/bs, bs*bits/8]``,
scales ``[N * K/bs]``, no zero points = 2^(bits-1); 4 bits: value 2j in the low nibble, 2j+1 in the high one;
value = (q - zero_point) * scale. The ORT tensors here hold the very values of the ggml blocks (scales widened
from fp16 to f32, exactly), so every implementation computes the same product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QK = 32  # values per block (Q8_0, Q4_0, and the ORT block size used here)
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}
GGML_TYPE = {"q8_0": 8, "q4_0": 2}  # enum ggml_type


@dataclass(frozen=True)
class QWeights:
    """One weight copy: the ggml blocks (``raw``: uint8 [N, K/32 * block bytes]) and the decoded fields."""

    fmt: str
    raw: np.ndarray
    d: np.ndarray  # float16 [N, K/32]
    q: np.ndarray  # int8 [N, K/32, 32]: the signed integer values (Q4_0: nibble - 8)


def random_weights(fmt: str, n: int, k: int, rng: np.random.Generator) -> QWeights:
    """Random blocks of a valid tensor (finite fp16 scales, Q8_0 values in [-127, 127])."""
    if k % QK:
        raise ValueError(f"K={k} is not a multiple of the block size {QK}")
    nb = k // QK
    d = rng.uniform(0.002, 0.02, (n, nb)).astype(np.float16)
    lo, hi = (-127, 128) if fmt == "q8_0" else (-8, 8)
    q = rng.integers(lo, hi, (n, nb, QK), dtype=np.int8)
    raw = np.empty((n, nb, BLOCK_BYTES[fmt]), np.uint8)
    raw[:, :, :2] = d.view(np.uint8).reshape(n, nb, 2)
    if fmt == "q8_0":
        raw[:, :, 2:] = q.view(np.uint8)
    else:
        u = (q + 8).astype(np.uint8)
        raw[:, :, 2:] = u[:, :, :16] | (u[:, :, 16:] << 4)
    return QWeights(fmt, raw.reshape(n, nb * BLOCK_BYTES[fmt]), d, q)


def dequantize(fmt: str, raw: np.ndarray, k: int) -> np.ndarray:
    """float32 [N, K] from ggml block bytes, by the format's definition (not from QWeights' fields)."""
    n = raw.shape[0]
    nb = k // QK
    blocks = raw.reshape(n, nb, BLOCK_BYTES[fmt])
    d = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)  # [N, nb, 1]
    if fmt == "q8_0":
        q = blocks[:, :, 2:].view(np.int8).astype(np.float32)
    else:
        qs = blocks[:, :, 2:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=2).astype(np.float32) - 8.0
    return (d * q).reshape(n, k)


def ort_tensors(w: QWeights) -> tuple[np.ndarray, np.ndarray, int]:
    """(B uint8 [N, K/32, bytes per block], scales float32 [N * K/32], bits) for MatMulNBits, same values."""
    n, nb, _ = w.q.shape
    scales = w.d.astype(np.float32).reshape(n * nb)
    if w.fmt == "q8_0":
        return (w.q.astype(np.int16) + 128).astype(np.uint8), scales, 8
    u = (w.q + 8).astype(np.uint8)
    return u[:, :, 0::2] | (u[:, :, 1::2] << 4), scales, 4


@dataclass(frozen=True)
class Reference:
    """Exact product of copy 0 and the error each kind of implementation may make."""

    y: np.ndarray  # float64 [M, N]
    tol_f32: np.ndarray  # f32 activations: accumulation-order error
    tol_q8: np.ndarray  # activations quantized to int8 per block of 32 (scale amax/127, fp16 or f32)


def reference(w_deq: np.ndarray, x: np.ndarray) -> Reference:
    wd = w_deq.astype(np.float64)
    y = x.astype(np.float64) @ wd.T
    absw = np.abs(w_deq)
    mag = np.abs(x) @ absw.T  # sum |a| |b|
    m, k = x.shape
    amax = np.abs(x).reshape(m, k // QK, QK).max(axis=2)
    # round to nearest: |err| <= d/2 per value, plus an fp16 scale's relative rounding (2^-11) times 127 d
    step = np.repeat(amax / 127.0 * 0.57, QK, axis=1).astype(np.float32)
    tol_f32 = 1e-4 * mag + 1e-6
    return Reference(y, tol_f32, tol_f32 + step @ absw.T)


def check(got: np.ndarray, ref: Reference, int8_act: bool) -> str:
    """Empty when every output is within tolerance; else a description of the worst one."""
    tol = ref.tol_q8 if int8_act else ref.tol_f32
    err = np.abs(got.astype(np.float64) - ref.y)
    bad = ~(err <= tol)
    if not bad.any():
        return ""
    i, j = np.unravel_index(np.argmax(np.where(bad, err / tol, 0)), err.shape)
    return f"WRONG RESULT at C[{i},{j}]: got {got[i, j]:.6g}, expected {ref.y[i, j]:.6g} ({bad.sum()} outputs off)"
