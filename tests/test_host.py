"""Host facts (target/host.py) read from fake sysfs and cpuinfo trees, and the micro-architecture table's
mapping from vendor / family / model (target/microarch.py). No test depends on this machine's CPU."""

from __future__ import annotations

import pytest

from morello_build.target import host, microarch


def fake_cache(root, index: int, level: int, kind: str, size: str, ways: int):
    d = root / f"index{index}"
    d.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size), ("ways_of_associativity", ways)):
        (d / name).write_text(f"{value}\n")


CPUINFO = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC 9654 96-Core Processor
flags		: fpu avx2 fma

processor	: 1
vendor_id	: GenuineIntel
"""


def test_reads_caches_and_cpu_from_fake_trees(tmp_path):
    sysfs = tmp_path / "cache"
    fake_cache(sysfs, 0, 1, "Data", "32K", 8)
    fake_cache(sysfs, 1, 1, "Instruction", "32K", 8)
    fake_cache(sysfs, 2, 2, "Unified", "1024K", 8)
    fake_cache(sysfs, 3, 3, "Unified", "32768K", 16)
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    h = host.read_host(sysfs, tmp_path / "cpuinfo", cpus=4)
    assert (h.vendor, h.family, h.model, h.cpus) == ("AuthenticAMD", 25, 17, 4)
    assert h.model_name == "AMD EPYC 9654 96-Core Processor"
    assert h.l1d == host.Cache(1, 32 << 10, 8) and h.l2 == host.Cache(2, 1 << 20, 8)
    assert h.l3 == host.Cache(3, 32 << 20, 16) and h.caches_source == "sysfs"
    assert microarch.match(h.vendor, h.family, h.model).name == "zen4"
    assert h.flags == frozenset({"fpu", "avx2", "fma"})


def test_unreadable_trees_fall_back(tmp_path):
    sysfs = tmp_path / "cache"
    fake_cache(sysfs, 0, 1, "Data", "garbage", 8)  # unparsable: left out
    h = host.read_host(sysfs, tmp_path / "missing", cpus=1)
    assert h.l1d is None and h.l2 is None and h.vendor == "" and h.family == -1
    assert h.caches_source.startswith("target defaults")
    assert microarch.match(h.vendor, h.family, h.model) is microarch.GENERIC


@pytest.mark.parametrize(
    "vendor, family, model, name",
    [
        ("AuthenticAMD", 0x19, 0x01, "zen3"),  # Milan
        ("AuthenticAMD", 0x19, 0x21, "zen3"),  # Vermeer
        ("AuthenticAMD", 0x19, 0x11, "zen4"),  # Genoa
        ("AuthenticAMD", 0x19, 0x61, "zen4"),  # Raphael
        ("AuthenticAMD", 0x1A, 0x02, "zen5"),  # Turin
        ("GenuineIntel", 6, 0x8F, "golden-cove"),  # Sapphire Rapids
        ("GenuineIntel", 6, 0xCF, "golden-cove"),  # Emerald Rapids
        ("GenuineIntel", 6, 0x55, "skylake-sp"),  # Skylake-SP, Cascade Lake, Cooper Lake
        ("GenuineIntel", 6, 0x6A, "sunny-cove"),  # Ice Lake-SP
        ("GenuineIntel", 6, 0x7E, "sunny-cove-client"),  # Ice Lake client
        ("GenuineIntel", 6, 0x8C, "sunny-cove-client"),  # Tiger Lake
        ("GenuineIntel", 6, 0x9E, "generic-avx2"),  # Coffee Lake: no profile of its own
        ("AuthenticAMD", 0x17, 0x31, "generic-avx2"),  # Zen 2
        ("HygonGenuine", 0x18, 0x00, "generic-avx2"),
    ],
)
def test_microarch_mapping(vendor, family, model, name):
    assert microarch.match(vendor, family, model).name == name


@pytest.mark.parametrize(
    "vendor, family, model, flags, name",
    [
        # a cloud VM's "Intel(R) Xeon(R) Processor" with AMX and AVX512-FP16 that reports model 167
        ("GenuineIntel", 6, 167, {"avx512f", "amx_tile", "avx512_fp16"}, "golden-cove"),
        ("GenuineIntel", 6, 167, {"avx512f", "avx512_vnni"}, "generic-avx2"),  # Rocket Lake: no profile
        ("AuthenticAMD", 6, 167, {"amx_tile"}, "generic-avx2"),  # the flags name a class of another vendor
        ("GenuineIntel", 6, 0x9E, set(), "generic-avx2"),
        ("GenuineIntel", 6, 0x8F, set(), "golden-cove"),  # the model wins where a profile lists it
    ],
)
def test_masked_models_are_matched_by_flags(vendor, family, model, flags, name):
    assert microarch.match(vendor, family, model, frozenset(flags)).name == name


def test_sizes():
    assert [host.parse_size(s) for s in ("32K", "2M", "4096", "x")] == [32768, 2 << 20, 4096, None]


def test_profiles_turn_into_tables_per_vector_width():
    from morello_build.target.costs import CostTable

    assert microarch.BY_NAME["zen4"].cost_table(64) == CostTable()  # the built-in table, unchanged
    zen3, gc = microarch.BY_NAME["zen3"], microarch.BY_NAME["golden-cove"]
    assert zen3.cost_table(32).vec_fma == 0.5 and zen3.cost_table(64).vec_fma == 1.0  # 2 pipes of 256 bits
    assert gc.cost_table(64).vec_fma == 0.5 and gc.cost_table(32).vec_load == pytest.approx(1 / 3, abs=1e-3)
    assert gc.cost_table(32).l2_line == 1.0 and zen3.cost_table(32).l2_line == 2.0
    # Xeon Sunny Cove: two 512-bit FMA pipes; the client parts fuse their two 256-bit ones for zmm
    server, client = microarch.BY_NAME["sunny-cove"], microarch.BY_NAME["sunny-cove-client"]
    assert server.cost_table(64).vec_fma == 0.5 and client.cost_table(64).vec_fma == 1.0
    assert server.cost_table(32).vec_fma == client.cost_table(32).vec_fma == 0.5
    assert microarch.BY_NAME["skylake-sp"].cost_table(64).vec_load == 0.5
    # stream adjustments: measured ones where a profile has them, else the built-in table's (fitted on Zen 4)
    assert gc.cost_table(64).gl_interleaved == zen3.cost_table(32).gl_interleaved == 0.0
    assert zen3.cost_table(32).gl_two_streams == -1.5 and gc.cost_table(64).gl_two_streams == CostTable().gl_two_streams


@pytest.mark.parametrize(
    "profile, isa, columns", [("golden-cove", "avx512", 4), ("zen4", "avx512", 1), ("zen3", "avx2", 4)]
)
def test_the_flagship_gemv_reads_adjacent_columns_side_by_side_where_they_cost_no_more(profile, isa, columns):
    """golden-cove's L2 streamer follows 4 adjacent columns as well as one (an Emerald Rapids read 1x2048x16384 bf16
    4 columns a kernel in 0.75x one column's time, at a read sweep's rate); Zen 4 read 4 at half one's rate; Zen 3
    VMs read 4 faster than one (1.09-1.18x on 1 thread)."""
    from morello_build.ir.impl import Kernel, walk
    from morello_build.tools.api import synthesize_program

    impl = synthesize_program("matmul 1x2048x16384 b=bf16:col", isa=isa, threads=1, db=None, profile=profile)[2]
    kernels = [n for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")]
    assert {k.spec.op.iter_shape[3] for k in kernels} == {columns}, {k.name for k in kernels}


def test_zen3_gated_pair_reads_a_row_of_each_matrix_side_by_side():
    """Two streams of separate matrices cost zen3 less than 4 adjacent columns of one (gl_two_streams under
    gl_interleaved): with both at 0 the pair was split into two GEMVs, 0.90-0.97x the pair's speed."""
    from morello_build.ir.impl import Kernel, walk
    from morello_build.tools.api import synthesize_program

    spec = "gated 1x2560x10240 a=f32 b=bf16:col c=f32 act=gelu serial"
    impl = synthesize_program(spec, isa="avx2", threads=1, db=None, profile="zen3")[2]
    kernels = {n.name for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")}
    assert kernels == {"dot_bf16_widen_pair"}, kernels


def test_host_profile_says_where_its_caches_come_from(monkeypatch, tmp_path):
    from morello_build.target import profiles

    (tmp_path / "cpuinfo").write_text(CPUINFO.replace("model\t\t: 17", "model\t\t: 1"))  # a Zen 3
    facts = host.read_host(tmp_path / "nothing", tmp_path / "cpuinfo", cpus=2)
    monkeypatch.setattr(host, "host_facts", lambda: facts)
    p = profiles.resolve("host")
    assert p.name == "host (zen3, zen3's caches: sysfs unreadable)" and p.l1d == (32 << 10, 8)
