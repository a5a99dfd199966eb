"""Shared pytest fixtures. Append new fixtures; keep each one small and documented.

Parallel runs (pytest-xdist, ``-n 2``: what scripts/test.sh does): each worker is its own process with its own
environment and its own ``tmp_path`` root; the build cache and the synthesis DB below are shared by the
workers of one run (both are safe for concurrent processes: files renamed into place, SQLite in WAL mode).
"""

import gc
import os
from pathlib import Path

import pytest

from morello_build.synth.search import keep_out_of_collections

# Programs in the tests (and tests/golden/) must not depend on the host's CPU: every test, and every generator
# a test starts (CMake builds, subprocesses inherit the environment), prices programs with the built-in cost
# table unless it names another profile (target/profiles.py).
os.environ["MORELLO_PROFILE"] = "builtin"


def _run_dir(tmp_path_factory, name: str) -> Path:
    """A directory of this test run, shared by its xdist workers (each worker's basetemp is one level below the
    run's), or of this session when not run by xdist."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / name
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def pyapi_cache_dir(tmp_path_factory) -> Path:
    """Build cache of morello_build.tools.pyapi for this test session: $MORELLO_CACHE_DIR when set (CI may keep it
    between runs), else a fresh temp dir. Every test kernel is compiled once and shared through it."""
    old = os.environ.get("MORELLO_CACHE_DIR")
    path = Path(old) if old else _run_dir(tmp_path_factory, "pyapi-cache")
    os.environ["MORELLO_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("MORELLO_CACHE_DIR", None)


@pytest.fixture(scope="session", autouse=True)
def hermetic_synthesis_db(tmp_path_factory):
    """The CLI uses a synthesis DB by default ($MORELLO_DB, else ~/.cache): tests share one in a temp dir
    (faster than none, and they never touch the user's cache). Tests that need their own set it."""
    old = os.environ.get("MORELLO_DB")
    os.environ["MORELLO_DB"] = str(_run_dir(tmp_path_factory, "synth-db") / "synth.db")
    yield
    if old is None:
        os.environ.pop("MORELLO_DB", None)
    else:
        os.environ["MORELLO_DB"] = old


# Files in the order xdist hands them out (--dist loadfile: a file is a unit): the longest first, so that the two
# workers finish together (each takes the next file when it runs short). Their time in a full run on 2 cores (Intel
# model 207, 2026-11-30): test_codegen_cpp 329 s (the cpp_tests matrix), test_search 176, test_cmake 130,
# test_codegen 115, test_quant_int_zmm 104, test_golden_trees 86, test_quant_int 74, test_alias 70. In the files'
# order test_search came last and one worker ran 108 s after the other had finished. Only the order: a file missing
# here runs after these, slow-marked ones first.
_LONGEST_FIRST = [
    "test_codegen_cpp.py",
    "test_search.py",
    "test_cmake.py",
    "test_codegen.py",
    "test_quant_int_zmm.py",
    "test_golden_trees.py",
    "test_quant_int.py",
    "test_alias.py",
    "test_bench_kernels.py",
    "test_epilogue.py",
    "test_overwrite.py",
    "test_db.py",
    "test_quant_int_cols8.py",
    "test_pyapi.py",
    "test_l2.py",
    "test_quant.py",
]


def _rank(item) -> tuple[int, bool]:
    name = item.path.name
    rank = _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)
    return rank, item.get_closest_marker("slow") is None


def pytest_collection_modifyitems(config, items):
    """Under xdist, the files by _LONGEST_FIRST, then those with a slow test, then the rest (each in the files' order, a
    file's tests in theirs), and xdist hands them out in that order (--no-loadscope-reorder in pyproject). A
    serial run keeps the files' order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        ranks: dict = {}
        for item in items:  # a file's rank: its least (slow if any of its tests is)
            rank = _rank(item)
            ranks[item.path] = min(ranks.get(item.path, rank), rank)
        items.sort(key=lambda item: ranks[item.path])


def pytest_runtest_logfinish(nodeid, location):
    """After each test, its garbage collected and what is left frozen (the shared searches' memos, session
    fixtures): the collector's full collections traversed those again and again, a tenth of a worker's time
    (tests/test_search.py, test_quant_int_cols8.py and test_alias.py, Zen 3: 24 s of 222)."""
    gc.collect()
    keep_out_of_collections()
