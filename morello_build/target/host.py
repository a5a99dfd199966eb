"""Facts about the generating host, read (not assumed): cache sizes and ways from sysfs, the CPUs this
process may use, and the CPU's vendor / family / model / model name / flags from /proc/cpuinfo.

Each reader takes its root path, so tests read a fake tree. What cannot be read is None and the caller
falls back to the target's defaults (``HostFacts.caches_source`` says which it was).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Cache:
    level: int
    bytes: int
    ways: int


@dataclass(frozen=True)
class HostFacts:
    vendor: str  # "AuthenticAMD", "GenuineIntel", ... ("" if unknown)
    family: int  # the displayed family (base + extended), as /proc/cpuinfo's "cpu family"
    model: int  # the displayed model (extended model << 4 | model)
    model_name: str
    cpus: int  # CPUs in this process's affinity mask
    l1d: Cache | None  # None: not readable (use the target's defaults)
    l2: Cache | None
    l3: Cache | None
    flags: frozenset[str] = frozenset()  # cpuinfo's "flags" (microarch.match's fallback where the model is masked)

    @property
    def caches_source(self) -> str:
        return "sysfs" if self.l1d and self.l2 else "target defaults (sysfs unreadable)"

    def signature(self) -> dict:
        """What a profile file records of the host it was measured on."""
        return dict(
            vendor=self.vendor, family=self.family, model=self.model, model_name=self.model_name, cpus=self.cpus
        )


def parse_size(text: str) -> int | None:
    """sysfs cache sizes: "32K", "1024K", "32768K", "2M" (or plain bytes)."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMGB")
    return int(digits) * scale if digits.isdigit() else None


def read_caches(root: Path = SYSFS_CACHE) -> dict[str, Cache]:
    """The data and unified caches of cpu0 by name ("l1d", "l2", "l3"); unreadable entries are left out."""
    found: dict[str, Cache] = {}
    try:
        entries = sorted(p for p in root.iterdir() if p.name.startswith("index"))
    except OSError:
        return found
    for entry in entries:
        try:
            level = int((entry / "level").read_text())
            kind = (entry / "type").read_text().strip()
            size = parse_size((entry / "size").read_text())
            ways = int((entry / "ways_of_associativity").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size is None or ways <= 0:
            continue
        found.setdefault("l1d" if level == 1 else f"l{level}", Cache(level, size, ways))
    return found


def read_cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty when unreadable)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _int(text: str | None) -> int:
    try:
        return int(text or "", 0)
    except ValueError:
        return -1


def affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_host(sysfs: Path = SYSFS_CACHE, cpuinfo: Path = CPUINFO, cpus: int | None = None) -> HostFacts:
    info, caches = read_cpuinfo(cpuinfo), read_caches(sysfs)
    return HostFacts(
        vendor=info.get("vendor_id", ""),
        family=_int(info.get("cpu family")),
        model=_int(info.get("model")),
        model_name=info.get("model name", ""),
        cpus=affinity_cpus() if cpus is None else cpus,
        l1d=caches.get("l1d"),
        l2=caches.get("l2"),
        l3=caches.get("l3"),
        flags=frozenset(info.get("flags", "").split()),
    )


@cache
def host_facts() -> HostFacts:
    """This machine's facts (read once per process)."""
    return read_host()
