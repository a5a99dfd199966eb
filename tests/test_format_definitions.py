"""The weight formats' definitions (ir/formats.py dequantize) against bytes built by hand from each format's
own definition: ggml's Q8_0 and Q4_0 (ggml-common.h, ggml-quants.c), gemma.cpp's I8 and SFP
(compression/int-inl.h, sfp-inl.h), and the i4 nibble order."""

from __future__ import annotations

import struct

import numpy as np

from morello_build.ir.formats import GEMMA_I8, Q4_0, Q8_0, SFP, dequantize, grouped


def _f16_bits(x: float) -> bytes:
    return struct.pack("<e", x)


def test_q8_0_known_answer():
    # ggml block_q8_0 (ggml-common.h): fp16 d, then int8 qs[32]; value = d * q.
    qs = list(range(-16, 16))
    block = _f16_bits(0.5) + bytes(q & 0xFF for q in qs)
    assert len(block) == 34
    got = dequantize(Q8_0, np.frombuffer(block, np.uint8), 32)
    np.testing.assert_array_equal(got[0], np.array(qs, np.float32) * 0.5)


def test_q4_0_known_answer():
    # ggml block_q4_0: fp16 d, then qs[16]; byte j: element j in the low nibble, j + 16 in the high one;
    # value = d * (nibble - 8) (ggml-quants.c dequantize_row_q4_0).
    lo, hi = [j % 16 for j in range(16)], [15 - j for j in range(16)]
    block = _f16_bits(2.0) + bytes(l_ | (h << 4) for l_, h in zip(lo, hi))
    got = dequantize(Q4_0, np.frombuffer(block, np.uint8), 32)
    want = (np.array(lo + hi, np.float32) - 8) * 2
    np.testing.assert_array_equal(got[0], want)


def _bf16_bits(x: float) -> bytes:
    return struct.pack("<f", x)[2:]  # exact for the values used here


def test_gemma_i8_known_answer():
    # gemma.cpp I8Stream (compression/int-inl.h): per group of 128, bf16 inv_scale, bf16 zeropoint, then
    # int8 q[128]; value = inv_scale * q + (-zeropoint * inv_scale) (IntCodec::DequantizeGroup).
    qs = [(j % 64) - 32 for j in range(128)]
    group = _bf16_bits(0.25) + _bf16_bits(-3.0) + bytes(q & 0xFF for q in qs)
    assert len(group) == 132
    got = dequantize(GEMMA_I8, np.frombuffer(group * 2, np.uint8), 256)
    want = (np.array(qs, np.float32) + 3) * 0.25
    np.testing.assert_array_equal(got[0], np.concatenate([want, want]))


def test_sfp_known_answer():
    # gemma.cpp SFP (compression/sfp-inl.h): DecBytes' AVX-512 tables give the bf16 bytes hi/lo of each code
    # 0..127: code 1 -> 0x3420, 8 -> 0x3500, 63 -> 0x3BE0, 64 -> 0x3C00, 65 -> 0x3C10, 127 -> 0x3FF0; 0 is zero;
    # bit 7 is the sign.
    codes = [0, 1, 8, 63, 64, 65, 127, 0x80 | 65, 0x80 | 1]
    bits = [0, 0x3420, 0x3500, 0x3BE0, 0x3C00, 0x3C10, 0x3FF0, 0xBC10, 0xB420]
    want = (np.array(bits, np.uint32) << 16).view(np.float32)
    got = dequantize(SFP, np.array(codes, np.uint8), len(codes))
    np.testing.assert_array_equal(got[0], want)
    assert want[6] == 1.875 and want[1] == 1.25 * 2.0**-23  # the largest magnitude; the smallest, as documented


def test_i4_nibble_order_and_zero_point():
    fmt = grouped("i4", 4, "f32", True)
    data = np.array([0x21, 0x43, 0xF0, 0x0F], np.uint8)  # column values 1,2,3,4 then 0,15,15,0
    got = dequantize(fmt, data, 8, scales=np.array([2.0], np.float32), zeros=np.array([1, 3], np.uint8)[:1])
    np.testing.assert_array_equal(got[0, :4], [0, 2, 4, 6])
