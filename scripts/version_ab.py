"""Time one spec's programs as two checkouts of morello-build synthesize them, in one process, interleaved rounds.

usage: python scripts/version_ab.py SPEC --old-python PATH [--new-python PATH] [--threads N] [--rounds 15]
       [--copies 4]

Each side is synthesized by its own checkout: ``--old-python`` is the interpreter of another checkout's virtual
environment, made once with ``git worktree add /tmp/old REV && bash /tmp/old/scripts/setup.sh``
(``/tmp/old/.venv/bin/python``; setting PYTHONPATH to another checkout does not do: the editable install's import
hook finds this one first); ``--new-python`` defaults to the one running this script. Both headers are compiled into
one binary with scripts/kernel_ab.py's harness and timed in rounds of 5 calls each on ``copies`` rotated operand
sets (4 of the flagship GEMV's are beyond a 32 MiB L3): the thread's CPU time for programs synthesized for one
thread, wall time for more (the header's own pool). Prints both medians and the median and quartiles of the per-round
ratios old / new (> 1: the new program is faster).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import kernel_ab


def header(python: str, spec: str, threads: int, i: int, work: Path) -> str:
    """The header ``python``'s checkout synthesizes for spec: kernel ``k<i>`` in namespace ``ab<i>``."""
    out = work / f"synth{i}.hpp"
    cmd = [python, "-m", "morello_build", "synth", spec, "--threads", str(threads), "--db", "none"]
    subprocess.run([*cmd, "--name", f"k{i}", "--namespace", f"ab{i}", "-o", str(out)], check=True)
    return out.read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--old-python", required=True)
    ap.add_argument("--new-python", default=sys.executable)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--copies", type=int, default=4)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="version_ab"))
    headers = [
        header(python, args.spec, args.threads, i, work) for i, python in enumerate((args.old_python, args.new_python))
    ]
    times = kernel_ab.time_headers(work, headers, args.copies, args.rounds, 5, wall=args.threads > 1)
    old, new = (sorted(times[i])[len(times[i]) // 2] for i in (0, 1))
    ratios = sorted(a / b for a, b in zip(times[0], times[1]))  # each round runs both, in a random order
    q = len(ratios) // 4
    print(
        f"{args.spec} ({args.threads} thread(s), {args.copies} copies, {args.rounds} rounds): old {old:.1f} us, "
        f"new {new:.1f} us, old / new {ratios[len(ratios) // 2]:.3f} [{ratios[q]:.3f}, {ratios[-1 - q]:.3f}]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
