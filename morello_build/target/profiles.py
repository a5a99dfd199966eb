"""Cost profiles: which cost table (and cache sizes) the model uses, chosen by the user or the host.

A profile is named by ``--profile`` (CLI), ``PROFILE`` (CMake), ``profile=`` (Python) or $MORELLO_PROFILE:
- ``builtin``: the hand-tuned "zen5-class" table and the targets' default caches (what every program was
  synthesized with before profiles existed; the tests pin it);
- ``host`` (the default): the profile of this CPU's micro-architecture (microarch.match), with the cache
  sizes read from sysfs; a Zen 4 or Zen 5 host gets the built-in table;
- a micro-architecture's name (``zen3``, ``zen4``, ``zen5``, ``golden-cove``, ``skylake-sp``, ``sunny-cove``,
  ``sunny-cove-client``, ``generic-avx2``);
- a profile file (JSON, written by ``morello-build calibrate``; ``FILE_KEYS`` below).

Targets carry the profile's table (``Target.costs``), caches and label; the DB keys results by
``Target.cost_fingerprint``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

from morello_build.target import microarch
from morello_build.target.costs import CostTable

ENV = "MORELLO_PROFILE"
FORMAT = 1  # a profile file's "morello_profile" value
FILE_KEYS = {"morello_profile", "name", "date", "host", "base", "caches", "measurements", "costs", "widths", "fit"}
WIDTHS = {"32": 32, "64": 64}  # "widths": per vector width (bytes), costs that replace "costs" for that width
CACHE_KEYS = {"l1d_bytes", "l1d_ways", "l2_bytes"}
COST_FIELDS = {f.name: f.type for f in fields(CostTable)}
# integer parameters where 0 means "off" (stream_lead_bytes: no lead beyond the next kernel's columns)
MAY_BE_ZERO = {"prefetch_bytes", "vec_pipes", "stream_burst_bytes", "stream_lead_bytes", "tail_percent"}
SIGNED = ("gl_interleaved", "gl_two_streams")  # per-line adjustments to gl_line: at least -gl_line (tools/fit.py)


class ProfileError(ValueError):
    """A profile that cannot be used: one line naming the problem."""


@dataclass(frozen=True)
class CostProfile:
    """What a profile changes in a target: its cost table per vector width, and its cache sizes (None:
    the target's)."""

    name: str
    tables: tuple[tuple[int, CostTable], ...]  # (vector bytes, table); width 0 is the default
    l1d: tuple[int, int] | None = None  # (bytes, ways)
    l2_bytes: int | None = None

    def table(self, vector_bytes: int) -> CostTable:
        by_width = dict(self.tables)
        return by_width.get(vector_bytes, by_width[0])


BUILTIN = CostProfile("builtin", ((0, CostTable()),))


def from_microarch(m: microarch.Microarch, caches=None) -> CostProfile:
    """A micro-architecture's profile; ``caches``: the host's (l1d, l2) facts, replacing the class's."""
    if m.builtin:
        return CostProfile(m.name, BUILTIN.tables)
    tables = tuple((w, m.cost_table(w)) for w in (0, 32, 64))
    l1d, l2 = m.l1d, m.l2_bytes
    if caches and caches[0] and caches[1]:
        l1d, l2 = (caches[0].bytes, caches[0].ways), caches[1].bytes
    return CostProfile(m.name, tables, l1d, l2)


def base_profile(name: str) -> CostProfile:
    """The profile a file's ``base`` names: the built-in table, or a micro-architecture's (its class's caches)."""
    return BUILTIN if name == "builtin" else from_microarch(microarch.BY_NAME[name])


def host_profile() -> CostProfile:
    from morello_build.target.host import host_facts

    h = host_facts()
    p = from_microarch(microarch.match(h.vendor, h.family, h.model, h.flags), (h.l1d, h.l2))
    caches = "" if h.l1d and h.l2 else f", {p.name}'s caches: sysfs unreadable"
    return CostProfile(f"host ({p.name}{caches})", p.tables, p.l1d, p.l2_bytes)


def names() -> tuple[str, ...]:
    return ("builtin", "host") + tuple(microarch.BY_NAME)


def resolve(profile: str | CostProfile | None = None) -> CostProfile:
    """The profile a name, a file path or None ($MORELLO_PROFILE, else ``host``) stands for."""
    if isinstance(profile, CostProfile):
        return profile
    text = profile if profile else os.environ.get(ENV) or "host"
    if text == "builtin":
        return BUILTIN
    if text == "host":
        return host_profile()
    if text in microarch.BY_NAME:
        return from_microarch(microarch.BY_NAME[text])
    path = Path(text)
    if not path.is_file():
        raise ProfileError(f"profile '{text}' is neither a file nor one of: {', '.join(names())}")
    stat = path.stat()
    return _load(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@cache
def _load(path: str, _mtime: int, _size: int) -> CostProfile:
    return load_file(Path(path))


def load_file(path: Path) -> CostProfile:
    """A profile file's profile; a malformed file is a ProfileError naming the problem."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"profile {path}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {path}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse(data, str(path))


def parse(data, where: str = "profile") -> CostProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a profile is a JSON object")
    if unknown := sorted(set(data) - FILE_KEYS):
        raise ProfileError(f"{where}: unknown field '{unknown[0]}' (accepted: {', '.join(sorted(FILE_KEYS))})")
    if data.get("morello_profile") != FORMAT:
        raise ProfileError(f"{where}: 'morello_profile' must be {FORMAT} (the profile format)")
    base = data.get("base", "builtin")
    if base != "builtin" and base not in microarch.BY_NAME:
        raise ProfileError(f"{where}: unknown base '{base}' (accepted: builtin, {', '.join(microarch.BY_NAME)})")
    start = base_profile(base)
    costs = _costs(data.get("costs", {}), where)
    tables = dict((w, _with(t, costs, where)) for w, t in start.tables)
    widths = data.get("widths", {})
    if not isinstance(widths, dict) or not set(widths) <= set(WIDTHS):
        raise ProfileError(f"{where}: 'widths' must be an object with keys among {', '.join(WIDTHS)}")
    for key, overrides in widths.items():
        width = WIDTHS[key]
        at = f"{where}: widths.{key}"
        tables[width] = _with(tables.get(width, tables[0]), _costs(overrides, at), at)
    l1d, l2 = _caches(data.get("caches"), where, start)
    name = data.get("name", "file")
    if not isinstance(name, str) or not name or not name.isprintable() or len(name) > 120:
        raise ProfileError(f"{where}: 'name' must be one printable line of at most 120 characters")
    return CostProfile(name, tuple(sorted(tables.items())), l1d, l2)


def _with(table: CostTable, costs: dict, where: str) -> CostTable:
    from dataclasses import replace

    out = replace(table, **costs)
    for key in SIGNED:
        if out.gl_line + getattr(out, key) < 0:
            raise ProfileError(f"{where}: cost '{key}' ({getattr(out, key):g}) is below -gl_line ({out.gl_line:g})")
    return out


def _costs(costs, where: str) -> dict:
    if not isinstance(costs, dict):
        raise ProfileError(f"{where}: 'costs' must be an object of cost-table fields")
    out = {}
    for key, value in costs.items():
        if key not in COST_FIELDS:
            raise ProfileError(f"{where}: unknown cost '{key}' (CostTable fields: {', '.join(COST_FIELDS)})")
        floor, number = (float("-inf"), "finite") if key in SIGNED else (0, "non-negative")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not floor <= value < float("inf"):
            raise ProfileError(f"{where}: cost '{key}' must be a {number} number, not {value!r}")
        least = 0 if key in MAY_BE_ZERO else 1
        if COST_FIELDS[key] == "int" and (value != int(value) or value < least):
            kind = "non-negative" if least == 0 else "positive"
            raise ProfileError(f"{where}: '{key}' must be a {kind} integer, not {value!r}")
        out[key] = int(value) if COST_FIELDS[key] == "int" else float(value)
    return out


def _caches(caches, where: str, start: CostProfile):
    if caches is None:
        return start.l1d, start.l2_bytes
    if not isinstance(caches, dict) or set(caches) != CACHE_KEYS:
        raise ProfileError(f"{where}: 'caches' must have exactly {', '.join(sorted(CACHE_KEYS))}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in caches.values()):
        raise ProfileError(f"{where}: cache sizes and ways must be positive integers")
    if caches["l1d_bytes"] % caches["l1d_ways"] or caches["l1d_bytes"] // caches["l1d_ways"] < 4096:
        raise ProfileError(f"{where}: an L1D of {caches['l1d_bytes']} bytes in {caches['l1d_ways']} ways is not x86")
    return (caches["l1d_bytes"], caches["l1d_ways"]), caches["l2_bytes"]
