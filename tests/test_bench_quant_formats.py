"""The quantized-weights benchmark's references (bench/quant/formats.py) on hand-built blocks: Q8_0 and Q4_0 as
ggml defines them, the same values in ONNX Runtime's MatMulNBits layout, and the check catching a wrong nibble
order. Pure numpy, no peer library needed (a few milliseconds)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "quant"))
import formats  # noqa: E402


def test_q8_0_block_by_hand():
    # d = 0.25 (fp16 0x3400, little-endian), qs = -16 .. 15
    block = bytes([0x00, 0x34]) + bytes((q & 0xFF) for q in range(-16, 16))
    got = formats.dequantize("q8_0", np.frombuffer(block, np.uint8).reshape(1, 34), 32)
    assert np.array_equal(got[0], 0.25 * np.arange(-16, 16, dtype=np.float32))


def test_q4_0_block_by_hand():
    # d = 0.5 (fp16 0x3800); byte i: low nibble i (value i), high nibble 15 - i (value 16 + i)
    block = bytes([0x00, 0x38]) + bytes(i | ((15 - i) << 4) for i in range(16))
    got = formats.dequantize("q4_0", np.frombuffer(block, np.uint8).reshape(1, 18), 32)
    want = 0.5 * (np.array(list(range(16)) + [15 - i for i in range(16)], np.float32) - 8)
    assert np.array_equal(got[0], want)


def _ort_dequantize(b, scales, bits, n, k):
    """MatMulNBits' definition: value = (q - 2^(bits-1)) * scale; 4 bits: value 2j low nibble, 2j+1 high."""
    if bits == 8:
        q = b.reshape(n, k).astype(np.float32)
    else:
        q = np.stack([b & 0xF, b >> 4], axis=-1).reshape(n, k).astype(np.float32)
    return (q - 2 ** (bits - 1)) * np.repeat(scales.reshape(n, k // 32), 32, axis=1)


def test_random_weights_and_ort_layout_hold_the_same_values():
    rng = np.random.default_rng(0)
    for fmt in ("q8_0", "q4_0"):
        w = formats.random_weights(fmt, 3, 64, rng)
        deq = formats.dequantize(fmt, w.raw, 64)
        assert np.array_equal(deq, (w.d.astype(np.float32)[:, :, None] * w.q).reshape(3, 64))
        assert np.array_equal(_ort_dequantize(*formats.ort_tensors(w), 3, 64), deq)


def test_check_flags_a_swapped_nibble_order():
    rng = np.random.default_rng(1)
    w = formats.random_weights("q4_0", 8, 256, rng)
    x = rng.uniform(-1, 1, (1, 256)).astype(np.float32)
    ref = formats.reference(formats.dequantize("q4_0", w.raw, 256), x)
    assert formats.check((x @ formats.dequantize("q4_0", w.raw, 256).T).astype(np.float32), ref, False) == ""
    blocks = w.raw.reshape(8, 8, 18).copy()
    blocks[:, :, 2:] = (blocks[:, :, 2:] >> 4) | (blocks[:, :, 2:] << 4)  # high and low nibbles swapped
    wrong = x @ formats.dequantize("q4_0", blocks.reshape(8, 144), 256).T
    assert formats.check(wrong.astype(np.float32), ref, True).startswith("WRONG RESULT")
