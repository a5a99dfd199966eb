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


# The longest test (the cpp_tests matrix: 40% of the suite's time on one worker) starts first.
_FIRST = "test_codegen_cpp.py"


def pytest_collection_modifyitems(config, items):
    """Under xdist, the longest test first, then the slow ones, then the rest (each in the files' order), and
    xdist hands them out in that order (--no-loadscope-reorder in pyproject): the workers start on the long
    tests and finish on short ones, together. A serial run keeps the files' order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: (item.path.name != _FIRST, item.get_closest_marker("slow") is None))


def pytest_runtest_logfinish(nodeid, location):
    """After each test, its garbage collected and what is left frozen (the shared searches' memos, session
    fixtures): the collector's full collections traversed those again and again, a tenth of a worker's time
    (tests/test_search.py, test_quant_int_cols8.py and test_alias.py, Zen 3: 24 s of 222)."""
    gc.collect()
    keep_out_of_collections()
