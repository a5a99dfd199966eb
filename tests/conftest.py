"""Shared pytest fixtures. Append new fixtures; keep each one small and documented."""
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pyapi_cache_dir(tmp_path_factory) -> Path:
    """Build cache of morello_build.pyapi for this test session: $MORELLO_CACHE_DIR when set (CI may keep it
    between runs), else a fresh temp dir. Every test kernel is compiled once and shared through it."""
    old = os.environ.get("MORELLO_CACHE_DIR")
    path = Path(old) if old else tmp_path_factory.mktemp("pyapi-cache")
    os.environ["MORELLO_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("MORELLO_CACHE_DIR", None)
