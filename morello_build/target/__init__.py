"""x86 targets as data: feature levels, memory capacities, the memory-system facts, what codegen emits
for each (helper library, target attribute, run-time CPU check) and cost constants.

The kernel catalog (what each microkernel applies to, costs and emits) lives in ``kernels/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path

from morello_build.ir import machine
from morello_build.ir.spec import MemoryLimits
from morello_build.target.costs import CostTable


@dataclass(frozen=True)
class Target:
    """An instruction-set level: what codegen may emit and what the search may assume."""

    isa: str
    features: frozenset[str]
    vector_bytes: int  # 0: no vector registers
    vector_regs: int
    l1_bytes: int = 48 * 1024
    l2_bytes: int = 1024 * 1024  # per core
    l1_ways: int = 12  # a cache view of more strided runs than this may evict itself (cost.view_evicts)
    l2_ways: int = machine.L2_WAYS
    line_bytes: int = machine.LINE_BYTES  # a cache line
    alias_min: int = machine.ALIAS_MIN  # the L1 set period: runs this many bytes apart share sets (spec.alias_stride)
    alias_max: int = machine.ALIAS_MAX  # the largest stride class that changes a cost decision
    l2_block_bytes: int = 256 * 1024  # largest block kept in L2: a quarter (an A block, an L2 view; cost.fits_l2)
    scratch_bytes: int = 4 << 20  # largest packing buffer in main memory (a B panel set, L3-resident)
    scalar_regs: int = 12
    # Threads the program is synthesized for: a parallel loop's tiles are split over this many (synth/cost.py).
    # The records in TARGETS say 2 (tests pin their programs); get_target() gives the generating machine's count.
    threads: int = 2
    costs: CostTable = field(default_factory=CostTable)
    # The cost profile the table and caches come from (target/profiles.py): "builtin" in TARGETS.
    profile: str = "builtin"
    # What the emitted C++ uses (codegen): the helper library (namespace and template stem
    # templates/isa_<helpers>.hpp.j2) and its vector type, the GCC/Clang function target attribute, and
    # the CPUID_BITS names of the run-time check. None / (): plain C++.
    helpers: str | None = None
    vtype: str | None = None
    target_attr: str | None = None
    cpu_features: tuple[str, ...] = ()
    # Where not every compiler the headers support has the target's intrinsics: a preprocessor condition that
    # holds where it has them (evaluated after <immintrin.h>), and the compilers that do, for the error message.
    compiler_check: str | None = None
    compiler_needed: str | None = None

    def __post_init__(self):
        # The spec algebra runs before a target is chosen, with the values every x86 target shares.
        shared = (machine.LINE_BYTES, machine.ALIAS_MIN, machine.ALIAS_MAX, machine.L2_WAYS)
        if (self.line_bytes, self.alias_min, self.alias_max, self.l2_ways) != shared:
            raise ValueError(f"{self.isa}: line size, alias period and L2 ways must be {shared} (ir/machine.py)")
        if not self.features - {"highway"} <= set(self.cpu_features):
            raise ValueError(f"{self.isa}: its run-time check misses features {self.features}")
        if unknown := set(self.cpu_features) - set(CPUID_BITS):
            raise ValueError(f"{self.isa}: no CPUID_BITS entry for {sorted(unknown)}")
        # Hashed once: the search's caches (synth/actions) key on the target.
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))

    def __hash__(self) -> int:
        return self._hash

    @property
    def name(self) -> str:
        return self.isa

    @property
    def cost_fingerprint(self) -> str:
        """A digest of what a profile changes (the cost table, the caches): the DB keys results by it."""
        import hashlib

        facts = (self.costs, self.l1_bytes, self.l1_ways, self.l2_bytes, self.l2_block_bytes)
        return hashlib.sha256(repr(facts).encode()).hexdigest()[:12]

    @property
    def builtin_costs(self) -> bool:
        """Whether the target prices programs as the built-in profile does (whatever the profile's name)."""
        return self.cost_fingerprint == BUILTIN_FINGERPRINT

    @property
    def attr(self) -> str:
        """The function attribute selecting the target's instructions ("" for plain C++)."""
        return f'__attribute__((target("{self.target_attr}")))' if self.target_attr else ""

    @property
    def lanes(self) -> int:
        """f32 lanes per vector register (0 for scalar targets)."""
        return self.vector_bytes // 4

    @property
    def cpu_check(self) -> tuple[tuple[str, int], ...]:
        """The run-time check of cpu_features: (runtime CpuId field, mask whose bits must all be set)."""
        masks: dict[str, int] = {}
        for f in self.cpu_features:
            field_, bit, os_state = CPUID_BITS[f]
            masks[field_] = masks.get(field_, 0) | 1 << bit
            if os_state:
                masks["xcr0"] = masks.get("xcr0", 0) | os_state
        return tuple(masks.items())

    def has(self, feature: str) -> bool:
        return feature in self.features

    def limits(self) -> MemoryLimits:
        # Leave two registers for broadcasts and widening temporaries in the kernels (B vectors count).
        vrf = max(self.vector_regs - 2, 0) * self.vector_bytes
        return MemoryLimits(self.l1_bytes, vrf, self.scalar_regs * 4)

    @property
    def accumulator_rows(self) -> tuple[int, ...]:
        """Row counts (not powers of two) of output tiles that fill the register file: r rows of v
        vectors plus one row of B (v = 2, 4), e.g. 6x16 on AVX2, 14x32 on AVX-512. Offered to the
        search besides powers of two, since FMA latency needs as many independent accumulators as fit."""
        usable = self.vector_regs - 2
        rows = {usable // v - 1 for v in (2, 4)} if self.lanes else set()
        return tuple(sorted(r for r in rows if r > 2 and r & (r - 1)))

    def kernels(self):
        from morello_build.target.kernels import CATALOG

        return tuple(k for k in CATALOG if k.available_on(self))

    def kernel(self, name: str):
        """The catalog record ``name`` (codegen asks it to emit the nodes that selected it)."""
        from morello_build.target.kernels import BY_NAME

        return BY_NAME[name]


# Where the run-time check finds each feature: a register of the runtime's CpuId (templates/runtime.hpp.j2:
# cpuid leaf 1, leaf 7 subleaf 0, leaf 7 subleaf 1), its bit, and the XCR0 bits the OS must set for the
# feature's registers (YMM: SSE+AVX state; ZMM: also opmask and the upper ZMM halves). Intel SDM vol. 2A.
_YMM, _ZMM = 0x6, 0xE6
CPUID_BITS = {
    "sse4.2": ("leaf1_ecx", 20, 0),
    "pclmul": ("leaf1_ecx", 1, 0),
    "aes": ("leaf1_ecx", 25, 0),
    "fma": ("leaf1_ecx", 12, _YMM),
    "f16c": ("leaf1_ecx", 29, _YMM),
    "avx": ("leaf1_ecx", 28, _YMM),
    "avx2": ("leaf7_ebx", 5, _YMM),
    "bmi": ("leaf7_ebx", 3, 0),
    "bmi2": ("leaf7_ebx", 8, 0),
    "avx512f": ("leaf7_ebx", 16, _ZMM),
    "avx512dq": ("leaf7_ebx", 17, _ZMM),
    "avx512bw": ("leaf7_ebx", 30, _ZMM),
    "avx512vl": ("leaf7_ebx", 31, _ZMM),
    "avx512bf16": ("leaf7s1_eax", 5, _ZMM),
    "avx512vnni": ("leaf7_ecx", 11, _ZMM),
    "avxvnni": ("leaf7s1_eax", 4, _YMM),
}
# F16C (half <-> float) is in every x86 CPU with AVX2 (Intel Haswell+, AMD Piledriver+): the avx2
# target widens f16 weights with vcvtph2ps.
_AVX2_CPU = ("avx2", "fma", "f16c")
_AVX512_CPU = _AVX2_CPU + ("avx512f", "avx512bw", "avx512vl", "avx512dq")
# Highway 1.0.3's HWY_TARGET_STR_AVX2 (sse4 + avx,avx2 + bmi,bmi2,fma + f16c), and what it checks at run time.
_HWY_AVX2_ATTR = "sse2,ssse3,sse4.1,sse4.2,pclmul,aes,avx,avx2,bmi,bmi2,fma,f16c"
_HWY_AVX2_CPU = _AVX2_CPU + ("bmi", "bmi2", "aes", "pclmul", "sse4.2")


def _x86(
    isa: str, cpu: tuple[str, ...], vector_bytes: int, vector_regs: int, helpers: str, attr: str | None = None
) -> Target:
    """A vector target whose functions are compiled for the ``cpu`` features (attribute: their list)."""
    return Target(
        isa,
        frozenset(cpu),
        vector_bytes,
        vector_regs,
        helpers=helpers,
        vtype="mv::V",
        target_attr=attr or ",".join(cpu),
        cpu_features=cpu,
    )


TARGETS = {
    "scalar": Target("scalar", frozenset(), 0, 0),
    "avx2": _x86("avx2", _AVX2_CPU, 32, 16, "avx2"),
    "highway": Target(
        "highway",
        frozenset(_AVX2_CPU) | {"highway"},
        32,
        16,
        helpers="hwy_avx2",
        vtype="mv::V",
        target_attr=_HWY_AVX2_ATTR,
        cpu_features=_HWY_AVX2_CPU,
    ),
    # AVX-VNNI: vpdpbusd on ymm without AVX-512 (Intel Alder Lake and later client cores, Sierra Forest; AMD
    # Zen 5). Only the aquant=i8 dot kernels use it; for every other spec its program is avx2's (search_isa).
    # GCC 11 and Clang 12 added AVX-VNNI; their <immintrin.h> includes avxvnniintrin.h, whose include guard
    # tells (a dispatch header leaves the level out where it is not defined: codegen/dispatch.py).
    "avx2_vnni": replace(
        _x86("avx2_vnni", _AVX2_CPU + ("avxvnni",), 32, 16, "avx2"),
        compiler_check="defined(_AVXVNNIINTRIN_H_INCLUDED) || defined(__AVXVNNIINTRIN_H)",
        compiler_needed="GCC 11 / Clang 12 or later",
    ),
    "avx512": _x86("avx512", _AVX512_CPU, 64, 32, "avx512"),
    # AVX-512 VNNI without BF16 (Intel Cascade Lake, Ice Lake, Tiger Lake, Rocket Lake: most cloud x86 servers
    # of 2019-2022): vpdpbusd on ymm and zmm. Only the aquant=i8 dot kernels use it; for every other spec its
    # program is avx512's (search_isa).
    "avx512_vnni": _x86("avx512_vnni", _AVX512_CPU + ("avx512vnni",), 64, 32, "avx512"),
    # Every CPU with AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4) has AVX512_VNNI (Cascade Lake on).
    "avx512_bf16": _x86("avx512_bf16", _AVX512_CPU + ("avx512bf16", "avx512vnni"), 64, 32, "avx512"),
}
# Runtime ISA dispatch (codegen/dispatch.py): the levels a dispatch header holds a program for, best
# first; the last runs on any CPU.
BUILTIN_FINGERPRINT = TARGETS["avx2"].cost_fingerprint  # every record in TARGETS is priced alike
DISPATCH_LEVELS = ("avx512_bf16", "avx512_vnni", "avx512", "avx2_vnni", "avx2", "scalar")
TARGET_ISAS = ("native",) + tuple(TARGETS)  # one target each
ISAS = TARGET_ISAS + ("dispatch",)  # what users may ask for (CLI, CMake, Python)


def cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


# /proc/cpuinfo's names of the CPUID_BITS features the ISAs' checks name otherwise.
_CPUINFO_NAMES = {"avx512_bf16": "avx512bf16", "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni"}


@cache
def runnable_isas() -> tuple[str, ...]:
    """The ISAs of TARGETS whose instructions this CPU has (by /proc/cpuinfo), in TARGETS order."""
    flags = {_CPUINFO_NAMES.get(f, f) for f in cpu_flags()}
    return tuple(isa for isa, t in TARGETS.items() if t.features - {"highway"} <= flags)


@cache
def native_isa() -> str:
    return next((isa for isa in DISPATCH_LEVELS if isa in runnable_isas()), "scalar")


MAX_THREADS = 1024


def machine_threads() -> int:
    """The CPUs this process may run on (its affinity mask; else every CPU): the default thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_threads(threads) -> int:
    """``threads`` as an int in 1..MAX_THREADS, else a ValueError naming it (one line)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be an integer from 1 to {MAX_THREADS}, not {threads!r}")
    return threads


def get_target(isa: str = "native", threads: int | None = None, profile=None) -> Target:
    """The target record of ``isa`` ("native": this CPU's best) for programs that run on ``threads``
    threads (None: the CPUs this process may run on, machine_threads()), priced by the cost ``profile``
    (a name, a profile file or a CostProfile; None: $MORELLO_PROFILE, else this host's: target/profiles.py)."""
    if isa == "native":
        isa = native_isa()
    if isa not in TARGETS:
        raise ValueError(f"unknown ISA '{isa}'; accepted: {', '.join(ISAS)}")
    n = resolve_threads(threads)
    target = TARGETS[isa] if n == TARGETS[isa].threads else replace(TARGETS[isa], threads=n)
    return with_profile(target, profile)


def with_profile(target: Target, profile=None) -> Target:
    """``target`` priced by a cost profile (see get_target); the built-in one leaves it as it is."""
    from morello_build.target import profiles

    p = profiles.resolve(profile)
    if p is profiles.BUILTIN:
        return target
    l1_bytes, l1_ways = p.l1d or (target.l1_bytes, target.l1_ways)
    l2_bytes = p.l2_bytes or target.l2_bytes
    priced = replace(
        target,
        costs=p.table(target.vector_bytes),
        l1_bytes=l1_bytes,
        l1_ways=l1_ways,
        l2_bytes=l2_bytes,
        l2_block_bytes=l2_bytes // 4 if p.l2_bytes else target.l2_block_bytes,
    )
    if priced.builtin_costs:
        return target if p.name == "builtin" else replace(target, profile=p.name)
    return replace(priced, profile=p.name)


def resolve_threads(threads: int | None) -> int:
    """The thread count a program is synthesized for: ``threads`` checked, or (None) this process's CPUs."""
    return min(machine_threads(), MAX_THREADS) if threads is None else check_threads(threads)
