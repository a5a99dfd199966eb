"""Issue 20, the bandwidth reference: is a machine's 2-thread DRAM read rate a fixed number? A time series of read
sweeps (the quant bench's sweep library, 64 MiB of distinct random data per copy, 8 copies rotated, median of 4
sweeps a point) on 1 and 2 threads, one point every 0.5 s, printed as it goes.

usage: .venv/bin/python bench/experiments/bw_series.py [SECONDS]   (after bench/quant/build_ggml.sh built the sweep)
"""

from __future__ import annotations

import mmap
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
import peers  # noqa: E402


def main() -> int:
    sweep = peers.Sweep(Path.home() / ".cache" / "morello-bench" / "lib")
    nbytes, copies = 64 << 20, 8
    rng = np.random.default_rng(1)
    maps, bufs = [], []
    for _ in range(copies):
        m = mmap.mmap(-1, nbytes)
        m.madvise(mmap.MADV_HUGEPAGE)
        a = np.frombuffer(m, np.uint8)
        a[:] = rng.integers(0, 256, nbytes, dtype=np.uint8)
        maps.append(m)
        bufs.append(a)
    pos, end = 0, time.time() + (float(sys.argv[1]) if len(sys.argv) > 1 else 60)
    while time.time() < end:
        row = []
        for threads in (1, 2):
            ts = []
            for _ in range(4):
                pos += 1
                t0 = time.perf_counter()
                sweep(bufs[pos % copies].ctypes.data, nbytes, threads, 0)
                ts.append(time.perf_counter() - t0)
            row.append(nbytes / float(np.median(ts)) / 1e9)
        print(f"{time.strftime('%H:%M:%S')} 1 thread {row[0]:5.1f} GB/s, 2 threads {row[1]:5.1f} GB/s", flush=True)
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
