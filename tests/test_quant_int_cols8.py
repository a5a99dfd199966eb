"""dot_int_cols8 (target/kernels/quant_int_cols8.py: 4-bit weights, eight columns in a ymm's lanes, AVX2).

Generated kernels with it forced (the other integer dot kernels out of the catalog) against the exact semantics
on avx2, at awkward sizes: M = 2..4, N = 8..24, K of one block, odd block counts and a long K (the loop's
prefetches), groups of 32, 64, 96, 192 and channel, scales f16 / bf16 / f32, i4 with and without zero points;
the ISAs that have it; and the search's choice at M = 4. Its AVX-VNNI form (dot_int_cols8_avxvnni) likewise,
run with vpdpbusd emulated where the CPU lacks it."""

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
from tests.test_quant_int import _check_program, _run_emulating_avxvnni

NAME = "dot_int_cols8"
SPECS = [
    "matmul 2x32x8 b=q4_0 aquant=i8",  # one block
    "matmul 2x96x16 b=q4_0 aquant=i8",  # 3 blocks, two groups of columns
    "matmul 4x2144x8 b=q4_0 aquant=i8",  # 67 blocks: the loop, prefetches
    "matmul 3x224x24 b=q4_0 aquant=i8",
    "matmul 4x32x8 b=i4:col group=32 scales=f16 aquant=i8",  # i4: A's copy in evens and odds
    "matmul 2x2144x8 b=i4:col group=32 scales=bf16 aquant=i8",  # 67 blocks
    "matmul 3x320x16 b=i4:col group=64 scales=f32 aquant=i8",
    "matmul 4x288x8 b=i4:col group=96 scales=f16 aquant=i8",  # groups straddling the first dword of scales
    "matmul 2x576x8 b=i4:col group=192 scales=bf16 aquant=i8",
    "matmul 2x192x24 b=i4:col group=channel scales=bf16 aquant=i8",
    "matmul 3x96x8 b=i4:col group=channel scales=f16 aquant=i8",
    "matmul 4x64x16 b=i4:col group=channel scales=f32 aquant=i8",
    "matmul 3x224x8 b=i4:col group=32 scales=f16 zero aquant=i8",  # zero points: 7 blocks, a group each
    "matmul 4x2112x16 b=i4:col group=64 scales=bf16 zero aquant=i8",  # 66 blocks: the prefetches of 3 arrays
    "matmul 2x288x24 b=i4:col group=96 scales=f32 zero aquant=i8",
    "matmul 4x96x8 b=i4:col group=channel scales=f16 zero aquant=i8",
]
VNNI = "dot_int_cols8_avxvnni"
RIVALS = ("dot_int", "dot_int_vnni", "dot_int4", "dot_int4_vnni", "dot_int_scalar")
VNNI_RIVALS = ("dot_int_avxvnni", "dot_int4_avxvnni", NAME)


def _forced_headers(isa: str, name: str) -> list[str]:
    """Every spec's header on ``isa``, each program's dot kernel ``name`` (the caller takes its rivals out)."""
    target, headers = get_target(isa, threads=2), []
    search = shared_search.new_search(target)  # this catalog's: one memo for the specs below
    for i, text in enumerate(SPECS):
        user = parse_spec(text)
        impl = search.best(user.to_spec(target.limits()))
        names = {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")}
        assert names == {name}, (text, names)
        headers.append(emit_header(user, impl, target, name=f"k{i}", namespace=f"qi{i}"))
    return headers


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_matches_the_exact_semantics(tmp_path, monkeypatch, request):
    shared_search.without_kernels(RIVALS, monkeypatch, request)
    _check_program("avx2", tmp_path, SPECS, _forced_headers("avx2", NAME))


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_avxvnni_form_matches_the_exact_semantics(tmp_path, monkeypatch, request):
    """vpdpbusd onto int32 sums (no maddubs, adds or madd), on avx2_vnni; emulated where the CPU lacks it."""
    shared_search.without_kernels(RIVALS + VNNI_RIVALS, monkeypatch, request)
    headers = _forced_headers("avx2_vnni", VNNI)
    assert all("_mm256_dpbusd_avx_epi32(" in h and "_mm256_maddubs_epi16(" not in h for h in headers)
    _check_program("avx2_vnni", tmp_path, SPECS, headers, run=_run_emulating_avxvnni)


@pytest.mark.parametrize("isa", ["avx2", "avx2_vnni", "highway", "avx512", "avx512_vnni", "avx512_bf16"])
def test_available_where_the_cpus_have_avx2(isa):
    assert catalog.BY_NAME[NAME] in get_target(isa).kernels()
    assert catalog.BY_NAME[NAME] not in get_target("scalar").kernels()
    assert (catalog.BY_NAME[VNNI] in get_target(isa).kernels()) == (isa == "avx2_vnni")


@pytest.mark.parametrize(
    "b, profile",
    [("b=q4_0", "builtin"), ("b=i4:col group=32 scales=f16 zero", "builtin"), ("b=i4:col group=32 scales=f16", "zen3")],
)
def test_search_picks_it_at_m4(b, profile):
    """M = 4 is compute-bound on AVX2: dot_int4 spends a madd, convert and FMA per output, this kernel one per 8
    (4x2048x16384 from DRAM, one thread, Zen 3, scripts/kernel_ab.py: q4_0 4379 us vs dot_int4 6556, i4 g32
    3598 vs 6198; 3x2560x10240 q4_0 2379 vs 3899)."""
    target = get_target("avx2", threads=1, profile=profile)
    impl, _ = synthesize(parse_spec(f"matmul 4x2048x16384 {b} aquant=i8").to_spec(target.limits()), target)
    assert {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")} == {NAME}


def test_search_picks_the_avxvnni_form_on_avx2_vnni():
    """One vpdpbusd per two of maddubs, adds and madd: the cheaper of the two wherever both apply."""
    target = get_target("avx2_vnni", threads=1)
    impl, _ = synthesize(parse_spec("matmul 4x2048x16384 b=q4_0 aquant=i8").to_spec(target.limits()), target)
    assert {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")} == {VNNI}
