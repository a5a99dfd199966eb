"""Quantized-weights benchmark (issue 21): decode GEMVs with Q8_0 / Q4_0 weights against ggml and ONNX Runtime on
the same bytes, our bf16 kernel on the same shape, and a read sweep over the same bytes, in one process.

usage: python bench/quant/run.py --ggml-lib DIR --ggml-include DIR [--quick] [--rounds R] [--out DIR]
(bash bench/quant/run.sh installs the dependencies, builds ggml and runs this). See bench/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import formats  # noqa: E402
import peers  # noqa: E402
import report  # noqa: E402

WORKLOADS = [("W5/2048x16384", 2048, 16384), ("W5/2560x10240", 2560, 10240)]
MS = [1, 4]
THREADS = [1, 2]
# Our quantized kernels (README "Weight formats"; issue 21's W5 list): (name, the values they compute with, spec).
# A generator rejection is listed, with its message, under "Notes". The arguments come from one ggml weight copy
# (our_args, by the kernel's parameter table): q8_0 / q4_0 get ggml's block bytes as they are; i8 / i4 with groups
# of 32 and f16 scales the very values of the Q8_0 / Q4_0 blocks (so the same references and read sweeps);
# per-channel i8 the Q8_0 q with one f32 scale per column (the first block's d: its own reference, "i8ch").
OUR_QUANT_SPECS = [
    ("q8_0", "q8_0", "matmul {m}x{k}x{n} a=f32 b=q8_0:col c=f32"),
    ("i8 g32", "q8_0", "matmul {m}x{k}x{n} a=f32 b=i8:col group=32 scales=f16 c=f32"),
    ("i8 channel", "i8ch", "matmul {m}x{k}x{n} a=f32 b=i8:col group=channel scales=f32 c=f32"),
    ("q4_0", "q4_0", "matmul {m}x{k}x{n} a=f32 b=q4_0:col c=f32"),
    ("i4 g32", "q4_0", "matmul {m}x{k}x{n} a=f32 b=i4:col group=32 scales=f16 c=f32"),
    # aquant=i8: A quantized to int8 per block of 32 in the kernel, integer dot products (README "Activation
    # quantization"); checked against the int8-activation bound, like ggml's and ONNX Runtime's int8 paths.
    ("q8_0 aquant", "q8_0", "matmul {m}x{k}x{n} a=f32 b=q8_0:col c=f32 aquant=i8"),
    ("i8 g32 aquant", "q8_0", "matmul {m}x{k}x{n} a=f32 b=i8:col group=32 scales=f16 c=f32 aquant=i8"),
    ("q4_0 aquant", "q4_0", "matmul {m}x{k}x{n} a=f32 b=q4_0:col c=f32 aquant=i8"),
    ("i4 g32 aquant", "q4_0", "matmul {m}x{k}x{n} a=f32 b=i4:col group=32 scales=f16 c=f32 aquant=i8"),
]
# f16 weights: the bf16 copies' values (|v| in [2^-8, 1), 8-bit mantissas: exact in f16), so the bf16 reference.
OUR_F16_SPEC = "matmul {m}x{k}x{n} a=f32 b=f16:col c=f32"


def rotation_bytes(target_mib: int) -> int:
    """Bytes of weight copies rotated between calls so that every call reads its weights from DRAM (as
    bench.cpp does): at least target_mib and twice the L3. The L3 from sysfs: Python's sysconf has no
    SC_LEVEL3_CACHE_SIZE, and with target_mib alone a 480 MiB L3 held every copy."""
    from morello_build.target.host import host_facts

    l3 = host_facts().l3.bytes if host_facts().l3 else 0
    return max(target_mib << 20, 2 * l3)


def rotation_copies(nbytes: int, target_mib: int) -> int:
    return max(2, -(-rotation_bytes(target_mib) // nbytes))


def bf16_copy(n: int, k: int, seed: int) -> np.ndarray:
    """Random bf16 bits (|value| in [2^-8, 1), either sign) as uint16 [N, K]."""
    rng = np.random.default_rng([seed, 7])
    u = rng.integers(0x3B80, 0x3F80, (n, k), dtype=np.uint16)
    return u | (rng.integers(0, 2, (n, k), dtype=np.uint16) << 15)


def bf16_values(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32)


_NP = {"f32": np.float32, "f16": np.float16, "i8": np.int8, "u8": np.uint8}


def format_arrays(values: str, spec: str, w: formats.QWeights) -> dict:
    """The arrays of our kernel's B (b, b_scales) holding one ggml weight copy's values (OUR_QUANT_SPECS)."""
    n, nb, _ = w.q.shape
    if values in ("q8_0", "q4_0") and "b=q" in spec:  # ggml's blocks as they are
        return {"b": w.raw}
    if values == "i8ch":
        return {"b": w.q.reshape(n, -1), "b_scales": w.d[:, :1].astype(np.float32)}
    if "b=i4" in spec:  # (nibble - 8) * s: element 2j in the low nibble of byte j
        u = (w.q.astype(np.int16) + 8).astype(np.uint8).reshape(n, -1)
        return {"b": u[:, 0::2] | (u[:, 1::2] << 4), "b_scales": w.d}
    return {"b": w.q.reshape(n, -1), "b_scales": w.d}


def our_args(kernel, arrays: dict):
    """(b, {other input: array}) for our kernel, by its parameter table (names, numpy shapes and dtypes), or None
    when an array is missing or its size differs (then the kernel is listed as skipped)."""
    out = {}
    for p in kernel.params:
        if p.role != 0 or p.name == "a" or (p.term and not p.name.startswith("b_")):  # B's arrays follow c
            continue
        x = arrays.get(p.name)
        if x is None or x.size * x.itemsize != int(np.prod(p.shape)) * np.dtype(_NP[p.dtype]).itemsize:
            return None
        out[p.name] = np.ascontiguousarray(x).astype(_NP[p.dtype], copy=False).reshape(p.shape)
    b = out.pop("b", None)
    return None if b is None else (b, out)


class Workload:
    """Everything timed on one shape: weight copies per format, references, and the implementations."""

    def __init__(self, name, k, n, args, ggml, sweep, log):
        self.name, self.k, self.n, self.log = name, k, n, log
        rng = np.random.default_rng(1)
        self.xs = [rng.uniform(-1, 1, (m, k)).astype(np.float32) for m in MS]
        self.impls, self.sweeps, self.errors = [], {}, []
        self.refs = {}
        self.args = args
        self._bf16(ggml, sweep)
        for fmt in ("q8_0", "q4_0"):
            self._quant(fmt, ggml, sweep)

    def _copies(self, fmt):
        nbytes = self.n * self.k // formats.QK * formats.BLOCK_BYTES[fmt]
        nc = rotation_copies(nbytes, self.args.rotate_mib)
        return [_Lazy(fmt, self.n, self.k, c) for c in range(nc)]

    def _refs(self, fmt, w_deq):
        self.refs[fmt] = [formats.reference(w_deq, x) for x in self.xs]

    def _bf16(self, ggml, sweep):
        nbytes = self.n * self.k * 2
        nc = rotation_copies(nbytes, self.args.rotate_mib)
        self.bf16 = [bf16_copy(self.n, self.k, c) for c in range(nc)]
        self._refs("bf16", bf16_values(self.bf16[0]))
        from morello_build.tools import pyapi

        specs = [f"matmul {m}x{self.k}x{self.n} a=f32 b=bf16:col c=f32" for m in MS]
        t0 = time.time()
        kernels = pyapi.compile_kernels(specs, profile=self.args.profile)
        self.log(f"{self.name}: our bf16 kernels ready ({time.time() - t0:.0f} s)")
        for mi, kern in enumerate(kernels):
            self._add(mi, peers.our_impl("ours bf16", "bf16", kern, self.xs[mi], self.bf16, False))
        self.sweeps["bf16"] = peers.sweep_impl(sweep, "bf16", [a.ctypes.data for a in self.bf16], nbytes)
        self._ours_f16()

    def _quant(self, fmt, ggml, sweep):
        copies = self._copies(fmt)
        self._refs(fmt, formats.dequantize(fmt, copies[0].raw(), self.k))
        for repack in (False, True) if fmt == "q4_0" else (False,):
            got = ggml.impls(fmt, MS, self.xs, [c.raw for c in copies], self.k, self.n, repack)
            if not got[0]:
                self.errors.append(f"ggml {fmt} repack={repack}: not available (no repack buffer type)")
                continue
            impls, ptrs = got
            for mi, imp in enumerate(impls):
                self._add(mi, imp)
            if not repack:
                self.sweeps[fmt] = peers.sweep_impl(sweep, fmt, ptrs, impls[0].weight_bytes)
        self.ort = getattr(self, "ort", {})
        self.ort[fmt] = [c.ort for c in copies]
        self._ours_quant(fmt, copies)

    def _compile(self, tmpl):
        from morello_build.tools import pyapi

        try:
            return pyapi.compile_kernels([tmpl.format(m=m, k=self.k, n=self.n) for m in MS], profile=self.args.profile)
        except Exception as e:  # the generator rejects the spec
            spec = tmpl.format(m="M", k=self.k, n=self.n)
            self.errors.append(f"ours `{spec}`: skipped ({str(e).splitlines()[0][:110]})")
            return None

    def _ours_quant(self, fmt, copies):
        for name, values, tmpl in OUR_QUANT_SPECS:
            if values != fmt and not (values == "i8ch" and fmt == "q8_0"):
                continue
            kernels = self._compile(tmpl)
            if kernels is None:
                continue
            if values == "i8ch":
                w = copies[0].weights()
                self._refs(values, w.q.reshape(self.n, -1) * w.d[:, :1].astype(np.float32))
            # one argument set per copy, shared by the M kernels (the same B parameters)
            args = [our_args(kernels[0], format_arrays(values, kernels[0].spec, c.weights())) for c in copies]
            if args[0] is None:
                self.errors.append(f"ours {kernels[0].spec}: skipped (parameters {kernels[0].params} not adapted)")
                continue
            for mi, kern in enumerate(kernels):
                int8_act = " aquant=i8" in kern.spec  # activations quantized in the kernel
                self._add(mi, peers.our_impl(f"ours {name}", values, kern, self.xs[mi], args, int8_act))

    def _ours_f16(self):
        kernels = self._compile(OUR_F16_SPEC)
        if kernels is None:
            return
        halves = [bf16_values(c).astype(np.float16) for c in self.bf16]
        for mi, kern in enumerate(kernels):
            self._add(mi, peers.our_impl("ours f16", "bf16", kern, self.xs[mi], halves, False))

    def ort_impls(self, threads):
        """ONNX Runtime sessions for one thread count (built per thread count: each prepacks its weights)."""
        out = []
        for fmt, copies in self.ort.items():
            for acc in (0, 4):
                try:
                    rot = rotation_bytes(self.args.rotate_mib)
                    imps = peers.ort_impls(fmt, MS, self.xs, copies, self.k, self.n, acc, threads, rot)
                except Exception as e:
                    self.errors.append(f"ORT {fmt} accuracy_level={acc}: {str(e).splitlines()[0][:200]}")
                    continue
                for mi, imp in enumerate(imps):
                    imp.m_index = mi
                    out.append(imp)
        return out

    def _add(self, mi, imp):
        imp.m_index = mi
        self.impls.append(imp)

    def check(self, imp, threads) -> str:
        imp.run(0, threads)
        return formats.check(imp.out(), self.refs[imp.fmt][imp.m_index], imp.int8_act)


class _Lazy:
    """One quantized weight copy, regenerated from its seed when asked (keeps the Python side small)."""

    def __init__(self, fmt, n, k, copy):
        self.fmt, self.n, self.k, self.copy = fmt, n, k, copy

    def weights(self):
        return formats.random_weights(self.fmt, self.n, self.k, np.random.default_rng([self.copy, 11]))

    def raw(self):
        return self.weights().raw

    def ort(self):
        return formats.ort_tensors(self.weights())


IDLE_TIMEOUT = 0.5  # s


def other_threads_running() -> bool:
    """Whether a thread of this process other than the caller is running or runnable (state R in
    /proc/self/task/*/stat: a pool's worker spinning after its call)."""
    me = threading.get_native_id()
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread has exited
        if state == "R" and int(stat.parent.name) != me:
            return True
    return False


def wait_for_idle_threads() -> float:
    """Waits until the previous implementation's threads have stopped spinning (ggml's OpenMP workers,
    ONNX Runtime's pool and ours spin for a while after a call: on a 2-core machine a spinner takes a core
    from the next implementation's threads; a fixed 3 ms pause left the 2-thread read sweeps 2.7x slow).
    Returns the seconds waited (IDLE_TIMEOUT at most)."""
    t0 = time.perf_counter()
    while other_threads_running() and time.perf_counter() - t0 < IDLE_TIMEOUT:
        time.sleep(0.001)
    return time.perf_counter() - t0


def time_rounds(impls, threads, rounds, calls, log):
    """Interleaved rounds: per round, each implementation makes one untimed call (wakes its threads), then
    `calls` timed calls on rotated weight copies; a round's figure is their median. Result: median over rounds."""
    per = {id(i): [] for i in impls}
    pos = {id(i): 1 for i in impls}
    waits = []
    for r in range(rounds):
        order = impls[r % len(impls) :] + impls[: r % len(impls)]
        for imp in order:
            c = pos[id(imp)]
            imp.run(c % imp.ncopies, threads)
            ts = []
            for _ in range(calls):
                c += 1
                t0 = time.perf_counter()
                imp.run(c % imp.ncopies, threads)
                ts.append(time.perf_counter() - t0)
            pos[id(imp)] = c + 1
            per[id(imp)].append(float(np.median(ts)))
            waits.append(wait_for_idle_threads())
    log(
        f"  waits for the previous implementation's spinning threads: median {np.median(waits) * 1e3:.1f} ms, "
        f"max {max(waits) * 1e3:.0f} ms" + (" (gave up: some thread still ran)" if max(waits) >= IDLE_TIMEOUT else "")
    )
    return {k: (float(np.median(v)), float(np.percentile(v, 25)), float(np.percentile(v, 75))) for k, v in per.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ggml-lib", required=True, type=Path)
    ap.add_argument("--ggml-include", required=True, type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "morello-bench")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 15, with --quick 5)")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--rotate-mib", type=int, default=384)
    ap.add_argument("--quick", action="store_true", help="first workload only, 5 rounds unless --rounds says")
    ap.add_argument(
        "--filter", default="", help="only implementations whose name contains this, or one of A|B|... (sweeps kept)"
    )
    ap.add_argument("--threads", type=int, nargs="+", default=THREADS, help="thread counts (default: 1 2)")
    ap.add_argument("--profile", default=None, help="cost profile of our kernels (a calibrate file; default: host)")
    args = ap.parse_args()
    if args.rounds is None:
        args.rounds = 5 if args.quick else 15
    if args.rounds < 1 or args.calls < 1:
        ap.error("--rounds and --calls take a whole number of at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.0f} s] {msg}", flush=True)

    sweep = peers.Sweep(args.cache / "lib")
    ggml = peers.GGML(args.ggml_lib, args.ggml_include, args.cache / "lib")
    rows, notes = [], []
    for wname, k, n in WORKLOADS[:1] if args.quick else WORKLOADS:
        wl = Workload(wname, k, n, args, ggml, sweep, log)
        log(f"{wname}: weights and ggml/ours ready")
        for t in args.threads:
            impls = good = None  # free the previous thread count's ORT sessions first
            gc.collect()
            impls = wl.impls + wl.ort_impls(t)
            if args.filter:
                impls = [i for i in impls if any(part in i.name for part in args.filter.split("|"))]
            good = []
            for imp in impls:
                imp.error = wl.check(imp, t)
                if imp.error:
                    rows.append(report.row(wname, imp, MS, t, None))
                    log(f"{wname} {imp.name} M={MS[imp.m_index]} t{t}: {imp.error}")
                else:
                    good.append(imp)
            sweeps = list(wl.sweeps.values())
            for s in sweeps:
                s.m_index = None
            log(f"{wname} t{t}: timing {len(good)} implementations + {len(sweeps)} sweeps, {args.rounds} rounds")
            res = time_rounds(good + sweeps, t, args.rounds, args.calls, log)
            for imp in good + sweeps:
                rows.append(report.row(wname, imp, MS, t, res[id(imp)]))
        notes += [f"{wname}: {e}" for e in wl.errors]
        impls = good = wl = None
        gc.collect()
    meta = {
        "cpu": report.cpu_name(),
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
        "rounds": args.rounds,
        "calls": args.calls,
        "rotate_mib": rotation_bytes(args.rotate_mib) >> 20,
        "profile": args.profile or "host",
        "notes": notes,
    }
    (args.out / "quant.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = report.markdown(rows, meta)
    (args.out / "quant.md").write_text(md)
    print(md)
    log(f"results in {args.out}/quant.md, quant.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
