"""bench/report.py: the W1 goal's roofline is the largest reference, calibrate's DRAM figure among them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[1] / "bench" / "report.py"


def _report():
    sys.path.insert(0, str(REPORT.parent))  # as when run as a script: its sibling modules (report_w6)
    spec = importlib.util.spec_from_file_location("bench_report", REPORT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench(tmp_path) -> Path:
    """One W1 f32-activation result at 10 GB/s (1 thread) beside a bw_ref sweep of 11 GB/s."""
    runs = [("W1/f32act.col/morello/t1", 10e9), ("W1/f32act.col/bw_ref/t1", 11e9)]
    doc = {"context": {}, "benchmarks": [{"name": n, "real_time": 1e6, "time_unit": "ns", "bytes": b} for n, b in runs]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    return path


def _profile(tmp_path, ns_per_line: float) -> Path:
    m = {"dram_line": {"median_ns": ns_per_line}, "dram_line_all": {"median_ns": ns_per_line}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"host": {"cpus": 2}, "measurements": m}))
    return path


def test_calibrated_dram_is_the_roofline_when_it_is_the_largest(tmp_path):
    report = _report()
    bench = _bench(tmp_path)
    assert report.main([str(bench), "--calibration", str(_profile(tmp_path, 4.0))]) == 0  # 16 GB/s
    text = (tmp_path / "results.md").read_text()
    assert "0.625 of the largest reference (10.0 of 16.0 GB/s" in text and "calibrate 16.0" in text
    assert report.main([str(bench)]) == 0  # without one: the sweep's 11 GB/s
    assert "0.909 of the largest reference" in (tmp_path / "results.md").read_text()


def test_a_file_that_is_not_a_calibrate_profile_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"host": {}}')
    with pytest.raises(SystemExit, match="is not a calibrate profile with DRAM measurements"):
        _report().main([str(_bench(tmp_path)), "--calibration", str(bad)])
