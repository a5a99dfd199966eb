#!/usr/bin/env python3
"""Turn morello_bench's Google Benchmark JSON into results.md (a table per workload) and a PNG plot per workload.

usage: python bench/report.py RESULTS.json [-o OUTDIR] [--calibration PROFILE.json]

Every figure is the median over the repetitions of one run (one process). Benchmark names are
"<workload>/<variant>/<impl>/t<threads>[/real_time]"; the counters "flop" and "bytes" are per-second rates.
References: the same-process read sweep over the same weight buffers ("bw_ref", GB/s) for the GEMVs (W1, W4),
the FMA peak ("fma_f32_peak", GFLOP/s for that many threads) for the GEMMs (W2, W3). With --calibration, the
DRAM read bandwidth that `morello-build calibrate` measured (its profile file) is a third roofline for W1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import report_w6  # noqa: E402 (bench/, beside this file)

PEERS = ("openblas", "onednn", "onednn_packed", "eigen", "libxsmm")
MEMORY_BOUND = {"W1", "W4"}
TITLES = {
    "W1": "W1: flagship decode GEMV 1x2048x16384, bf16 weights (64 MiB, rotated copies: DRAM)",
    "W2": "W2: square SGEMM",
    "W3": "W3: small matmuls (in cache)",
    "W4": "W4: fp32 GEMV y = W x, W row-major N x K (rotated copies: DRAM)",
}
IMPL_ORDER = [
    "morello",
    "morello_serial",
    "openblas",
    "onednn",
    "onednn_packed",
    "eigen",
    "libxsmm",
    "naive",
    "bw_ref",
    "fma_peak",
]
REFS = ("bw_ref", "fma_peak")
COLORS = {
    "morello": "tab:blue",
    "morello_serial": "tab:brown",
    "morello/td": "tab:cyan",
    "openblas": "tab:orange",
    "onednn": "tab:green",
    "onednn_packed": "tab:olive",
    "eigen": "tab:red",
    "libxsmm": "tab:purple",
    "naive": "tab:gray",
}
TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def load(path: Path):
    doc = json.loads(path.read_text())
    runs = defaultdict(lambda: {"time_us": [], "flop": [], "bytes": [], "ref": [], "label": "", "error": None})
    benches = doc.get("benchmarks", [])
    for b in benches:
        if b.get("run_type", "iteration") != "iteration":
            # with --benchmark_report_aggregates_only only the aggregates exist: use the medians then
            if b.get("aggregate_name") != "median" or any(x.get("run_type") == "iteration" for x in benches):
                continue
        name = b.get("run_name", b["name"])
        for suffix in ("/real_time", "/manual_time"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        parts = name.split("/")
        if len(parts) != 4:
            continue
        r = runs[tuple(parts)]
        if b.get("error_occurred"):
            r["error"] = b.get("error_message", "error")
            continue
        t_mean = b["real_time"] * TO_US[b.get("time_unit", "ns")] * 1e-6  # seconds per call, the mean
        t = b.get("t_med") or t_mean  # the median over batches (robust to preemption), when the bench has it
        flop_call = b.get("flop_call", b.get("flop", 0.0) * t_mean)
        bytes_call = b.get("bytes_call", b.get("bytes", 0.0) * t_mean)
        r["time_us"].append(t * 1e6)
        r["flop"].append(flop_call / t)
        r["bytes"].append(bytes_call / t)
        if "ref_bytes" in b:
            r["ref"].append(b["ref_bytes"])
        r["label"] = b.get("label", "")
    out = {}  # insertion order = the order the benchmark ran (registration order)
    for key, r in runs.items():
        med = lambda xs: statistics.median(xs) if xs else None
        out[key] = {
            "time_us": med(r["time_us"]),
            "gflops": (med(r["flop"]) or 0) / 1e9 if r["flop"] else None,
            "gbs": (med(r["bytes"]) or 0) / 1e9 if r["bytes"] else None,
            "paired_gbs": med(r["ref"]) / 1e9 if r["ref"] else None,
            "reps": len(r["time_us"]),
            "label": r["label"],
            "error": r["error"],
        }
    return doc.get("context", {}), out


def thread_key(t: str) -> int:
    return {"t1": 1, "t2": 2, "td": 3}.get(t, 9)


def variant_key(v: str):
    return (0, int(v[1:])) if v.startswith("n") and v[1:].isdigit() else (1, v)


def fmt(x, nd=1):
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) < 1:
        return f"{x:.3g}"
    return f"{x:.{nd}f}"


def calibrated_dram(path: Path) -> dict:
    """GB/s of DRAM reads in a `morello-build calibrate` profile: {"t1": one thread, "tN": all N CPUs}."""
    try:
        doc = json.loads(path.read_text())
        m, cpus = doc["measurements"], int(doc["host"]["cpus"])
        return {"t1": 64 / m["dram_line"]["median_ns"], f"t{cpus}": cpus * 64 / m["dram_line_all"]["median_ns"]}
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        sys.exit(f"report.py: error: {path} is not a calibrate profile with DRAM measurements ({e!r})")


class Report:
    def __init__(self, ctx, res, dram=None):
        self.ctx, self.res, self.dram = ctx, res, dram or {}

    def variants(self, w):
        return list(dict.fromkeys(v for (w2, v, _, _) in self.res if w2 == w))

    def morello(self, w, v, t):
        """The generated kernel's result: for 1 thread the faster of the kernel on a serial parallel-for
        and the kernel synthesized for `serial` (what a single-threaded engine asks for), where the bench
        has one; for 2 the faster of the bench's pool (t2) and the kernel's own default pool (td).
        Returns (result, which)."""
        cands = [("morello", "t1"), ("morello_serial", "t1")] if t == "t1" else [("morello", "t2"), ("morello", "td")]
        best = None
        for impl, tt in cands:
            r = self.get(w, v, impl, tt)
            if r and (best is None or r["time_us"] < best[0]["time_us"]):
                best = (r, tt if impl == "morello" else "serial")
        return best or (None, None)

    def get(self, w, v, impl, t):
        r = self.res.get((w, v, impl, t))
        return r if r and r["time_us"] is not None else None

    def reference(self, w, v, t):
        """(value, unit) of the reference for this case and thread count ('td' compares with 2 threads)."""
        tt = "t2" if t == "td" else t
        if w in MEMORY_BOUND:
            r = self.get(w, v, "bw_ref", tt)
            return (r["gbs"] if r else None), "GB/s"
        r = self.get(w, v, "fma_peak", tt) or self.get("REF", "peak", "fma_f32_peak", tt)
        return (r["gflops"] if r else None), "GFLOP/s"

    def best_peer(self, w, v, t):
        """Fastest peer with at most this many threads (t2 includes the single-threaded-only peers)."""
        n = 2 if t in ("t2", "td") else 1
        best = None
        for (w2, v2, impl, t2), r in self.res.items():
            if (w2, v2) != (w, v) or impl not in PEERS or r["time_us"] is None or thread_key(t2) > n:
                continue
            if best is None or r["time_us"] < best[1]["time_us"]:
                best = (f"{impl}/{t2}", r)
        return best

    def table(self, w):
        lines = []
        variants = self.variants(w)
        for v in variants:
            threads = sorted({t for (w2, v2, _, t) in self.res if (w2, v2) == (w, v)}, key=thread_key)
            lines.append(f"\n#### {w} {v}\n")
            mem = w in MEMORY_BOUND
            if mem:
                lines.append(
                    "| impl | threads | time (µs) | GFLOP/s | GB/s | of reference | of paired ref | vs best peer | notes |"
                )
                lines.append("|---|---|---:|---:|---:|---:|---:|---:|---|")
            else:
                lines.append("| impl | threads | time (µs) | GFLOP/s | GB/s | of reference | vs best peer | notes |")
                lines.append("|---|---|---:|---:|---:|---:|---:|---|")
            for t in threads:
                ref, unit = self.reference(w, v, t)
                bp = self.best_peer(w, v, t)
                impls = sorted(
                    {i for (w2, v2, i, t2) in self.res if (w2, v2, t2) == (w, v, t)},
                    key=lambda i: IMPL_ORDER.index(i) if i in IMPL_ORDER else 99,
                )
                for impl in impls:
                    r = self.res[(w, v, impl, t)]
                    if r["time_us"] is None:
                        lines.append(
                            f"| {impl} | {t[1:]} | - | - | - | - | - |{' - |' if mem else ''} skipped: {r['error']} |"
                        )
                        continue
                    val = r["gbs"] if unit == "GB/s" else r["gflops"]
                    frac = f"{val / ref:.2f}" if ref and val is not None else "-"
                    vs = "-"
                    if bp and impl not in REFS:
                        vs = f"{bp[1]['time_us'] / r['time_us']:.2f}"
                    note = r["label"].replace("|", "/")
                    if impl in REFS:
                        note = "reference: " + note
                    paired = ""
                    if mem:
                        pg = r.get("paired_gbs")
                        paired = f" {r['gbs'] / pg:.2f} |" if pg and r["gbs"] else " - |"
                    lines.append(
                        f"| {impl} | {t[1:]} | {fmt(r['time_us'], 2)} | {fmt(r['gflops'])} | "
                        f"{fmt(r['gbs'])} | {frac} |{paired} {vs} | {note} |"
                    )
                if bp:
                    lines.append(
                        f"| *best peer* | {t[1:]} | | | | | |{' |' if mem else ''} "
                        f"{bp[0]}; reference {fmt(ref)} {unit} |"
                    )
        return "\n".join(lines)

    def goals(self):
        """Issue 6's goals for the generated kernels, met or not, with the measured figure."""
        rows = []

        def add(goal, ok, figure):
            rows.append(f"| {goal} | {'met' if ok else ('**not met**' if ok is not None else 'n/a')} | {figure} |")

        for t in ("t1", "t2"):
            m, _ = self.morello("W1", "f32act.col", t)
            ref, _ = self.reference("W1", "f32act.col", t)
            cal = self.dram.get(t)
            if m and (m.get("paired_gbs") or ref or cal):
                # conservative: the largest of the paired sweep (same load), the bw_ref benchmark and calibrate's
                pref = max(x for x in (m.get("paired_gbs"), ref, cal) if x)
                f = m["gbs"] / pref
                add(
                    f"W1 f32 act, {t[1:]} thread(s): ≥ 0.95 of DRAM read bandwidth",
                    f >= 0.95,
                    f"{f:.3f} of the largest reference ({m['gbs']:.1f} of {pref:.1f} GB/s; paired sweep "
                    f"{m.get('paired_gbs') or 0:.1f}, bw_ref {ref or 0:.1f}"
                    + (f", calibrate {cal:.1f}" if cal else ", no calibration file")
                    + ")",
                )
            else:
                add(f"W1 f32 act, {t[1:]} thread(s): ≥ 0.95 of DRAM read bandwidth", None, "not measured")
            m, _ = self.morello("W1", "bf16act.col", t)
            o = self.get("W1", "bf16act.col", "onednn_packed", t)
            if m and o:
                add(
                    f"W1 bf16 act, {t[1:]} thread(s): at least as fast as oneDNN packed",
                    m["time_us"] <= o["time_us"],
                    f"{o['time_us'] / m['time_us']:.3f}× ({m['time_us']:.0f} vs {o['time_us']:.0f} µs)",
                )
            else:
                add(f"W1 bf16 act, {t[1:]} thread(s): at least as fast as oneDNN packed", None, "not measured")
        for v in self.variants("W2"):
            for t, need in (("t1", 0.95), ("t2", 0.9)):
                m, _ = self.morello("W2", v, t)
                peers = [r for i in ("openblas", "onednn", "onednn_packed") if (r := self.get("W2", v, i, t))]
                goal = f"W2 {v}, {t[1:]} thread(s): ≥ {need}× best of OpenBLAS/oneDNN"
                if m and peers:
                    best = min(p["time_us"] for p in peers)
                    add(goal, best / m["time_us"] >= need, f"{best / m['time_us']:.3f}×")
                else:
                    add(goal, None, "not measured")
        for v in self.variants("W3"):
            n = int(v[1:])
            need = 1.0 if n <= 32 else 0.95
            (m, _), x = self.morello("W3", v, "t1"), self.get("W3", v, "libxsmm", "t1")
            goal = f"W3 {v}: {'faster than' if need == 1.0 else 'within 0.95× of'} libxsmm (1 thread)"
            if m and x:
                r = x["time_us"] / m["time_us"]
                add(goal, r > 1.0 if need == 1.0 else r >= 0.95, f"{r:.3f}×")
            else:
                add(goal, None, "not measured")
        for v in self.variants("W4"):
            for t in ("t1", "t2"):
                (m, _), bp = self.morello("W4", v, t), self.best_peer("W4", v, t)
                goal = f"W4 {v}, {t[1:]} thread(s): ≥ 0.95× best peer"
                if m and bp:
                    r = bp[1]["time_us"] / m["time_us"]
                    add(goal, r >= 0.95, f"{r:.3f}× (best peer {bp[0]})")
                else:
                    add(goal, None, "not measured")
        return (
            "For 1 thread the generated kernel's figure is the faster of the kernel on a serial parallel-for "
            "and, where the bench has one (W1-W4), the kernel synthesized for the same spec with `serial` "
            "(`morello_serial`: what a single-threaded engine asks for). For 2 threads it is the faster of "
            "the bench's pool (`t2`) and the kernel's default pool (`td`).\n\n| goal | status | measured |\n|---|---|---|\n"
            + "\n".join(rows)
        )

    def plot(self, w, path: Path):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return False
        variants = self.variants(w)
        if not variants:
            return False
        mem = w in MEMORY_BOUND
        unit = "GB/s" if mem else "GFLOP/s"
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(variants) * 2), 4.8), sharey=True)
        for ax, t in zip(axes, ("t1", "t2")):
            impls = [(i, t) for i in IMPL_ORDER if i not in REFS and any(self.get(w, v, i, t) for v in variants)]
            if t == "t2" and any(self.get(w, v, "morello", "td") for v in variants):
                impls.insert(1, ("morello", "td"))
            width = 0.8 / max(1, len(impls))
            for j, (impl, tt) in enumerate(impls):
                xs, ys = [], []
                for k, v in enumerate(variants):
                    r = self.get(w, v, impl, tt)
                    if r:
                        xs.append(k + (j - (len(impls) - 1) / 2) * width)
                        ys.append(r["gbs"] if mem else r["gflops"])
                ax.bar(
                    xs,
                    ys,
                    width,
                    label=impl if tt != "td" else "morello (default pool)",
                    color=COLORS.get(impl if tt != "td" else "morello/td"),
                )
            for k, v in enumerate(variants):
                ref, _ = self.reference(w, v, t)
                if ref:
                    ax.hlines(
                        ref, k - 0.45, k + 0.45, colors="k", linestyles="dashed", label="reference" if k == 0 else None
                    )
            ax.set_xticks(range(len(variants)))
            ax.set_xticklabels(variants, rotation=20)
            ax.set_title(f"{t[1:]} thread{'s' if t == 't2' else ''}")
            ax.set_ylabel(unit)
            ax.grid(axis="y", alpha=0.3)
        for ax in axes:
            ax.legend(fontsize=7)
        fig.suptitle(
            TITLES.get(w, w) + (" — dashed: read-bandwidth reference" if mem else " — dashed: FMA peak"), fontsize=9
        )
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("-o", "--outdir", type=Path, default=None)
    ap.add_argument("--calibration", type=Path, default=None, help="a `morello-build calibrate` profile file")
    a = ap.parse_args(argv)
    outdir = a.outdir or a.json.parent
    outdir.mkdir(parents=True, exist_ok=True)
    ctx, res = load(a.json)
    rep = Report(ctx, res, calibrated_dram(a.calibration) if a.calibration else None)
    md = ["# morello-build benchmark results", ""]
    caches = ", ".join(
        f"L{c['level']}{c['type'][0].lower()} {c['size'] // 1024} KiB"
        + (f" x{ctx.get('num_cpus', 1) // max(1, c.get('num_sharing', 1))}" if c.get("num_sharing") else "")
        for c in ctx.get("caches", [])
    )
    md.append(
        f"Run {ctx.get('date', '?')} on {ctx.get('host_name', '?')}: {ctx.get('num_cpus', '?')} CPUs at "
        f"{ctx.get('mhz_per_cpu', '?')} MHz; caches {caches}.  "
    )
    md.append(
        f"OpenBLAS core `{ctx.get('openblas_core', '?')}` (`{ctx.get('openblas_config', '?')}`), "
        f"bf16: {ctx.get('openblas_bf16', '?')}; "
        f"oneDNN {ctx.get('onednn_version', '?')}, libxsmm target `{ctx.get('libxsmm_target', '?')}`, "
        f"{ctx.get('morello_kernels', '?')} generated kernels, mode {ctx.get('bench_mode', '?')}.  "
    )
    reps = sorted({r["reps"] for r in res.values() if r["reps"]})
    md.append(
        f"Medians of {', '.join(map(str, reps))} repetitions of the time per call, each itself the median over batches of \u2265 25 \u00b5s (`t_med`: a preempted batch is an outlier, where Google Benchmark's mean would include it). GB/s counts the compulsory "
        'traffic (B + A + C). "of reference": GB/s over the same-process read sweep of the same weight '
        "buffers (`bw_ref`, a benchmark of its own; W1, W4) or GFLOP/s over the FMA peak for that many threads "
        '(W2, W3: `fma_peak`, run again next to each case); "of paired ref" (W1, W4): over an untimed sweep of the same copy run after every timed '
        'call of that benchmark, i.e. under the same machine load (the W1 goals use the largest of the two and, given a calibrate profile, its DRAM read figure). "vs best peer": '
        "best peer time / this time (> 1: faster than every peer; for 2 threads the single-threaded-only "
        "peers count too). Threads `d`: the kernel's default overload."
    )
    md.append("")
    for impl in ("fma_f32_peak", "dpbf16_peak"):
        for t in ("t1", "t2"):
            r = rep.get("REF", "peak", impl, t)
            if r:
                md.append(f"- {impl}, {t[1:]} thread(s): {r['gflops']:.1f} GFLOP/s ({r['label']})")
    md.append("\n## Goals of issue 6\n")
    md.append(rep.goals())
    for w in ("W1", "W2", "W3", "W4"):
        if not any(k[0] == w for k in res):
            continue
        md.append(f"\n## {TITLES[w]}\n")
        png = outdir / f"{w}.png"
        if rep.plot(w, png):
            md.append(f"![{w}]({png.name})\n")
        md.append(rep.table(w))
    md += report_w6.section(json.loads(a.json.read_text()))
    (outdir / "results.md").write_text("\n".join(md) + "\n")
    print(f"wrote {outdir / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
