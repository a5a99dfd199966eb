"""Micro-architecture profiles as data: the per-core figures the cost table is derived from, each with
its public source, and the mapping from a CPU's vendor / family / model to one of them.

Sources (cited per figure below by their tag):
- [AMD19] AMD, "Software Optimization Guide for AMD EPYC 7003 Processors" (Family 19h, Zen 3, pub. 56665),
  section 2.11-2.12 (FP unit, load-store unit); AnandTech's Zen 3 deep dive (2020): "a single FMA takes 4 cycles
  with a throughput of 2/clock".
- [AMD19-4] AMD, "Software Optimization Guide for the AMD Zen4 Microarchitecture" (pub. 57647); A. Yee,
  "Zen4's AVX512 Teardown" (numberworld.org, 2022): 512-bit ops double-pumped on the 256-bit pipes.
- [AMD1A] AMD, "Software Optimization Guide for the AMD Zen5 Microarchitecture" (pub. 58455); A. Yee,
  "Zen5's AVX512 Teardown" (numberworld.org/blogs/2024_8_7_zen5_avx512_teardown): native 512-bit FMA pipes.
- [INTEL] Intel 64 and IA-32 Architectures Optimization Reference Manual, vol. 1, Golden Cove chapter;
  Chips and Cheese, "Popping the Hood on Golden Cove" (2021) and "Sapphire Rapids: Golden Cove Hits Servers"
  (2023): 3x256-bit or 2x512-bit loads per cycle, 2x512-bit FMA on server parts, 48 KiB 12-way L1D, 2 MiB L2.
- [UOPS] uops.info instruction tables (Abel, Reineke: measured port usage per micro-architecture), and LLVM's
  scheduling models built from the vendors' guides (X86ScheduleZnver3.td: "Integer Multiplies ... FP0, FP3",
  "Data Shuffles, Packs, Unpacks, Permute ... FP1, FP2", "Bit Shift ... FP1, FP2"; Intel: vpshufb, vpunpck*
  ymm on ports 1 and 5 since Ice Lake, lane-crossing vpermq / vperm2i128 / vinserti128 and broadcasts from a
  register on port 5 alone, every zmm shuffle on port 5; vpmaddubsw / vpmaddwd / vpmullw / vpdpbusd ymm on
  ports 0 and 1, zmm on port 0).
- [INTEL-SKX] Intel 64 and IA-32 Architectures Optimization Reference Manual, vol. 1, Skylake Server
  microarchitecture: two 512-bit FMA units (ports 0+1 fused, port 5) on Xeon Platinum and Gold 6000 parts (one,
  ports 0+1, on the others), two 64-byte loads and one 64-byte store per cycle, 32 KiB 8-way L1D, 1 MiB 16-way L2
  filling L1 at 64 B/cycle; the same core in Cascade Lake and Cooper Lake.
- [INTEL-ICL] the same manual, Ice Lake (Sunny Cove) microarchitecture: 5-wide allocation, 48 KiB 12-way L1D, two
  loads and two stores per cycle (one 64-byte store), 512-bit FMA on ports 0+1 fused, plus port 5 on Xeon
  (Ice Lake-SP / -D); L2 1.25 MiB on Xeon, 512 KiB on client parts (Tiger Lake's Willow Cove: 1.25 MiB).
- [INTEL-SNB] the same manual, Sandy Bridge microarchitecture, "Data Prefetching": the L2 streamer keeps track of
  up to 32 streams, one forward and one backward per 4 KiB page (stated for Sandy Bridge; taken to hold for its
  successors, and measured on an Emerald Rapids: golden-cove's gl_interleaved).
- [AGNER] A. Fog, "The microarchitecture of Intel, AMD and VIA CPUs" and "Instruction tables" (Skylake:
  2 FMA pipes of 256 bits, latency 4, 2 loads + 1 store per cycle, 4-wide, L2->L1 64 B/cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from morello_build.target.costs import CostTable


@dataclass(frozen=True)
class Microarch:
    name: str
    vendor: str  # cpuinfo vendor_id
    models: tuple[tuple[int, int, int], ...]  # (family, first model, last model) this profile covers
    fma_pipes: int  # vector FMA pipes
    fma_bits: int  # width of one FMA pipe: a wider vector takes vector_bits / fma_bits pipe slots
    fma_latency: int  # cycles
    loads_256: float  # 256-bit vector loads per cycle from L1
    loads_512: float  # 512-bit vector loads per cycle (0: no AVX-512)
    stores_256: float  # 256-bit vector stores per cycle to L1
    stores_512: float
    dispatch: int  # macro-ops dispatched (renamed) per cycle
    l2_fill_bytes: int  # bytes per cycle L2 delivers to L1
    l1d: tuple[int, int]  # (bytes, ways): the class's usual L1D (the host's sysfs figures win when read)
    l2_bytes: int
    # 256-bit vector shuffles (permutes, unpacks, inserts, broadcasts from a register) and integer multiplies
    # (maddubs, madd, mullo, vpdpbusd) per cycle: the kernels counting vec_shuffle and vec_imul issue ymm ones
    shuffles: float = 1.0
    imuls: float = 2.0
    # Pipes every vector instruction shares, for 256-bit and for 512-bit vectors (CostTable.vec_pipes; 0: the
    # port classes count apart, as in the built-in table).
    vector_pipes_256: int = 0
    vector_pipes_512: int = 0
    # CPU flags (any one) that only this class has within its vendor and families: they match a CPU whose
    # model number a hypervisor masks (a cloud "Intel Xeon Processor" with AMX that reports model 167).
    flags_any: frozenset[str] = frozenset()
    builtin: bool = False  # its cost table is the hand-tuned built-in one (programs unchanged)
    # Measured (calibrate's two_streams_line and the gated pair's programs; no public source gives it):
    # cycles a DRAM line of two interleaved streams of separate operands costs beyond one stream's.
    # None: the built-in table's, fitted on Zen 4.
    gl_two_streams: float | None = None
    # The same for a line of one of several adjacent columns read side by side (a dot kernel's; calibrate's
    # interleaved_line). None: the built-in table's, fitted on Zen 4 (4 columns at half one column's rate).
    gl_interleaved: float | None = None

    def covers(self, vendor: str, family: int, model: int) -> bool:
        return vendor == self.vendor and any(f == family and lo <= model <= hi for f, lo, hi in self.models)

    def covers_by_flags(self, vendor: str, family: int, flags: frozenset[str]) -> bool:
        return vendor == self.vendor and any(f == family for f, _, _ in self.models) and bool(self.flags_any & flags)

    def cost_table(self, vector_bytes: int) -> CostTable:
        """The built-in table with the figures this profile knows put in for ``vector_bytes`` vectors.
        Platform figures (DRAM, prefetchers, threads) stay the built-in ones: `calibrate` measures them."""
        base = CostTable()
        if self.builtin:
            return base
        bits = vector_bytes * 8 or 256  # scalar targets: the FMA figures do not matter
        per_cycle = self.fma_pipes * min(1.0, self.fma_bits / bits)
        loads = self.loads_512 if bits > 256 else self.loads_256
        stores = self.stores_512 if bits > 256 else self.stores_256
        return replace(
            base,
            vec_fma=round(1 / per_cycle, 4),
            fma_latency=float(self.fma_latency),
            vec_load=round(1 / loads, 4) if loads else base.vec_load * 2,
            vec_store=round(1 / stores, 4) if stores else base.vec_store * 2,
            vec_shuffle=round(1 / self.shuffles, 4),
            vec_imul=round(1 / self.imuls, 4),
            l2_line=round(64 / self.l2_fill_bytes, 4),
            gl_two_streams=base.gl_two_streams if self.gl_two_streams is None else self.gl_two_streams,
            gl_interleaved=base.gl_interleaved if self.gl_interleaved is None else self.gl_interleaved,
            dispatch=self.dispatch,
            vec_pipes=self.vector_pipes_512 if bits > 256 else self.vector_pipes_256,
        )


KIB, MIB = 1 << 10, 1 << 20
# Sunny Cove (Ice Lake), whose client parts differ by their FMA width and L2 (MICROARCHS: sunny-cove-client).
_SUNNY_COVE = Microarch(
    "sunny-cove",
    "GenuineIntel",
    ((6, 0x6A, 0x6A), (6, 0x6C, 0x6C)),  # Ice Lake-SP, Ice Lake-D (Xeon: two 512-bit FMA pipes)
    fma_pipes=2,  # ports 0+1 fused and 5 [INTEL-ICL]
    fma_bits=512,  # [INTEL-ICL]
    fma_latency=4,  # [INTEL-ICL], [UOPS]
    loads_256=2,  # [INTEL-ICL]
    loads_512=2,  # [INTEL-ICL]
    stores_256=2,  # [INTEL-ICL]
    stores_512=1,  # 64 B/cycle to L1 [INTEL-ICL]
    dispatch=5,  # [INTEL-ICL]
    l2_fill_bytes=64,  # [INTEL-ICL]
    l1d=(48 * KIB, 12),  # [INTEL-ICL]
    l2_bytes=1280 * KIB,  # Xeon [INTEL-ICL]
    shuffles=1,  # lane-crossing ones and broadcasts on port 5 alone; in-lane ymm ones also port 1 [UOPS]
    imuls=2,  # ports 0 and 1 [UOPS]
    vector_pipes_256=3,  # ports 0, 1, 5 [INTEL-ICL]
    vector_pipes_512=2,  # [INTEL-ICL]
)
MICROARCHS: tuple[Microarch, ...] = (
    Microarch(
        "zen3",
        "AuthenticAMD",
        ((0x19, 0x00, 0x0F), (0x19, 0x20, 0x2F), (0x19, 0x40, 0x5F)),  # Milan, Vermeer, Rembrandt/Cezanne
        fma_pipes=2,  # FP0, FP1 multiply/FMA pipes [AMD19]
        fma_bits=256,  # [AMD19]
        fma_latency=4,  # [AMD19] (Zen 2: 5)
        loads_256=2,  # 3 memory ops per cycle, 2 of them 256-bit loads [AMD19]
        loads_512=0,
        stores_256=1,  # one 256-bit store per cycle [AMD19]
        stores_512=0,
        dispatch=6,  # 6 macro-ops per cycle [AMD19]
        l2_fill_bytes=32,  # L2 -> L1 32 B/cycle [AMD19]
        l1d=(32 * KIB, 8),  # [AMD19]
        l2_bytes=512 * KIB,  # [AMD19]
        shuffles=2,  # FP1, FP2 (their shifts too) [AMD19] 2.11.1, [UOPS]
        vector_pipes_256=4,  # FP0-FP3 [AMD19] 2.11.1
        imuls=2,  # FP0, FP3 [AMD19] 2.11.1, [UOPS]
        # EPYC 7xx3 VM (bench/HISTORY.md, 2026-11-24 night): calibrate's two_streams_line 16.5 cycles,
        # one stream 15.3 (spread 23%: no surcharge); the gated pair 1x2560x10240 bf16 reading one row of
        # each matrix side by side ran at 0.98-1.01 of a read sweep, one row at a time 0.73-0.82.
        # The same VM type, 2026-12-01 (bench/RANK.md, last section): calibrate's interleaved_line (4 adjacent
        # columns read side by side) 0.8-4.3 cycles a line under one stream's, and two_streams_line 1.0-2.7 under
        # that, in every signed calibration since 11-29; GEMV programs reading 4 weight columns per dot kernel ran
        # 1.05-1.21x faster from DRAM than one column at a time on 1 thread (W1 N x K, W4, f16). So 4 columns
        # are priced as one stream, and two streams 1.5 cycles under: with both at 0 the gated pair was split
        # into two GEMVs of 4-column kernels, 0.90-0.97x the pair's speed.
        gl_two_streams=-1.5,
        gl_interleaved=0.0,
    ),
    Microarch(
        "zen4",
        "AuthenticAMD",
        ((0x19, 0x10, 0x1F), (0x19, 0x60, 0x7F), (0x19, 0xA0, 0xAF)),  # Genoa, Raphael/Phoenix, Bergamo
        fma_pipes=2,  # [AMD19-4]
        fma_bits=256,  # zmm FMAs double-pumped: one 512-bit FMA per cycle [AMD19-4]
        fma_latency=4,  # [AMD19-4]
        loads_256=2,  # [AMD19-4]
        loads_512=1,  # [AMD19-4]
        stores_256=1,  # [AMD19-4]
        stores_512=0.5,  # [AMD19-4]
        dispatch=6,  # [AMD19-4]
        l2_fill_bytes=32,  # [AMD19-4]
        l1d=(32 * KIB, 8),  # [AMD19-4]
        l2_bytes=1 * MIB,  # [AMD19-4]
        shuffles=2,  # as Zen 3's (FP1, FP2) [AMD19-4] (the built-in table's 0.5)
        imuls=2,  # as Zen 3's (FP0, FP3) [AMD19-4]
        builtin=True,  # the hand-tuned table was fitted on Zen 4/5 results ("zen5-class")
    ),
    Microarch(
        "zen5",
        "AuthenticAMD",
        ((0x1A, 0x00, 0xFF),),  # Turin, Granite Ridge, Strix
        fma_pipes=2,  # [AMD1A]
        fma_bits=512,  # native 512-bit FMA on desktop/server parts [AMD1A]
        fma_latency=4,  # [AMD1A]
        loads_256=4,  # 4 loads per cycle [AMD1A]
        loads_512=2,  # [AMD1A]
        stores_256=2,  # [AMD1A]
        stores_512=1,  # [AMD1A]
        dispatch=8,  # 8-wide dispatch/rename [AMD1A]
        l2_fill_bytes=64,  # [AMD1A]
        l1d=(48 * KIB, 12),  # [AMD1A]
        l2_bytes=1 * MIB,  # [AMD1A]
        shuffles=2,  # [AMD1A] (the built-in table's 0.5)
        imuls=2,  # [AMD1A]
        builtin=True,
    ),
    Microarch(
        "golden-cove",
        "GenuineIntel",
        # Sapphire/Emerald Rapids, Alder/Raptor Lake P-cores, Granite Rapids (Redwood Cove: same figures)
        ((6, 0x8F, 0x8F), (6, 0xCF, 0xCF), (6, 0x97, 0x97), (6, 0x9A, 0x9A), (6, 0xB7, 0xB7), (6, 0xBA, 0xBA))
        + ((6, 0xBF, 0xBF), (6, 0xAD, 0xAE)),
        fma_pipes=2,  # ports 0 (0+1 fused for 512-bit) and 5 on server parts [INTEL]
        fma_bits=512,  # [INTEL]
        fma_latency=4,  # [INTEL]
        loads_256=3,  # ports 2, 3, 11 [INTEL]
        loads_512=2,  # [INTEL]
        stores_256=2,  # [INTEL]
        stores_512=1,  # 64 B/cycle to L1 [INTEL]
        dispatch=6,  # 6-wide rename/allocate [INTEL]
        l2_fill_bytes=64,  # [INTEL]
        l1d=(48 * KIB, 12),  # [INTEL]
        l2_bytes=2 * MIB,  # server L2 [INTEL]
        shuffles=1,  # port 5 for lane-crossing ones, inserts and broadcasts; in-lane ymm ones also port 1 [UOPS]
        imuls=2,  # ports 0 and 1 [UOPS]
        # Vector ALUs on ports 0, 1, 5; with 512-bit instructions in flight port 1's is fused into port 0's
        # 512-bit unit, so FMAs, shifts, converts and permutes all share ports 0 and 5 [INTEL]. Measured on a
        # Sapphire Rapids-class Xeon VM (2026-11-25, independent chains): zmm vpermps, vpermt2ps, vpsrld,
        # vpsrlvd and vpmovzxbd 1 per cycle; vpandd, vcvtdq2ps, vfmadd, vpdpbusd 2 per cycle.
        vector_pipes_256=3,
        vector_pipes_512=2,
        # AMX and AVX512-FP16 came with Sapphire Rapids; no earlier Intel core (nor Alder Lake's, whose
        # AVX-512 is fused off) reports them [INTEL]
        flags_any=frozenset({"amx_tile", "avx512_fp16"}),
        # Adjacent columns read side by side cost no more a line than one stream: the L2 streamer follows up to
        # 32 streams, one forward per 4 KiB page [INTEL-SNB]. Measured on an Emerald Rapids VM (2026-11-29,
        # bench/HISTORY.md): calibrate's interleaved_line 12.7 cycles a line, one stream 13.8; 1x2048x16384 bf16
        # from DRAM, one thread, one column a kernel 6813 us, four 5141 us, a read sweep 5200.
        gl_interleaved=0.0,
    ),
    Microarch(
        "skylake-sp",
        "GenuineIntel",
        ((6, 0x55, 0x55),),  # Skylake-SP, Cascade Lake, Cooper Lake
        fma_pipes=2,  # Platinum / Gold 6000 parts; one 512-bit pipe on the others [INTEL-SKX]
        fma_bits=512,  # [INTEL-SKX]
        fma_latency=4,  # [INTEL-SKX], [AGNER]
        loads_256=2,  # [INTEL-SKX]
        loads_512=2,  # [INTEL-SKX]
        stores_256=1,  # [INTEL-SKX]
        stores_512=1,  # [INTEL-SKX]
        dispatch=4,  # [AGNER]
        l2_fill_bytes=64,  # [INTEL-SKX]
        l1d=(32 * KIB, 8),  # [INTEL-SKX]
        l2_bytes=1 * MIB,  # [INTEL-SKX]
        shuffles=1,  # port 5 [AGNER], [UOPS]
        imuls=2,  # ports 0 and 1 [UOPS]
        vector_pipes_256=3,  # ports 0, 1, 5 [AGNER]
        vector_pipes_512=2,  # ports 0+1 fused, 5 [INTEL-SKX]
    ),
    _SUNNY_COVE,
    replace(
        _SUNNY_COVE,
        name="sunny-cove-client",
        models=((6, 0x7D, 0x7E), (6, 0x8C, 0x8D)),  # Ice Lake and Tiger Lake client parts
        fma_bits=256,  # two 256-bit pipes (ports 0, 1), fused into one for 512-bit vectors [INTEL-ICL]
        l2_bytes=512 * KIB,  # Ice Lake client (Tiger Lake: 1.25 MiB; sysfs tells) [INTEL-ICL]
    ),
    Microarch(
        "generic-avx2",
        "",
        (),  # any CPU no other profile covers
        fma_pipes=2,  # Skylake-class: ports 0 and 1 [AGNER]
        fma_bits=256,  # [AGNER]
        fma_latency=4,  # [AGNER] (Haswell: 5)
        loads_256=2,  # [AGNER]
        loads_512=0,
        stores_256=1,  # [AGNER]
        stores_512=0,
        dispatch=4,  # [AGNER]
        l2_fill_bytes=64,  # [AGNER]
        l1d=(32 * KIB, 8),  # [AGNER]
        l2_bytes=256 * KIB,  # client Skylake [AGNER]
        shuffles=1,  # port 5 [AGNER], [UOPS]
        imuls=2,  # ports 0 and 1 [AGNER], [UOPS]
        vector_pipes_256=3,  # ports 0, 1, 5 [AGNER]
    ),
)
BY_NAME = {m.name: m for m in MICROARCHS}
GENERIC = BY_NAME["generic-avx2"]


def match(vendor: str, family: int, model: int, flags: frozenset[str] = frozenset()) -> Microarch:
    """The profile covering a CPU (cpuinfo's vendor_id, displayed family and model), else the one its flags
    identify (a model number no profile lists, as hypervisors report), else the generic one."""
    return next(
        (m for m in MICROARCHS if m.covers(vendor, family, model)),
        next((m for m in MICROARCHS if m.covers_by_flags(vendor, family, flags)), GENERIC),
    )
