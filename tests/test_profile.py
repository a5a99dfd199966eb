"""Cost profiles (target/profiles.py): names, profile files and their errors, the calibration fit (tools/fit.py,
tools/calibrate.py with injected measurements: no benchmark runs here), and the plumbing into targets, the DB,
headers and the CLI. The suite pins the built-in profile (conftest.py), so nothing here depends on the host."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from morello_build.target import TARGETS, get_target, profiles, runnable_isas
from morello_build.target.costs import CostTable
from morello_build.target.host import Cache, HostFacts
from morello_build.tools import calibrate, cli, fit

HOST = HostFacts("AuthenticAMD", 25, 1, "AMD EPYC 7763", 2, Cache(1, 32 << 10, 8), Cache(2, 512 << 10, 8), None)
TRUE = (
    dict(vec_fma=0.5, fma_latency=4.0, vec_load=0.6, vec_store=1.1, l2_line=0.8, gl_line=20.0, gl_interleaved=6.0)
    | dict(vec_op=0.3, vec_shuffle=1.0, vec_imul=0.5)
    | dict(gl_two_streams=3.0, gl_short_run=150.0, parallel_setup=9000.0, copy_gather_elem=2.5)
)


def synthetic_cycles(costs: dict, noise: float = 0.0, dot_line: float = 30.0) -> dict[str, float]:
    """Cycles per unit each benchmark would measure if the model were exact (times 1 + noise, alternating);
    the dot loop over one column takes ``dot_line`` a line, over several streams that plus their adjustment."""
    out = {}
    for i, (name, (_, row)) in enumerate(fit.ROWS.items()):
        out[name] = sum(c * costs[f] for f, c in row.items()) * (1 + (noise if i % 2 else -noise))
    out[fit.STREAM_REFERENCE] = dot_line
    return out | {name: dot_line + costs[feature] for name, (_, feature) in fit.STREAM_ROWS.items()}


def test_the_suite_pins_the_builtin_profile():
    assert os.environ[profiles.ENV] == "builtin"
    assert get_target("avx2", threads=2) is TARGETS["avx2"]


def test_names_agree_with_cmake():
    cmake = (Path(profiles.__file__).parent.parent / "cmake" / "MorelloBuildFunctions.cmake").read_text()
    listed = re.search(r"set\(_MORELLO_PROFILE_NAMES ([^)]*)\)", cmake).group(1).split()
    assert tuple(listed) == profiles.names()


def test_named_profiles():
    zen4, zen3 = get_target("avx2", profile="zen4"), get_target("avx2", profile="zen3")
    assert zen4.costs == CostTable() and zen4.builtin_costs and zen4.profile == "zen4"
    assert (zen3.l1_bytes, zen3.l1_ways, zen3.l2_bytes, zen3.profile) == (32 << 10, 8, 512 << 10, "zen3")
    assert not zen3.builtin_costs and zen3.cost_fingerprint != zen4.cost_fingerprint
    assert get_target("avx512", profile="zen3").costs.vec_fma == 1.0  # zmm FMAs on 256-bit pipes
    with pytest.raises(profiles.ProfileError, match="'zen9' is neither a file nor one of: builtin, host, zen3"):
        get_target("avx2", profile="zen9")


def test_nnls_recovers_known_constants():
    result = fit.fit(synthetic_cycles(TRUE))
    assert result.costs == pytest.approx(TRUE, rel=1e-3)
    assert max(abs(r) for r in result.residuals.values()) < 1e-3
    noisy = fit.fit(synthetic_cycles(TRUE, noise=0.02))  # 2% noise: a surcharge (a difference) moves most
    assert noisy.costs == pytest.approx(TRUE, rel=0.2)


def test_stream_adjustments_are_measured_differences_and_may_be_negative():
    """Each stream adjustment is its dot loop's cycles a line less the one-column loop's: negative where the
    streams read faster (a Zen 3: two columns of separate matrices 4.3 against 5.2 ns a line), never below
    -gl_line; the NNLS constants stay non-negative; no reference, no adjustments."""
    faster = dict(TRUE, gl_two_streams=-4.0, gl_interleaved=-1.5)
    costs = fit.fit(synthetic_cycles(faster)).costs
    assert (costs["gl_two_streams"], costs["gl_interleaved"]) == (-4.0, -1.5)
    assert min(v for k, v in costs.items() if k not in profiles.SIGNED) >= 0
    cycles = synthetic_cycles(faster) | {"two_streams_line": 1.0}  # 29 cycles a line less: more than gl_line
    assert fit.fit(cycles).costs["gl_two_streams"] == pytest.approx(-TRUE["gl_line"], rel=1e-3)
    no_reference = {k: v for k, v in synthetic_cycles(faster).items() if k != fit.STREAM_REFERENCE}
    assert not set(profiles.SIGNED) & set(fit.fit(no_reference).costs)


def test_all_threads_reading_dram_measure_the_machines_line_not_gl_line():
    """dram_line_all (every thread reads its part of a DRAM buffer at once: ns a line of one thread) over the
    threads that read is gl_line_shared, the machine's line time; it is no gl_line row (a 16-vCPU Emerald Rapids
    VM: 14.9 cycles a line alone, 30.7 each of 16 reading, which pulled the fitted gl_line to 16.7). On one
    thread it says nothing of the machine: no gl_line_shared."""
    cycles = synthetic_cycles(TRUE) | {"dram_line_all": 2 * TRUE["gl_line"]}
    on16 = fit.fit(cycles, threads=16)
    assert on16.costs["gl_line_shared"] == pytest.approx(2 * TRUE["gl_line"] / 16)
    assert on16.costs["gl_line"] == pytest.approx(TRUE["gl_line"], rel=1e-3) and "dram_line_all" not in on16.residuals
    assert "gl_line_shared" not in fit.fit(cycles, threads=1).costs


def test_the_slowest_threads_lateness_is_measured_in_tasks():
    """tail_percent: a parallel call of one FMA task per thread, less the task alone and a parallel round, over the
    task (a 16-vCPU Emerald Rapids VM ran one of 16 such threads at half speed); never negative; none without the
    three measurements (one CPU: no parallel call)."""
    cycles = synthetic_cycles(TRUE) | {"task_alone": 1000.0, "tasks_all": 1500.0, "parallel_round": 100.0}
    assert fit.fit(cycles, threads=16).costs["tail_percent"] == 40
    assert fit.fit(cycles, threads=16).costs["tail_threads"] == 16
    assert fit.fit(cycles | {"tasks_all": 900.0}).costs["tail_percent"] == 0
    assert fit.fit(cycles | {"tasks_all": 1190.0}).costs["tail_percent"] == 0  # 9%: within the noise
    assert fit.fit(cycles | {"tasks_all": 1200.0}).costs["tail_percent"] == 10
    assert "tail_percent" not in fit.fit({k: v for k, v in cycles.items() if k != "tasks_all"}).costs
    table = profiles.parse({"morello_profile": 1, "base": "zen3", "costs": {"tail_percent": 0}}).table(32)
    assert table.tail_percent == 0  # 0 is a value (threads alike), not a missing one


def test_a_negative_stream_adjustment_keeps_the_bound_and_the_refunds_sound():
    """A profile may price two streams below one: a line read again (a loop's L1 or L2 refund) still costs at
    least l1_line / l2_line (the refunds of lines that may have been read as streams, weights stored N x K, are
    taken from the least a main-memory line costs; the others, charged gl_line, from gl_line), the search's
    bound prices every line at that least, and pruning keeps the answer."""
    from dataclasses import replace

    from morello_build.ir.grammar import parse_spec
    from morello_build.ir.impl import format_tree
    from morello_build.synth.search import Search

    data = {"morello_profile": 1, "base": "zen3", "costs": {"gl_two_streams": -5.0, "gl_interleaved": -2.0}}
    table = profiles.parse(data).table(32)
    assert table.least_gl_line == table.gl_line - 5.0
    assert table.l1_reuse_stream_line + table.least_gl_line == pytest.approx(table.l1_line)
    assert table.l2_reuse_stream_line + table.least_gl_line == pytest.approx(table.l2_line)
    assert table.l1_reuse_line + table.gl_line == pytest.approx(table.l1_line)
    assert table.l2_reuse_line + table.gl_line == pytest.approx(table.l2_line)
    target = replace(get_target("avx2", threads=2, profile="zen3"), costs=table)
    spec = parse_spec("gated 1x640x2560 b=bf16:col act=gelu").to_spec(target.limits())  # the pair's 2 streams
    pruned, unpruned = Search(target).best(spec), Search(target, prune=False).best(spec)
    assert pruned.cost == pytest.approx(unpruned.cost, rel=1e-9, abs=1e-9)
    assert format_tree(pruned) == format_tree(unpruned)


def samples_from(cycles: dict[str, float], clock_ns: float = 0.25) -> dict[str, list[float]]:
    out = {name: [c * clock_ns * f for f in (0.99, 1.0, 1.01, 1.0, 1.0)] for name, c in cycles.items()}
    out["clock"] = [clock_ns] * 5
    out["fma_tp_512"] = [2 * TRUE["vec_fma"] * clock_ns] * 5
    out["l1_load_512"] = [2 * TRUE["vec_load"] * clock_ns] * 5  # a core that splits 512-bit loads in two
    out["l1_store_512"] = [2 * TRUE["vec_store"] * clock_ns] * 5
    return out


def test_profile_file_round_trip(tmp_path):
    measurements = calibrate.summarize(samples_from(synthetic_cycles(TRUE)), threads=2, max_spread=0.25)
    data = calibrate.profile_data(measurements, HOST, "zen3", seconds=1.0)
    assert data["host"] == dict(vendor="AuthenticAMD", family=25, model=1, model_name="AMD EPYC 7763", cpus=2)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    t = get_target("avx2", profile=str(path))
    assert t.costs.gl_line == pytest.approx(20.0, rel=1e-3) and t.costs.loop_iter == CostTable().loop_iter
    assert (t.l1_bytes, t.l1_ways, t.l2_bytes) == (32 << 10, 8, 512 << 10)
    wide = get_target("avx512", profile=str(path)).costs  # its "widths": 512-bit FMAs, loads and stores
    expected = (1.0, 2 * TRUE["vec_load"], 2 * TRUE["vec_store"])
    assert (wide.vec_fma, wide.vec_load, wide.vec_store) == pytest.approx(expected)
    assert t.costs.vec_load == pytest.approx(TRUE["vec_load"], rel=1e-3)
    assert t.profile == "calibrated: AMD EPYC 7763"


def test_calibration_chooses_the_prefetch_distance(tmp_path):
    """The fastest prefetch distance of the dot loop over DRAM, unless that loop is within the noise (3%, or the
    rows' spread) of the base table's distance (then that one) or of not prefetching (then 0)."""
    flat = {m: 10.0 for m in fit.PREFETCH_ROWS}
    assert fit.prefetch_bytes(flat | {"prefetch_0": 12.0, "prefetch_1024": 9.5}) == 1024
    assert fit.prefetch_bytes(flat | {"prefetch_512": 9.9}) == 0 and fit.prefetch_bytes({}) is None
    assert fit.prefetch_bytes(flat | {"prefetch_0": 12.0, "prefetch_1024": 9.5}, base=512) == 1024
    assert fit.prefetch_bytes(flat | {"prefetch_0": 12.0, "prefetch_1024": 9.8}, base=512) == 512
    # Zen 3 VM, 2026-11-29: 2048 fastest by 3.8% over the base's 512, whose own spread was 6.2%: a tie.
    zen3 = {
        "prefetch_0": 16.36,
        "prefetch_256": 16.10,
        "prefetch_512": 16.48,
        "prefetch_1024": 16.01,
        "prefetch_2048": 15.88,
    }
    spreads = {"prefetch_0": 0.038, "prefetch_256": 0.029, "prefetch_512": 0.062, "prefetch_1024": 0.043}
    assert fit.prefetch_bytes(zen3, spreads | {"prefetch_2048": 0.032}, base=512) == 512
    quiet = {m: 0.005 for m in fit.PREFETCH_ROWS}
    assert fit.prefetch_bytes(zen3 | {"prefetch_2048": 15.5}, quiet, base=512) == 2048  # apart from 512 and from 0
    assert fit.prefetch_bytes(zen3, spreads, base=None) == 0  # 2048 within prefetch_0's 3.8%
    samples = samples_from(synthetic_cycles(TRUE) | flat | {"prefetch_0": 12.0, "prefetch_256": 11.0})
    data = calibrate.profile_data(calibrate.summarize(samples, threads=2, max_spread=0.25), HOST, "zen3", 1.0)
    assert data["costs"]["prefetch_bytes"] == 512  # the first of the equally fast distances
    assert data["measurements"]["prefetch_0"]["unit"] == fit.PREFETCH_UNIT
    (tmp_path / "p.json").write_text(json.dumps(data))
    assert get_target("avx2", profile=str(tmp_path / "p.json")).costs.prefetch_bytes == 512


def test_calibration_chooses_the_stream_lead():
    """The fastest lead of the i8 dot loop prefetching into L2, unless the base table's is within the noise of it;
    a profile file carries it into the target (quant_int_prefetch.kernels_ahead)."""
    # Emerald Rapids VM, 2026-11-30 (ns a line, spreads): 2 KiB short of the lead, 4 and 8 KiB alike
    measured = {"stream_lead_2048": 6.110, "stream_lead_4096": 4.974, "stream_lead_8192": 4.772}
    spreads = {"stream_lead_2048": 0.056, "stream_lead_4096": 0.032, "stream_lead_8192": 0.061}
    assert fit.stream_lead_bytes(measured, spreads, base=4096) == 4096  # within 8 KiB's spread of the fastest
    assert fit.stream_lead_bytes(measured, spreads, base=2048) == 8192  # a base told apart from the fastest
    assert fit.stream_lead_bytes(measured | {"stream_lead_8192": 4.4}, spreads, base=4096) == 8192
    assert fit.stream_lead_bytes({"stream_lead_4096": 5.0}) is None  # not every lead measured
    samples = samples_from(synthetic_cycles(TRUE) | {m: c / 0.25 for m, c in measured.items()})
    data = calibrate.profile_data(calibrate.summarize(samples, threads=2, max_spread=0.25), HOST, "zen3", 1.0)
    assert data["costs"]["stream_lead_bytes"] == 8192  # 4% faster than 4 KiB, measured within 1%: told apart
    assert data["measurements"]["stream_lead_2048"]["unit"] == fit.STREAM_LEAD_UNIT
    data["costs"]["stream_lead_bytes"] = 16384
    profile = profiles.parse(data)
    assert profile.table(32).stream_lead_bytes == 16384 and profile.table(64).stream_lead_bytes == 16384


def test_noisy_measurements_refuse_the_fit():
    samples = samples_from(synthetic_cycles(TRUE))
    samples["dram_line"] = [10.0, 20.0, 30.0, 40.0, 50.0]
    # 5 samples whose interquartile range is 67% of their median: the median's 95% interval is 109% of it
    refused = r"too noisy to fit \(dram_line: median uncertain by 109% > 25%, spread 67%, 1 over\)"
    with pytest.raises(cli.UserError, match=refused):
        calibrate.summarize(samples, threads=2, max_spread=0.25)


def test_a_clock_the_core_folds_refuses_the_fit():
    """Golden Cove folds chains of immediate adds at rename: a clock 3.4x too fast made every cycle figure 3.4x
    too large. The FMA latency in clock cycles gives it away."""
    samples = samples_from(synthetic_cycles(TRUE))
    samples["clock"] = [0.25 / 3.4] * 5
    with pytest.raises(cli.UserError, match=r"clock benchmark is off \(a dependent FMA takes 13.60 of its cycles"):
        calibrate.summarize(samples, threads=2, max_spread=0.25)


BAD = [
    ([], "a profile is a JSON object"),
    ({"morello_profile": 1, "colour": 1}, "unknown field 'colour'"),
    ({"morello_profile": 2}, "'morello_profile' must be 1"),
    ({"morello_profile": 1, "costs": {"gl_lines": 1}}, "unknown cost 'gl_lines'"),
    ({"morello_profile": 1, "costs": {"gl_line": -1}}, "cost 'gl_line' must be a non-negative number"),
    ({"morello_profile": 1, "costs": {"gl_line": "8"}}, "cost 'gl_line' must be a non-negative number"),
    ({"morello_profile": 1, "base": "zen9"}, "unknown base 'zen9'"),
    ({"morello_profile": 1, "name": "x\n#error"}, "'name' must be one printable line"),  # it goes in a comment
    ({"morello_profile": 1, "caches": {"l1d_bytes": 32768}}, "'caches' must have exactly"),
    ({"morello_profile": 1, "widths": {"16": {}}}, "'widths' must be an object with keys among 32, 64"),
    ({"morello_profile": 1, "widths": {"64": {"vec_fmas": 1}}}, "widths.64: unknown cost 'vec_fmas'"),
    ({"morello_profile": 1, "costs": {"page_bytes": 0}}, "'page_bytes' must be a positive integer"),
    ({"morello_profile": 1, "costs": {"prefetch_bytes": 1.5}}, "'prefetch_bytes' must be a non-negative integer"),
    ({"morello_profile": 1, "costs": {"gl_two_streams": "x"}}, "cost 'gl_two_streams' must be a finite number"),
    ({"morello_profile": 1, "costs": {"gl_interleaved": -9}}, "cost 'gl_interleaved' (-9) is below -gl_line (8)"),
]


def test_a_profile_may_turn_prefetching_and_the_burst_limit_off():
    assert profiles.parse({"morello_profile": 1, "costs": {"prefetch_bytes": 0}}).table(32).prefetch_bytes == 0
    off = profiles.parse({"morello_profile": 1, "costs": {"stream_burst_bytes": 0}}).table(32)
    assert off.stream_burst_bytes == 0


@pytest.mark.parametrize("data, message", BAD)
def test_malformed_profiles_say_what_is_wrong(data, message):
    with pytest.raises(profiles.ProfileError, match=re.escape(message)):
        profiles.parse(data, "p.json")


def test_cli_calibrate_from_measurements_and_profile_errors(tmp_path, capsys):
    samples = tmp_path / "samples.json"
    samples.write_text(json.dumps(samples_from(synthetic_cycles(TRUE))))
    out = tmp_path / "profile.json"
    assert cli.main(["calibrate", "--measurements", str(samples), "-o", str(out)]) == 0
    assert "fitted: " in capsys.readouterr().err and json.loads(out.read_text())["morello_profile"] == 1
    spec = ["matmul 2x2x2 serial", "--isa", "scalar", "--db", "none"]
    assert cli.main(["explain", *spec, "--profile", str(out)]) == 0
    assert "costs calibrated: " in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{nope")
    assert cli.main(["explain", *spec, "--profile", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morello-build: error: profile ") and "not JSON" in err and "\n" not in err


def test_header_names_the_profile(capsys):
    assert cli.main(["synth", "matmul 2x2x2 serial", "--isa", "scalar", "--db", "none", "--profile", "zen3"]) == 0
    fp = get_target("scalar", profile="zen3").cost_fingerprint
    assert f"// Costs:   profile zen3 (cost table {fp})\n" in capsys.readouterr().out


def test_db_keys_results_by_profile(tmp_path):
    from morello_build.db.sqlite import code_fingerprint, connect, namespace_id, ns_fingerprint

    builtin, zen3 = TARGETS["avx2"], get_target("avx2", threads=2, profile="zen3")
    assert ns_fingerprint(builtin) == code_fingerprint()  # built-in results keep their namespace
    assert ns_fingerprint(get_target("avx2", threads=2, profile="zen5")) == code_fingerprint()
    conn = connect(tmp_path / "db.sqlite", create=True)
    assert namespace_id(conn, builtin) != namespace_id(conn, zen3)


def accumulated(impl, feature: str) -> float:
    return impl.features.get(feature) + sum(accumulated(c, feature) for c in impl.children)


def test_a_profile_changes_the_choice_where_it_should():
    """An FMA latency of 40 cycles makes the latency-bound vector outer product of a GEMV row lose to
    scalar multiply-adds; the built-in table keeps the vector kernel."""
    from morello_build.tools.api import synthesize_program

    slow = profiles.parse({"morello_profile": 1, "costs": {"fma_latency": 40.0}})
    spec = "matmul 1x8x16 serial"
    _, _, builtin, _ = synthesize_program(spec, isa="avx2", threads=1)
    _, _, other, _ = synthesize_program(spec, isa="avx2", threads=1, profile=slow)
    assert accumulated(builtin, "fma_latency") > 0 and accumulated(other, "fma_latency") == 0
    assert accumulated(other, "scalar_op") > accumulated(builtin, "scalar_op")


def test_vendor_records_the_profile(tmp_path):
    out = tmp_path / "vendored"
    args = ["vendor", "matmul 2x2x2 serial", "--out", str(out), "--isa", "scalar", "--db", "none"]
    assert cli.main([*args, "--profile", "zen3"]) == 0
    (entry,) = json.loads((out / "morello-manifest.json").read_text())["kernels"]
    assert entry["profile"] == "zen3" and "// Costs:   profile zen3 " in (out / entry["header"]).read_text()
    assert cli.main(["vendor", "--out", str(out), "--check", "--db", "none"]) == 0  # the manifest's profile


def test_calibrate_measures_again_while_a_measurement_is_too_noisy(monkeypatch, tmp_path, capsys):
    """A run spoiled by a busy moment (two of five repetitions of a measurement twice as slow) is followed by
    another of that measurement (and the clock) only, and the pooled samples outvote it; a measurement whose median
    is still too uncertain when the time budget is spent refuses the fit, saying how many runs were pooled. (The
    benchmarks are not run: their runs are injected.)"""
    quiet = samples_from(synthetic_cycles(TRUE))
    burst = dict(quiet, dram_line=[v * (2 if i >= 3 else 1) for i, v in enumerate(quiet["dram_line"])])
    spoiled = dict(quiet, dram_line=[v * (1 + 3 * i) for i, v in enumerate(quiet["dram_line"])])
    asked = []

    def injected(*outputs):
        def run_benchmarks(reps, quick, threads, l2, l3, avx512, again, deadline=None):
            runs = iter(outputs)

            def run(names):
                time.sleep(0.05)
                asked.append(names)
                output = {n: v for n, v in next(runs).items() if names is None or n in names}
                return {name: [values[0], *values] for name, values in output.items()}  # a warm-up first

            return calibrate.pooled(run, again)

        return run_benchmarks

    monkeypatch.setattr(calibrate, "run_benchmarks", injected(burst, quiet))
    assert cli.main(["calibrate", "-o", str(tmp_path / "p.json")]) == 0
    assert "dram_line median uncertain" in capsys.readouterr().err
    assert asked == [None, ["clock", "dram_line"]]
    measurements = json.loads((tmp_path / "p.json").read_text())["measurements"]
    assert measurements["dram_line"]["reps"] == measurements["clock"]["reps"] == 10
    assert measurements["fma_tp_256"]["reps"] == 5
    monkeypatch.setattr(calibrate, "MEASURE_BUDGET_S", 1.0)  # about 20 runs of 0.05 s
    monkeypatch.setattr(calibrate, "run_benchmarks", injected(*[spoiled] * 100))
    assert cli.main(["calibrate", "-o", str(tmp_path / "q.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    refused = re.search(r"too noisy to fit in (\d+) runs \(dram_line: median uncertain by \d+% > 25%", err)
    assert refused and int(refused[1]) >= 2, err
    assert not (tmp_path / "q.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not calibrate.shutil.which("c++"), reason="needs a C++ compiler")
def test_calibrate_quick_runs_the_benchmarks(tmp_path, capsys):
    """The real micro-benchmarks, compiled and run in the tiny mode (a few seconds; the measured profile is
    the manual bench step, README)."""
    out = tmp_path / "quick.json"
    assert cli.main(["calibrate", "--quick", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {"clock", "fma_tp_256", "fma_lat_256", "dram_line", "short_run", "prefetch_0"} <= set(data["measurements"])
    assert set(fit.ROWS) <= set(data["measurements"])
    for feature in ("vec_op", "vec_shuffle", "vec_imul"):  # 1 to 4 pipes on x86 cores (Zen 3: 0.32, 0.5, 0.5)
        assert 0.2 <= data["costs"][feature] <= 1.5, (feature, data["costs"][feature])
    if "avx512" in runnable_isas():
        assert {"fma_tp_512", "l1_load_512", "l1_store_512"} <= set(data["measurements"])
        assert set(data["widths"]["64"]) == {"vec_fma", "fma_latency", "vec_load", "vec_store"}
    if os.cpu_count() and os.cpu_count() > 1:  # the headers' own pool, called back to back
        assert data["measurements"]["parallel_round"]["median_ns"] > 0
    assert data["costs"]["prefetch_bytes"] in fit.PREFETCH_ROWS.values()
    assert data["costs"]["stream_lead_bytes"] in fit.STREAM_LEAD_ROWS.values()
    lo, hi = calibrate.FMA_LATENCY_CYCLES
    assert lo <= data["measurements"]["fma_lat_256"]["cycles"] <= hi  # the clock is a cycle
    assert profiles.load_file(out).name.startswith("calibrated: ")
    assert "spread" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not calibrate.shutil.which("c++"), reason="needs a C++ compiler")
def test_calibrate_runs_again_only_the_measurements_it_names():
    """The compiled benchmarks (tiny mode) measure again only what ``again`` names, up to 4 × reps times."""
    seen = []

    def again(samples, seconds):
        seen.append({n: len(v) for n, v in samples.items()})
        return ["clock", "l1_load"] if len(seen) == 1 else []

    samples = calibrate.run_benchmarks(2, True, 1, 1 << 20, 8 << 20, False, again, time.monotonic() + 60)
    first = seen[0]
    assert first["clock"] == first["l1_load"] == first["dram_line"] == 2  # 3 repetitions, the warm-up dropped
    assert len(samples["clock"]) == len(samples["l1_load"]) == 2 + 8
    assert {n: len(v) for n, v in samples.items() if n not in ("clock", "l1_load")} == {
        n: k for n, k in first.items() if n not in ("clock", "l1_load")
    }


def test_python_api_passes_the_profile(pyapi_cache_dir):
    """compile()'s header (no C++ build here): profile= reaches the synthesizer and keys the header cache."""
    from morello_build.tools import pyapi

    zen3 = pyapi._synthesize("matmul 2x2x2 serial", "scalar", 1, None, "kernel", "morello", "zen3")
    builtin = pyapi._synthesize("matmul 2x2x2 serial", "scalar", 1, None, "kernel", "morello", None)
    assert "// Costs:   profile zen3 " in zen3 and "// Costs:   profile builtin " in builtin
