"""Rows and the markdown report of the quantized-weights benchmark (bench/quant/run.py)."""

from __future__ import annotations


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def row(workload, imp, ms, threads, timing) -> dict:
    """One result: timing = (median, p25, p75) seconds per call, None when not timed (wrong result)."""
    return {
        "workload": workload,
        "impl": imp.name,
        "fmt": imp.fmt,
        "m": None if imp.m_index is None else ms[imp.m_index],
        "threads": threads,
        "weight_bytes": imp.weight_bytes,
        "label": imp.label,
        "error": imp.error,
        "sweep": imp.name.startswith("read sweep"),
        "ours": imp.name.startswith("ours"),
        "t": None if timing is None else timing[0],
        "t_q1": None if timing is None else timing[1],
        "t_q3": None if timing is None else timing[2],
    }


# Formats timed without a read sweep of their own: the sweep of a format with about as many bytes per value.
SWEEP_OF = {"i8ch": "q8_0"}


def _fmt_ratio(x):
    return "" if x is None else f"{x:.2f}×"


def markdown(rows, meta) -> str:
    out = [
        "# Quantized-weights GEMVs (issue 21)",
        "",
        f"CPU: {meta['cpu']}; load average at the end {tuple(round(v, 2) for v in meta['load_average'])}; "
        f"{meta['rounds']} interleaved rounds of {meta['calls']} calls, medians; weights rotated over "
        f">= {meta['rotate_mib']} MiB of copies (from DRAM); our kernels' cost profile: {meta.get('profile', 'host')}.",
        "",
        "- GB/s: weight bytes of one call as the implementation stores them / time. `of sweep`: that over the",
        "  same-process read sweep of the format's bytes on the same thread count. `vs best peer`: the fastest",
        "  peer (not ours) on the same format, M and threads / this (> 1: faster). `vs ours bf16`: our bf16 kernel",
        "  on the same shape, M and threads / this.",
        "",
    ]
    ok = [r for r in rows if r["t"] is not None]
    for wl in dict.fromkeys(r["workload"] for r in rows):
        head = "| impl | M | threads | time µs (p25–p75) | GB/s | of sweep | vs best peer | vs ours bf16 | note |"
        out += [f"## {wl}", "", head, "|---|---|---|---|---|---|---|---|---|"]
        sweep = {(r["fmt"], r["threads"]): r["weight_bytes"] / r["t"] for r in ok if r["workload"] == wl and r["sweep"]}
        for r in sorted(
            (r for r in rows if r["workload"] == wl),
            key=lambda r: (r["threads"], r["m"] or 0, ["bf16", "q8_0", "i8ch", "q4_0"].index(r["fmt"]), r["impl"]),
        ):
            if r["t"] is None:
                out.append(f"| {r['impl']} | {r['m']} | {r['threads']} | – | | | | | {r['error']} |")
                continue
            gbs = r["weight_bytes"] / r["t"] / 1e9
            frac = sweep.get((SWEEP_OF.get(r["fmt"], r["fmt"]), r["threads"]))
            frac = "" if frac is None else f"{r['weight_bytes'] / r['t'] / frac:.2f}"
            same = [
                x for x in ok
                if x["workload"] == wl and x["m"] == r["m"] and x["threads"] == r["threads"] and r["m"] is not None
            ]  # fmt: skip
            peers = [x["t"] for x in same if x["fmt"] == r["fmt"] and not x["ours"] and not x["sweep"]]
            bf16 = [x["t"] for x in same if x["impl"] == "ours bf16"]
            vs_peer = min(peers) / r["t"] if peers else None
            vs_bf16 = bf16[0] / r["t"] if bf16 else None
            t = f"{r['t'] * 1e6:.0f} ({r['t_q1'] * 1e6:.0f}–{r['t_q3'] * 1e6:.0f})"
            m = "" if r["m"] is None else r["m"]
            out.append(
                f"| {r['impl']} | {m} | {r['threads']} | {t} | {gbs:.1f} | {frac} | {_fmt_ratio(vs_peer)} | "
                f"{_fmt_ratio(vs_bf16)} | {r['label']} |"
            )
        out.append("")
    if meta["notes"]:
        out += ["## Notes", ""] + [f"- {n}" for n in meta["notes"]] + [""]
    return "\n".join(out)
