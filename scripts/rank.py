#!/usr/bin/env python3
"""The instrument: how well does the cost model rank programs on this host?

Enumerates distinct candidate programs for SPEC (synth/candidates.py: pinned outer decisions, the rest
synthesized), compiles them all into one benchmark (tools/measure.py), times them warm (operands in cache)
and, with --dram, with operands in DRAM (rotated copies spanning twice the last-level cache), and reports
Spearman's rho between model cost and measured time, the model's pick against the fastest candidate, and
the cliff check: candidates the model costs within 3x of its pick that run more than 3x slower.

    python scripts/rank.py "matmul 256x256x256 serial" --isa avx2 --candidates 30 --dram --json out.json

With --rescore, no new measurement: the programs a previous run measured (its JSON file and the pickle
beside it) are priced again by the current cost model and --profile, and the figures recomputed from the
same timings (the pick: the program the current model costs least among them).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import format_tree
from morello_build.synth.candidates import enumerate_candidates
from morello_build.target import get_target
from morello_build.tools import measure

CLIFF = 3.0


def summarize(costs, timings) -> dict:
    """rho (on medians and on 10th percentiles), the pick against the fastest, and the cliffs."""
    secs = [t.seconds for t in timings]
    fastest = min(range(len(secs)), key=secs.__getitem__)
    low = [t.low for t in timings]
    cliffs = [i for i in range(1, len(costs)) if costs[i] <= CLIFF * costs[0] and secs[i] > CLIFF * secs[0]]
    cliffs_low = [i for i in range(1, len(costs)) if costs[i] <= CLIFF * costs[0] and low[i] > CLIFF * low[0]]
    return dict(
        rho=measure.spearman(costs, secs),
        repeatability=measure.repeatability(timings) if all(hasattr(t, "halves") for t in timings) else None,
        rho_low=measure.spearman(costs, low),
        pick_over_fastest=secs[0] / secs[fastest],
        pick_over_fastest_low=low[0] / min(low),
        fastest=fastest,
        cliffs=cliffs,
        cliffs_low=cliffs_low,
        median_spread=sorted(t.spread for t in timings)[len(timings) // 2],
        misranked=measure.misranked(costs, secs),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("spec")
    p.add_argument("--isa", default="native")
    p.add_argument("--threads", type=int, default=None, help="threads the programs are synthesized for")
    p.add_argument(
        "--profile", default=None, help="cost profile: builtin, host, a name or a calibrate file (default: host)"
    )
    p.add_argument("--candidates", type=int, default=30)
    p.add_argument("--per-root", type=int, default=3, help="at most this many candidates per root decision")
    p.add_argument("--dram", action="store_true", help="also time with operands in DRAM")
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--sample-ms", type=float, default=2.0)
    p.add_argument("--jobs", type=int, default=2, help="compiler processes")
    p.add_argument(
        "--clock",
        choices=("auto", "cpu", "wall"),
        default="auto",
        help="cpu: the calling thread's CPU time (serial programs on a busy host); auto: cpu for serial specs",
    )
    p.add_argument("--json", default=None, help="write the figures here (default: rank-<spec>.json)")
    p.add_argument("--rescore", default=None, help="a previous run's JSON: price its programs again, time nothing")
    p.add_argument("--workdir", default=None)
    args = p.parse_args(argv)

    try:
        user = parse_spec(args.spec)
        threads = 1 if user.serial and args.threads is None else args.threads
        target = get_target(args.isa, threads=threads, profile=args.profile)
    except ValueError as e:  # a bad spec, ISA or profile: one line, no traceback
        p.error(str(e))
    if args.rescore:
        return rescore(Path(args.rescore), target)
    t0 = time.monotonic()
    cands = enumerate_candidates(user, target, args.candidates, per_root=args.per_root)
    t_enum = time.monotonic() - t0
    work = Path(args.workdir or tempfile.mkdtemp(prefix="morello-rank-"))
    exe = measure.build_benchmark(user, target, [c.impl for c in cands], work, jobs=args.jobs)
    t_build = time.monotonic() - t0 - t_enum
    clock = measure.default_clock(user) if args.clock == "auto" else args.clock
    kw = dict(processes=args.processes, rounds=args.rounds, sample_s=args.sample_ms / 1000, clock=clock)
    modes = {"warm": measure.time_programs(exe, len(cands), **kw)}
    if args.dram:
        modes["dram"] = measure.time_programs(exe, len(cands), copies=measure.dram_copies(user), **kw)
    t_time = time.monotonic() - t0 - t_enum - t_build
    costs = [c.cost for c in cands]
    summaries = {m: summarize(costs, ts) for m, ts in modes.items()}
    report = dict(
        spec=args.spec,
        isa=target.isa,
        threads=target.threads,
        clock=clock,
        cpu=measure.cpu_name(),
        loadavg=os.getloadavg(),
        seconds=dict(enumerate=t_enum, build=t_build, time=t_time),
        settings=vars(args),
        candidates=[
            dict(
                cost=c.cost,
                path=[list(step) for step in c.path],
                tree=format_tree(c.impl),
                **{
                    m: dict(seconds=ts[i].seconds, spread=ts[i].spread, low=ts[i].low, halves=ts[i].halves)
                    for m, ts in modes.items()
                },
            )
            for i, c in enumerate(cands)
        ],
        summary=summaries,
        every_mode=_every_mode({m: [t.seconds for t in ts] for m, ts in modes.items()}),
    )
    out = Path(args.json or f"rank-{'_'.join(args.spec.split())}.json")
    out.write_text(json.dumps(report, indent=1))
    # The programs themselves, so that another cost model can price the same measured set (--rescore).
    out.with_suffix(".impls.pickle").write_bytes(pickle.dumps([c.impl for c in cands]))
    _print(report, modes, costs, cands)
    print(f"figures: {out}; benchmark: {work}", file=sys.stderr)
    return 0


def rescore(path: Path, target) -> int:
    """The figures of a previous run's programs and timings under the current model and ``target``'s profile."""
    from types import SimpleNamespace

    from morello_build.synth.cost import work

    report = json.loads(path.read_text())
    impls = [reprice(i, target) for i in pickle.loads(path.with_suffix(".impls.pickle").read_bytes())]
    order = sorted(range(len(impls)), key=lambda i: (round(impls[i].cost, 6), round(work(impls[i]), 6)))
    costs = [impls[i].cost for i in order]
    cands = report["candidates"]
    for m in report["summary"]:
        s = summarize(costs, [SimpleNamespace(**cands[i][m]) for i in order])
        print(
            f"{report['spec']} {m}: rho {s['rho']:.2f} (10th pct {s['rho_low']:.2f}{_repeat(s)}); "
            f"pick #{order[0]} runs "
            f"{s['pick_over_fastest']:.2f}x the fastest (10th pct {s['pick_over_fastest_low']:.2f}x); "
            f"cliffs {[order[i] for i in s['cliffs']] or 'none'}; cost range {costs[-1] / costs[0]:.2f}x; "
            f"measured at load {report['loadavg'][0]:.1f}"
        )
        print(f"{report['spec']} {m}: {_misranked_line(s['misranked'], order)}")
    seconds = {m: [cands[i][m]["seconds"] for i in order] for m in report["summary"]}
    if every := _every_mode(seconds):
        every["best_index"] = order[every["best_index"]]  # as the JSON numbers the candidates
        print(f"{report['spec']}: " + _every_mode_line(every, f"pick #{order[0]}"))
    return 0


def _every_mode(seconds_by_mode: dict) -> dict | None:
    """measure.one_program_for_all over the modes timed (None with one mode)."""
    return measure.one_program_for_all(seconds_by_mode) if len(seconds_by_mode) > 1 else None


def _every_mode_line(e: dict, pick: str) -> str:
    return (
        f"in every mode at once: {pick} runs within {e['pick']:.3f}x of each mode's fastest; the best any one "
        f"candidate reaches is {e['best']:.3f}x (#{e['best_index']})"
    )


def _misranked_line(worst: list[dict], order=None) -> str:
    """measure.misranked's candidates in words (``order``: rescore's, to number them as the JSON does)."""
    parts = [
        f"#{order[w['index']] if order else w['index']} (cost rank {w['cost_rank']:g}, time rank {w['time_rank']:g}: "
        f"{w['share']:.0%}; rho without it{' and those before' if n else ''} "
        + ("-" if w["rho_without_these"] is None else f"{w['rho_without_these']:.2f}")
        + ")"
        for n, w in enumerate(worst)
    ]
    return "most of the rank error: " + (", ".join(parts) or "none (the model ranks them as measured)")


def _repeat(s) -> str:
    return "" if s["repeatability"] is None else f"; measurement against itself {s['repeatability']:.2f}"


def reprice(node, target):
    """``node`` priced again bottom-up: kernels and loops count their features on ``target``, every node
    combines by the current rule (cost.recost)."""
    from dataclasses import replace

    from morello_build.ir.impl import Kernel, Loop, MoveImpl
    from morello_build.synth.actions import Tile
    from morello_build.synth.cost import recost
    from morello_build.target.kernels import BY_NAME

    kids = tuple(reprice(c, target) for c in node.children)
    if isinstance(node, Kernel):
        node = replace(node, features=BY_NAME[node.name].cost(node.spec.op, target))
    elif isinstance(node, Loop):
        regions = tuple(replace(r, body=b) for r, b in zip(node.regions, kids))
        own = Tile(node.tile, node.parallel).own_features(node.spec.op, target)
        node = replace(node, regions=regions, features=own)
    elif isinstance(node, MoveImpl):
        it = iter(kids)
        load = next(it) if node.load is not None else None
        node = replace(node, load=load, body=next(it), store=next(it) if node.store is not None else None)
    else:  # Accum, PairAccum, Seq: their children in the order of their fields
        names = [f for f in ("zero", "zero1", "zero2", "first", "second", "body", "store") if hasattr(node, f)]
        node = replace(node, **dict(zip(names, kids)))
    return recost(node, target)


def _print(report, modes, costs, cands) -> None:
    from rich.console import Console
    from rich.table import Table

    tab = Table(title=f"{report['spec']}  ({report['isa']}, {report['threads']} threads, {report['cpu']})")
    tab.add_column("#", justify="right")
    tab.add_column("cost/pick", justify="right")
    for m in modes:
        tab.add_column(f"{m} µs", justify="right")
        tab.add_column(f"{m}/best", justify="right")
        tab.add_column("spread", justify="right")
    tab.add_column("pinned decisions")
    best = {m: min(t.seconds for t in ts) for m, ts in modes.items()}
    for i, c in enumerate(cands):
        row = [str(i), f"{costs[i] / costs[0]:.2f}"]
        for m, ts in modes.items():
            row += [f"{ts[i].seconds * 1e6:.2f}", f"{ts[i].seconds / best[m]:.2f}", f"{ts[i].spread:.0%}"]
        row.append(" ".join(f"{text}@{main}" for text, main in c.path) or "(the pick)")
        tab.add_row(*row)
    con = Console(width=max(160, Console().width))
    con.print(tab)
    for m, s in report["summary"].items():
        con.print(
            f"{m}: rho {s['rho']:.2f} (10th percentiles: {s['rho_low']:.2f}; the measurement against itself: "
            f"{s['repeatability']:.2f}); the pick runs "
            f"{s['pick_over_fastest']:.2f}x the fastest (#{s['fastest']}; 10th percentiles: "
            f"{s['pick_over_fastest_low']:.2f}x); median spread {s['median_spread']:.0%}; cliffs (cost <= "
            f"{CLIFF:g}x the pick's, time > {CLIFF:g}x): {s['cliffs'] or 'none'} "
            f"(10th percentiles: {s['cliffs_low'] or 'none'})"
        )
        con.print(f"{m}: {_misranked_line(s['misranked'])}")
    if report["every_mode"]:
        con.print(_every_mode_line(report["every_mode"], "the pick"))
    con.print(f"clock {report['clock']}; load average {report['loadavg']}; seconds: {report['seconds']}")


if __name__ == "__main__":
    sys.exit(main())
