"""W6 of the report: the fused gate/up GEMV (issue 22), from the counters of its interleaved benchmark.

Each repetition of "W6/gate_up.bf16/interleaved/t<T>" runs the fused kernel, two generated GEMVs plus a
GELU·up pass, and the read sweep over both weight matrices in interleaved rounds and reports the medians
over its rounds (fused_s, unfused_s, sweep_s: seconds per call); here, the medians over the repetitions.
"""

from __future__ import annotations

import statistics

TITLE = "W6: fused gate/up GEMV 1x2560x10240, gelu(x·Wgate) ⊙ (x·Wup), bf16 weights N×K (rotated copies: DRAM)"
KEYS = ("fused_s", "unfused_s", "sweep_s")


def collect(doc: dict) -> dict[str, dict]:
    """Per thread count ("t1", "t2"): the median of each counter over the repetitions, or the error."""
    runs: dict[str, dict] = {}
    for b in doc.get("benchmarks", []):
        parts = b.get("run_name", b["name"]).split("/")  # W6/variant/impl/t<T>[/iterations:1/manual_time]
        if parts[0] != "W6" or len(parts) < 4 or b.get("run_type", "iteration") != "iteration":
            continue
        r = runs.setdefault(parts[3], {k: [] for k in KEYS} | {"rounds": [], "error": None})
        if b.get("error_occurred"):
            r["error"] = b.get("error_message", "error")
            continue
        for k in (*KEYS, "rounds"):
            r[k].append(b[k])
        r["bytes"] = b.get("bytes_call", 0.0)
    return {
        t: ({"error": r["error"]} if r["error"] else {k: statistics.median(r[k]) for k in (*KEYS, "rounds")})
        | {"bytes": r.get("bytes", 0.0), "reps": len(r["fused_s"])}
        for t, r in sorted(runs.items())
    }


def section(doc: dict) -> list[str]:
    """The W6 table and its goals (markdown lines); none when the run has no W6."""
    res = collect(doc)
    if not res:
        return []
    md = [
        f"\n## {TITLE}\n",
        "| threads | fused ms | unfused ms | sweep ms | fused GB/s | of sweep (≥ 0.95) | "
        "vs unfused (> 1) | rounds × reps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t, r in res.items():
        if r.get("error"):
            md.append(f"| {t[1:]} | {r['error']} | | | | | | |")
            continue
        of_sweep, speedup = r["sweep_s"] / r["fused_s"], r["unfused_s"] / r["fused_s"]
        md.append(
            f"| {t[1:]} | {r['fused_s'] * 1e3:.2f} | {r['unfused_s'] * 1e3:.2f} | {r['sweep_s'] * 1e3:.2f} | "
            f"{r['bytes'] / r['fused_s'] / 1e9:.1f} | {of_sweep:.3f} {'met' if of_sweep >= 0.95 else '**not met**'} | "
            f"{speedup:.2f}× {'met' if speedup > 1 else '**not met**'} | {r['rounds']:.0f} × {r['reps']} |"
        )
    md.append(
        "\nMedians over interleaved rounds (each call on the next weight copy), then over the repetitions. "
        "Unfused: two generated GEMVs (`matmul 1x2560x10240 a=f32 b=bf16:col c=f32`) and a GELU·up pass over "
        "their outputs; sweep: the read sweep (as `bw_ref`) over both matrices."
    )
    return md
