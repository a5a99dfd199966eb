"""Fixtures of the pytest-benchmark suites (tests/bench).

CI runs these once as plain tests (``--benchmark-disable``); to measure for real and keep JSON:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
        pytest tests/bench --benchmark-enable --benchmark-only --benchmark-json=bench-results.json
"""

import os
import sys

import pytest


def _clear_process_caches() -> None:
    """Empty every functools cache of the synthesizer's modules (not the Python API's), so a synthesis
    starts as cold as in a fresh process, minus the imports."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("morello_build") or name == "morello_build.tools.pyapi" or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if callable(getattr(obj, "cache_clear", None)) and getattr(obj, "__module__", None) == name:
                obj.cache_clear()


@pytest.fixture
def clear_process_caches():
    """The function emptying the synthesizer's in-process caches (use as a pedantic ``setup``)."""
    return _clear_process_caches


@pytest.fixture(scope="session")
def synth_db(tmp_path_factory) -> str:
    """A synthesis database shared by the bench session: the kernel builds fill it, the warm synthesis
    benchmarks read it (so each spec is searched from scratch only where that is what is measured). Under
    xdist it is the run's, shared by the workers (the bench files may run in different ones)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # each worker's basetemp is one level below the run's (tests/conftest.py)
    path = base / "bench-synth-db"
    path.mkdir(exist_ok=True)
    return str(path / "synth.db")


def _openblas_threads_api():
    """(get, set) of the thread count of numpy's bundled OpenBLAS, through ctypes; None if not found."""
    import ctypes
    import glob
    import os

    try:
        import numpy
    except ImportError:
        return None
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs", "*openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for suffix in ("64_", "_64_", ""):
            for prefix in ("scipy_openblas", "openblas"):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                set_ = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if get is not None and set_ is not None:
                    set_.argtypes = [ctypes.c_int]
                    return get, set_
    return None


@pytest.fixture
def numpy_blas_threads():
    """``use(n)`` sets numpy's OpenBLAS thread count for this test (restored after); None if unavailable."""
    api = _openblas_threads_api()
    if api is None:
        yield None
        return
    get, set_ = api
    old = get()
    yield lambda n: set_(n)
    set_(old)
