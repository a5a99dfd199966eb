"""Issue 20, "fix the bandwidth reference": read sweeps of the same bytes under the conditions that differ between
bench.cpp's `bw_ref`, its paired sweep and an independent sweep, measured in interleaved rounds in one process.

usage: .venv/bin/python bench/experiments/bw_sweeps.py [--mib 64] [--rotate-mib 384] [--rounds 9] [--age S]
(--age S: measure again S seconds after the buffers were written: whether how the VM backs them changes)
Variants (each a rotation over distinct copies, so every sweep reads DRAM):
  chunks   1 MiB chunks handed out dynamically (bench.cpp's prep_bw), worker hot (back-to-back, like bw_ref)
  slices   one contiguous slice per thread (an independent sweep; the quant bench's reference)
  cold     slices, after 3 ms idle (the worker asleep: what a sweep right after another library's call sees)
  4k       slices over buffers without MADV_HUGEPAGE (4 KiB pages)
  same     slices over copies that are byte-identical (what page merging or a cache could exploit)
  paired   slices, each timed sweep right after an untimed sweep of the copy half a rotation away (bench.cpp's
           bw_ref and paired sweeps since issue 20)
"""

from __future__ import annotations

import argparse
import mmap
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
import peers  # noqa: E402


def buffers(n: int, nbytes: int, huge: bool, identical: bool, seed: int):
    out, maps = [], []
    rng = np.random.default_rng(seed)
    first = None
    for _ in range(n):
        m = mmap.mmap(-1, nbytes)
        if huge:
            m.madvise(mmap.MADV_HUGEPAGE)
        a = np.frombuffer(m, np.uint8)
        if identical and first is not None:
            a[:] = first
        else:
            a[:] = rng.integers(0, 256, nbytes, dtype=np.uint8)
            first = a
        maps.append(m)
        out.append(a)
    return out, maps


def measure(sweep, variants, args, nbytes, nc, title):
    """Interleaved rounds over the variants; prints the median GB/s of each (variant, threads)."""
    res = {(v, t): [] for v in variants for t in args.threads}
    pos = 0
    for _ in range(args.rounds):
        for t in args.threads:
            for v, (bufs, mode, before) in variants.items():
                ts = []
                for _ in range(nc):
                    pos += 1
                    if before == "idle":
                        time.sleep(0.003)
                    elif before == "sweep":
                        sweep(bufs[(pos + nc // 2) % nc].ctypes.data, nbytes, t, mode)
                    t0 = time.perf_counter()
                    sweep(bufs[pos % nc].ctypes.data, nbytes, t, mode)
                    ts.append(time.perf_counter() - t0)
                res[(v, t)].append(nbytes / float(np.median(ts)) / 1e9)
    print(f"{title}: {args.mib} MiB per sweep, {nc} copies rotated, {args.rounds} rounds: GB/s median (p25-p75)")
    for (v, t), g in res.items():
        print(f"  {v:7s} t{t}: {np.median(g):5.1f} ({np.percentile(g, 25):.1f}-{np.percentile(g, 75):.1f})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rotate-mib", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--age", type=float, default=0.0)
    args = ap.parse_args()
    nbytes = args.mib << 20
    nc = max(2, -(-args.rotate_mib // args.mib))
    sweep = peers.Sweep(Path.home() / ".cache" / "morello-bench" / "lib")
    huge, _m1 = buffers(nc, nbytes, True, False, 1)
    small, _m2 = buffers(nc, nbytes, False, False, 2)
    same, _m3 = buffers(nc, nbytes, True, True, 3)
    variants = {  # name: (copies, slicing mode, what runs before each timed sweep)
        "chunks": (huge, 1, None),
        "slices": (huge, 0, None),
        "cold": (huge, 0, "idle"),
        "4k": (small, 0, None),
        "same": (same, 0, None),
        "paired": (huge, 0, "sweep"),
    }
    measure(sweep, variants, args, nbytes, nc, "fresh buffers")
    if args.age > 0:
        time.sleep(args.age)
        measure(sweep, variants, args, nbytes, nc, f"the same buffers {args.age:.0f} s later")
    return 0


if __name__ == "__main__":
    sys.exit(main())
