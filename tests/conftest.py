"""Shared pytest fixtures. Append new fixtures; keep each one small and documented."""
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pyapi_cache_dir(tmp_path_factory) -> Path:
    """Build cache of morello_build.tools.pyapi for this test session: $MORELLO_CACHE_DIR when set (CI may keep it
    between runs), else a fresh temp dir. Every test kernel is compiled once and shared through it."""
    old = os.environ.get("MORELLO_CACHE_DIR")
    path = Path(old) if old else tmp_path_factory.mktemp("pyapi-cache")
    os.environ["MORELLO_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("MORELLO_CACHE_DIR", None)


@pytest.fixture(scope="session", autouse=True)
def hermetic_synthesis_db(tmp_path_factory):
    """The CLI uses a synthesis DB by default ($MORELLO_DB, else ~/.cache): tests share one in a temp dir
    (faster than none, and they never touch the user's cache). Tests that need their own set it."""
    old = os.environ.get("MORELLO_DB")
    os.environ["MORELLO_DB"] = str(tmp_path_factory.mktemp("synth-db") / "synth.db")
    yield
    if old is None:
        os.environ.pop("MORELLO_DB", None)
    else:
        os.environ["MORELLO_DB"] = old
