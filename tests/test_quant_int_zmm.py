"""The aquant kernels on zmm: dot_int4_vnni512 (target/kernels/quant_int4_zmm.py: 4-bit weights, four blocks a
step), dot_int_vnni512 (quant_int_zmm.py: 8-bit weights, two blocks a step) and dot_int_cols16
(quant_int_cols.py: 16 columns in a zmm's lanes; N a multiple of 16, M 2..6).

Generated kernels with each forced (its rivals out of the catalog) against the exact semantics on avx512_bf16,
at awkward sizes: N = 1 and primes, block counts that leave blocks for the masked last step (and K of one
block: that step alone), M = 1..8, groups of 32, 64, 96, 128, 192 and channel, scales f16 / bf16 / f32, with
and without zero points; where they apply; and the search's choice at M = 4."""

from __future__ import annotations

import pytest
import shared_search

from morello_build.codegen import emit_header
from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Kernel, walk
from morello_build.synth.search import synthesize
from morello_build.target import get_target
from morello_build.target import kernels as catalog
from tests.test_quant import HAVE_CXX
from tests.test_quant_int import _check_program

SPECS4 = [
    "matmul 1x32x1 b=q4_0 aquant=i8",  # one block: the masked step alone
    "matmul 5x64x3 b=q4_0 aquant=i8",
    "matmul 8x160x1 b=q4_0 aquant=i8",  # 5 blocks: a step and one block
    "matmul 3x288x5 b=q4_0 aquant=i8",  # 9 blocks
    "matmul 2x96x7 b=q4_0 aquant=i8",  # 3 blocks
    "matmul 6x224x1 b=i4:col group=32 scales=f32 zero aquant=i8",  # 7 blocks
    "matmul 2x384x7 b=i4:col group=128 scales=f16 zero aquant=i8",  # a step per group
    "matmul 3x320x2 b=i4:col group=64 scales=bf16 zero aquant=i8",  # two groups a step; 10 blocks
    "matmul 4x96x2 b=i4:col group=channel scales=f16 zero aquant=i8",
    "matmul 7x448x3 b=i4:col group=64 scales=f16 aquant=i8",
    "matmul 8x256x1 b=i4:col group=32 scales=f16 aquant=i8",
    "matmul 1x480x13 b=i4:col group=96 scales=f16 zero aquant=i8",  # groups straddling steps
    "matmul 2x640x5 b=i4:col group=channel scales=bf16 zero aquant=i8",
    "matmul 4x576x2 b=i4:col group=192 scales=f32 zero aquant=i8",
    "matmul 2x128x4 b=i4:col group=64 scales=f32 aquant=i8",
    "matmul 4x2112x2 b=i4:col group=32 scales=f16 zero aquant=i8",  # 66 blocks: the loop, prefetches, 2 left
]
SPECS8 = [
    "matmul 1x32x1 b=q8_0 aquant=i8",  # one block: the masked step alone
    "matmul 5x64x3 b=q8_0 aquant=i8",
    "matmul 8x160x1 b=q8_0 aquant=i8",  # 5 blocks: two steps and one block
    "matmul 3x96x5 b=q8_0 aquant=i8",
    "matmul 4x2112x2 b=q8_0 aquant=i8",  # 66 blocks: the loop, prefetches
    "matmul 6x224x1 b=i8:col group=32 scales=f32 zero aquant=i8",  # 7 blocks
    "matmul 2x384x7 b=i8:col group=128 scales=f16 zero aquant=i8",
    "matmul 3x320x2 b=i8:col group=64 scales=bf16 zero aquant=i8",
    "matmul 4x96x2 b=i8:col group=channel scales=f16 zero aquant=i8",
    "matmul 7x448x3 b=i8:col group=64 scales=f16 aquant=i8",
    "matmul 1x480x13 b=i8:col group=96 scales=f16 zero aquant=i8",  # groups straddling steps
    "matmul 2x576x5 b=i8:col group=channel scales=bf16 aquant=i8",
]
SPECS_COLS = [  # dot_int_cols16: M 2..6, N a multiple of 16
    "matmul 2x32x16 b=q8_0 aquant=i8",  # one block: the single-block step alone
    "matmul 5x160x32 b=q8_0 aquant=i8",  # 5 blocks: two steps and one block; two groups
    "matmul 4x2112x16 b=q8_0 aquant=i8",  # 66 blocks: the loop, prefetches
    "matmul 3x96x48 b=q4_0 aquant=i8",
    "matmul 4x2144x32 b=q4_0 aquant=i8",  # 67 blocks
    "matmul 2x224x16 b=i8:col group=32 scales=f32 aquant=i8",  # 7 blocks
    "matmul 4x384x16 b=i8:col group=128 scales=f16 aquant=i8",
    "matmul 5x320x16 b=i8:col group=64 scales=bf16 aquant=i8",  # a group per step
    "matmul 3x288x16 b=i8:col group=96 scales=bf16 aquant=i8",  # groups straddling steps; the last block alone
    "matmul 4x96x32 b=i8:col group=channel scales=f16 aquant=i8",
    "matmul 6x64x16 b=i8:col group=channel scales=f32 aquant=i8",
    "matmul 2x32x16 b=i8:col group=32 scales=f16 aquant=i8",
    "matmul 2x32x16 b=i4:col group=32 scales=f16 aquant=i8",  # i4: A's copy in evens and odds
    "matmul 4x2144x16 b=i4:col group=32 scales=bf16 aquant=i8",  # 67 blocks: the loop, prefetches
    "matmul 5x320x16 b=i4:col group=64 scales=f32 aquant=i8",
    "matmul 6x288x16 b=i4:col group=96 scales=f16 aquant=i8",
    "matmul 2x192x48 b=i4:col group=channel scales=bf16 aquant=i8",
    "matmul 3x224x16 b=i8:col group=32 scales=f16 zero aquant=i8",  # zero points: groups 0..6, the last alone
    "matmul 3x384x16 b=i8:col group=96 scales=bf16 zero aquant=i8",  # groups straddling steps
    "matmul 4x96x32 b=i8:col group=channel scales=f32 zero aquant=i8",
    "matmul 5x384x16 b=i4:col group=64 scales=bf16 zero aquant=i8",  # a group per step
    "matmul 2x288x16 b=i4:col group=32 scales=f16 zero aquant=i8",
    "matmul 6x64x16 b=i4:col group=channel scales=f16 zero aquant=i8",
]
KERNELS = {"dot_int4_vnni512": SPECS4, "dot_int_vnni512": SPECS8, "dot_int_cols16": SPECS_COLS}
RIVALS = ("dot_int", "dot_int_vnni", "dot_int4", "dot_int4_vnni", "dot_int_scalar")


def _force(name, monkeypatch, request):
    """The catalog without the other integer dot kernels."""
    shared_search.without_kernels(RIVALS + tuple(k for k in KERNELS if k != name), monkeypatch, request)


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_matches_the_exact_semantics(name, tmp_path, monkeypatch, request):
    _force(name, monkeypatch, request)
    target, headers = get_target("avx512_bf16", threads=2), []
    search = shared_search.new_search(target)  # this catalog's: one memo for the specs below
    for i, text in enumerate(KERNELS[name]):
        user = parse_spec(text)
        impl = search.best(user.to_spec(target.limits()))
        names = {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")}
        assert names == {name}, (text, names)
        headers.append(emit_header(user, impl, target, name=f"k{i}", namespace=f"qi{i}"))
    if name == "dot_int4_vnni512":  # i4 both ways: nibbles into value order (rows > columns / 2), A's qa split
        assert any("_mm512_unpacklo_epi8(" in h for h in headers) and any("evens_odds)" in h for h in headers)
    _check_program("avx512_bf16", tmp_path, KERNELS[name], headers)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_only_where_the_cpus_have_avx512_vnni(name):
    for isa in ("avx512_bf16", "avx512_vnni"):
        assert catalog.BY_NAME[name] in get_target(isa).kernels(), isa
    for isa in ("avx512", "avx2", "highway", "scalar"):  # avx512: AVX-512 F/BW/VL/DQ, no VNNI
        assert catalog.BY_NAME[name] not in get_target(isa).kernels(), isa


PICKS = [
    ("b=q4_0", "dot_int_cols16"),
    ("b=i4:col group=32 scales=f16", "dot_int_cols16"),
    ("b=i4:col group=32 scales=f16 zero", "dot_int_cols16"),
    ("b=q8_0", "dot_int_cols16"),
    ("b=i8:col group=32 scales=f16 zero", "dot_int_cols16"),
]


@pytest.mark.parametrize("b, name", PICKS)
@pytest.mark.parametrize("profile", ["builtin", "golden-cove"])
def test_search_picks_them_at_m4(b, name, profile):
    """M = 4 is compute-bound: per step the zmm kernels' vpdpbusd, convert, multiply and FMA per output do
    twice the values of the ymm ones' (4x2048x16384, warm, 1 thread, Intel Xeon, scripts/kernel_ab.py: q4_0
    2754 us vs dot_int4_vnni 2968, i4 g32 2371 vs 2820; q8_0 4030 vs dot_int_vnni 4403), and dot_int_cols16
    spends one convert, multiply and FMA on 16 outputs (the same shape from DRAM, Zen 4: i8 g32 2320 us vs
    dot_int_vnni512 3201, q8_0 2414 vs 3401, q4_0 1658 vs dot_int4_vnni512 2594, i4 g32 1657 vs 2667; with zero
    points i4 g32 2086 vs 2952, i8 g32 2882 vs dot_int_vnni512 3873)."""
    target = get_target("avx512_bf16", threads=1, profile=profile)
    u = parse_spec(f"matmul 4x2048x16384 {b} aquant=i8")
    impl, _ = synthesize(u.to_spec(target.limits()), target)
    assert {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")} == {name}
