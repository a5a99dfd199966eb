"""Golden explain trees: the program the search picks for every benchmark spec (W1-W4), with the feature
counts and cost of every node, is pinned under tests/golden/<isa>/. A change to the cost model, the
actions or the search that changes a program or a cost shows up here as a reviewable diff.

After a deliberate change (benchmarked: see bench/README.md), rewrite them with
    MORELLO_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_trees.py
and commit the diff with the figures that justify it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import shared_search

from morello_build.ir.grammar import parse_spec
from morello_build.target import get_target
from morello_build.tools.cli import explain_tree

GOLDEN = Path(__file__).parent / "golden"

# The specs of bench/CMakeLists.txt (W1 flagship GEMV and its variants, W2 square GEMMs, W3 small ones, W4 GEMVs).
W1 = {
    "w1_f32act_col": "matmul 1x2048x16384 a=f32 b=bf16:col c=f32",
    "w1_bf16act_col": "matmul 1x2048x16384 a=bf16 b=bf16:col c=f32",
    "w1_f32act_row": "matmul 1x2048x16384 a=f32 b=bf16 c=f32",
    "w1_bf16act_row": "matmul 1x2048x16384 a=bf16 b=bf16 c=f32",
}
W2 = {f"w2_n{n}{s}": f"matmul {n}x{n}x{n}{s and ' serial'}" for n in (256, 512, 1024, 2048) for s in ("", "_serial")}
W3 = {f"w3_n{n}{s}": f"matmul {n}x{n}x{n}{s and ' serial'}" for n in (8, 16, 32, 64, 128) for s in ("", "_serial")}
W4 = {f"w4_n{n}": f"matmul 1x{n}x{n} b=f32:col" for n in (2048, 4096)}

# avx512_bf16 (the richest target: every kernel family) for all of them; avx2 for the flagship GEMVs, whose
# 8-lane programs differ most (its small GEMMs only change register tiles: kept out to keep the suite short).
CASES = [("avx512_bf16", name, spec) for name, spec in {**W1, **W2, **W3, **W4}.items()]
CASES += [("avx2", name, spec) for name, spec in W1.items()]


def explain_with_features(spec: str, isa: str) -> str:
    # One search per target (shared_search): neighbouring specs share sub-programs, as through a build's synthesis
    # DB (its in-memory memo: a DB replays every sub-program it answers, a third slower on a DB this module fills).
    target = get_target(isa, threads=2)
    user = parse_spec(spec)
    impl = shared_search.search_for(target).best(user.to_spec(target.limits()))
    assert impl is not None, spec
    return f"# {user} ({isa})\n" + explain_tree(impl, True, target.costs) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("isa,name,spec", CASES, ids=[f"{i}-{n}" for i, n, _ in CASES])
def test_explain_tree_is_golden(isa, name, spec):
    text = explain_with_features(spec, isa)
    path = GOLDEN / isa / f"{name}.tree"
    if os.environ.get("MORELLO_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden tree {path}: run with MORELLO_UPDATE_GOLDEN=1 once"
    assert text == path.read_text(), f"the program or costs for '{spec}' on {isa} changed: diff {path}"
