"""Issue 21, the quant bench's 1-thread 4-bit rows: our q4_0 aquant GEMV and ORT's MatMulNBits int4 acc4 alternated
in one plain loop (no harness), W5 1x2048x16384, M = 1, one thread: per round 4 calls of ours, 4 of ORT, 4 of ours
again, each on the next of its rotated weight copies (24 for ours, 6 ORT sessions: beyond L3 on most CPUs).
Prints the medians of our calls in their own turn, of ours right after ORT's, and of ORT's.

usage: .venv/bin/python bench/experiments/quant_alternate.py [ROUNDS]   (onnxruntime and onnx installed: run.sh does)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
import formats  # noqa: E402
import peers  # noqa: E402

K, N, OURS_COPIES, ORT_COPIES, CALLS = 2048, 16384, 24, 6, 4


def timed(call, copies: int, position: list, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        c = position[0] % copies
        position[0] += 1
        t0 = time.perf_counter()
        call(c)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    from morello_build.tools import pyapi

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    kernel = pyapi.compile_kernels([f"matmul 1x{K}x{N} a=f32 b=q4_0:col c=f32 aquant=i8"])[0]
    rng = np.random.default_rng(0)
    weights = [formats.random_weights("q4_0", N, K, rng) for _ in range(OURS_COPIES)]
    x = rng.uniform(-1, 1, (1, K)).astype(np.float32)
    makers = [lambda w=w: formats.ort_tensors(w) for w in weights[:ORT_COPIES]]
    ort = peers.ort_impls("q4_0", [1], [x], makers, K, N, 4, 1, 0)[0]

    def ours(c):
        kernel(x, weights[c].raw, parallel=False)

    ours_at, ort_at = [0], [0]
    figures = {"ours": [], "ours after ORT": [], "ORT int4 acc4": []}
    for _ in range(rounds):
        figures["ours"] += timed(ours, OURS_COPIES, ours_at, CALLS)
        figures["ORT int4 acc4"] += timed(lambda c: ort.run(c, 1), ort.ncopies, ort_at, CALLS)
        figures["ours after ORT"] += timed(ours, OURS_COPIES, ours_at, CALLS)
    for name, times in figures.items():
        p25, p50, p75 = (np.percentile(times, q) * 1e6 for q in (25, 50, 75))
        print(f"{name}: median {p50:.0f} us (p25-p75 {p25:.0f}-{p75:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
