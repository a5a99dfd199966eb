"""Generated kernels against numpy.matmul on the same arrays.

numpy has no fast bf16 matmul, so for bf16 operands numpy gets float32 copies made outside the timing
(twice the bytes to read for the weights: the realistic alternative a numpy user has). A ``col`` operand is
handed to numpy as the transposed view of the very array the kernel gets (BLAS reads it transposed). Both
write into a preallocated output.

Threads: ``morello`` is the kernel with its default parallelism (a std::thread pool, MORELLO_NUM_THREADS),
``numpy`` is numpy's BLAS with its default threads; the ``-1t`` variants run both on one thread
(``parallel=False``; OpenBLAS set to 1 thread through ctypes). On a loaded 2-core machine, multi-threaded
OpenBLAS can collapse (threads spin against each other): compare the ``-1t`` rows there.
"""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")
pytest.importorskip("pybind11")

FLAGSHIP = "matmul 1x2048x16384 a=f32 b=bf16:col c=f32"
SPECS = [FLAGSHIP, "matmul 64x64x64", "matmul 512x512x512"]
pytestmark = pytest.mark.slow  # synthesizes the flagship and 512^3 and builds them


@pytest.fixture(scope="module")
def kernels(pyapi_cache_dir, synth_db):
    from morello_build.tools import pyapi

    return dict(zip(SPECS, pyapi.compile_kernels(SPECS, db=synth_db)))


def _numpy_operands(f, a, b):
    """float32 (batch, rows, cols)-logical views of a and b for numpy.matmul (a col operand: the transposed
    view of a contiguous array, which BLAS reads as such)."""

    def logical(x, layout):
        x = x if x.dtype == np.float32 else x.astype(np.float32)
        return x if layout == "row" else np.swapaxes(x, -1, -2)

    return logical(a, f.layouts[0]), logical(b, f.layouts[1])


_DATA = {}


def _data(f):
    """Inputs (the kernel's and numpy's), numpy's f32 result and the tolerance, made once per spec.

    Tolerance: that of tests/test_pyapi.py (1e-5 * sqrt(K) * sum_k |a||b|) plus the worst-case error of the
    f32 reference itself (K * 2^-24 * the same sum): f64 copies of the flagship's weights cost seconds.
    """
    if f.spec not in _DATA:
        _DATA.clear()  # keep one spec's arrays alive at a time (the flagship's are 64 MiB and more)
        a, b, c = f.random_inputs(rng=0)
        na, nb = _numpy_operands(f, a, b)
        want = np.matmul(na, nb)
        tol = (1e-5 * np.sqrt(f.k) + f.k * 2.0**-24) * np.matmul(np.abs(na), np.abs(nb)) + 1e-30
        _DATA[f.spec] = (a, b, c, na, nb, want, tol)
    return _DATA[f.spec]


@pytest.mark.parametrize("impl", ["morello", "morello-1t", "numpy", "numpy-1t"])
@pytest.mark.parametrize("spec", SPECS)
def test_kernel_vs_numpy(benchmark, kernels, spec, impl, numpy_blas_threads):
    f = kernels[spec]
    benchmark.group = spec
    benchmark.extra_info.update(spec=spec, impl=impl, flop=2 * f.batch * f.m * f.k * f.n)
    a, b, c, na, nb, want, tol = _data(f)
    if impl.startswith("morello"):
        out = np.empty(f.shapes[2], c.dtype)
        got = benchmark(f, a, b, out=out, parallel=impl == "morello")
    else:
        if impl == "numpy-1t":
            if numpy_blas_threads is None:
                pytest.skip("cannot set the thread count of numpy's BLAS")
            numpy_blas_threads(1)
        out = np.empty(want.shape, np.float32)
        got = benchmark(np.matmul, na, nb, out=out)
    assert np.all(np.abs(got.astype(np.float32) - want) <= tol)
