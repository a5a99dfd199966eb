"""Golden outputs of the synthesizer: the header and explain tree of every spec in bench/ and examples/, per ISA.

    python scripts/golden.py write DIR [--isa avx2,avx512_bf16] [--filter REGEX]
    python scripts/golden.py compare OLD NEW [--isa avx2]

`write` synthesizes each spec (one shared fresh DB per ISA) and stores DIR/<isa>/<name>.hpp and .tree;
`compare` reports files whose bytes differ, with the runtime namespace's digest masked (it changes with
every edit of the runtime templates, on purpose) and the header's `Costs:` line left out (`write` pins the
built-in cost profile). A refactoring that changes no program leaves no difference.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ISAS = ("avx2", "avx512", "avx512_bf16", "highway", "scalar")
SMALL_ONLY = {"scalar": 64**3, "highway": 512**3}  # scalar/highway: only specs this small (time)


def specs() -> list[tuple[str, str]]:
    """(name, spec) of every morello_add_kernel in bench/ and examples/."""
    out = []
    for m in re.finditer(r'"(\w+)\|(matmul [^|"]+)\|\d"', (ROOT / "bench/CMakeLists.txt").read_text()):
        out.append((m.group(1), m.group(2)))
    for cm in sorted((ROOT / "examples").glob("*/CMakeLists.txt")):
        text = cm.read_text()
        for m in re.finditer(r'morello_add_kernel\((\w+)\s+SPEC\s+"([^"]+)"', text):
            out.append((f"example_{cm.parent.name}_{m.group(1)}", _expand(m.group(2), text)))
    return out


def _expand(spec: str, cmake_text: str) -> str:
    """``spec`` with the ``${VAR}`` of the file's ``set(VAR "...")`` substituted (the layer's weight options)."""
    variables = dict(re.findall(r'set\((\w+)\s+"([^"]*)"\)', cmake_text))
    return re.sub(r"\$\{(\w+)\}", lambda v: variables[v.group(1)], spec)


def _volume(spec: str) -> int:
    m, k, n = map(int, spec.split()[1].split("x")[:3])
    return m * k * n


def write(out: Path, isas, pattern: str | None) -> None:
    from morello_build.ir.impl import format_tree
    from morello_build.tools import api

    # Goldens never depend on the host: the built-in cost profile (target/profiles.py), whatever this CPU is.
    os.environ["MORELLO_PROFILE"] = "builtin"
    for isa in isas:
        d = out / isa
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            db = str(Path(tmp) / "golden.db")
            for name, spec in specs():
                if pattern and not re.search(pattern, name):
                    continue
                if _volume(spec) > SMALL_ONLY.get(isa, 1 << 62):
                    continue
                t0 = time.monotonic()
                user, target, impl, _ = api.synthesize_program(spec, isa=isa, threads=2, db=db)
                from morello_build.codegen import emit_header

                (d / f"{name}.hpp").write_text(emit_header(user, impl, target, name=name, namespace="golden"))
                (d / f"{name}.tree").write_text(format_tree(impl) + "\n")
                print(f"{isa:12} {name:20} {time.monotonic() - t0:6.1f} s", flush=True)


def _masked(path: Path) -> str:
    text = re.sub(r"morello_rt_v\w+?_[0-9a-f]{8}", "morello_rt_DIGEST", path.read_text(), flags=re.I)
    return re.sub(r"^// Costs: .*\n", "", text, flags=re.M)  # the profile line (headers before it had none)


def compare(old: Path, new: Path, isas=None) -> int:
    files = sorted(p.relative_to(old) for p in old.rglob("*") if p.is_file() and (not isas or p.parent.name in isas))
    missing = [f for f in files if not (new / f).exists()]
    bad = [f for f in files if (new / f).exists() and _masked(old / f) != _masked(new / f)]
    for f in bad:
        print(f"differs: {f}")
    print(f"{len(files) - len(bad) - len(missing)} identical, {len(bad)} different, {len(missing)} not written")
    return 1 if bad or missing else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir", type=Path)
    w.add_argument("--isa", default=",".join(ISAS))
    w.add_argument("--filter")
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--isa", help="compare only these ISAs (comma-separated)")
    args = p.parse_args()
    if args.cmd == "write":
        write(args.dir, args.isa.split(","), args.filter)
        return 0
    return compare(args.old, args.new, args.isa.split(",") if args.isa else None)


if __name__ == "__main__":
    sys.exit(main())
