#!/usr/bin/env python3
"""Cold synthesis time and specs visited for the issue-2 benchmark specs, one process per spec.

Usage: .venv/bin/python scripts/synth_bench.py [--isa ISA] [--repeat N] [SPEC ...]
Each run starts a fresh interpreter (no DB), so times are cold; the median of N runs is printed.
"""

import argparse
import json
import statistics
import subprocess
import sys

SPECS = [
    "matmul 1x2048x16384 a=f32 b=bf16:col c=f32",
    "matmul 64x64x64",
    "matmul 512x512x512",
    "matmul 16x16x16 serial",
]
CHILD = """
import json, sys, time
t0 = time.perf_counter()
from morello_build.tools.api import synthesize_program
u, t, impl, s = synthesize_program(sys.argv[1], isa=sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - t0, "visited": s.visited, "cost": impl.cost}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", default=SPECS)
    ap.add_argument("--isa", default="native")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"| spec | cold synthesis (median of {args.repeat}) | specs visited | program cost |")
    print("| --- | --- | --- | --- |")
    for spec in args.specs:
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, spec, args.isa], check=True, capture_output=True, text=True
            ).stdout
            runs.append(json.loads(out))
        secs = statistics.median(r["seconds"] for r in runs)
        print(f"| `{spec}` | {secs:.2f} s | {runs[0]['visited']:,} | {runs[0]['cost']:,.0f} |")


if __name__ == "__main__":
    main()
