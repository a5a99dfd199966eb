"""The Python API (morello_build.tools.pyapi): generated kernels called from numpy.

Every dtype x layout combination of the spec grammar (a, b, c each f32|bf16 and row|col: 64), with batch and
accum mixed in, plus awkward sizes (1, primes, non-multiples of 16), against numpy on the same data; errors
for wrong arguments; and the build cache (a second compile of a spec runs no compiler).

All test kernels are synthesized and built once per session, in one extension (``compile_kernels``), and
shared through the session's build cache (fixture ``pyapi_cache_dir``).

Tolerance (stated, per output element): with S = sum_k |a||b| (+ |c_old| for accum), on f32 values of the
very inputs the kernel got (bf16 inputs widened exactly),
    |kernel - exact| <= 1e-5 * sqrt(K) * S            (f32 accumulation, any summation order)
                      + 2^-8 * |exact|                 (only when c is bf16: one rounding of the output).
With an epilogue (terms as keyword arguments), the sum's part is multiplied by |scale * colscale[n]| and the
activation's largest slope (1.13), plus 2^-21 times the magnitudes of the epilogue's intermediate values
(check_epilogue_against_numpy).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import shared_search

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")
pytest.importorskip("pybind11")
if shutil.which(os.environ.get("CXX", "g++").split()[0]) is None:
    pytest.skip("no C++ compiler", allow_module_level=True)

from morello_build.fingerprint import generator_fingerprint  # noqa: E402
from morello_build.tools import pyapi  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
# slow: the session builds every test kernel into one extension (under xdist --dist loadfile, in one worker).
pytestmark = pytest.mark.slow

# -- the specs under test -------------------------------------------------------------------------
_SMALL_SHAPES = [(2, 3, 5), (1, 5, 3), (3, 1, 4), (5, 2, 1), (1, 1, 1), (3, 4, 2), (4, 3, 1), (1, 2, 7)]


def _combo_specs() -> list[str]:
    """All 64 dtype/layout combinations; sizes cycle through small awkward shapes, batch, accum and serial
    are spread over them (every combination is kept small: synthesis time is the budget)."""
    out = []
    combos = itertools.product(("f32", "bf16"), ("f32", "bf16"), ("f32", "bf16"), *[("row", "col")] * 3)
    for i, (da, db, dc, la, lb, lc) in enumerate(combos):
        m, k, n = _SMALL_SHAPES[i % len(_SMALL_SHAPES)]
        spec = f"matmul {m}x{k}x{n} a={da}:{la} b={db}:{lb} c={dc}:{lc}"
        if i % 4 == 1:
            spec += " batch=2"
        if i % 3 == 0:
            spec += " accum"
        if i % 7 == 3:
            spec += " serial"
        out.append(spec)
    return out


COMBO_SPECS = _combo_specs()
AWKWARD_SPECS = [
    "matmul 7x13x29",  # primes, f32
    "matmul 1x100x17 b=bf16:col",  # GEMV, gemma's layout, K and N not /16
    "matmul 1x256x40 b=bf16:col",  # the flagship's shape family, small
    "matmul 31x2x37 c=bf16:col accum",  # bf16 output, accumulate
    "matmul 1x256x2048 b=bf16:col",  # has a parallel loop (thread pool)
    "matmul 1x37x3000 a=bf16 b=bf16",  # GEMV, KxN weights in row runs (peeled k by 8)
    "matmul 1x1x1 a=bf16 b=bf16 c=bf16",  # all ones, all bf16
    "matmul 5x2x1 a=bf16:col b=bf16:col c=bf16:col batch=2 accum",
]
ALL_SPECS = COMBO_SPECS + AWKWARD_SPECS
# Epilogue terms as keyword arguments (built into the same extension as the specs above).
EPILOGUE_SPECS = [
    "matmul 4x64x20 scale colscale bias act=gelu residual",  # every term
    "matmul 1x37x19 b=bf16:col c=bf16 bias act=silu",  # GEMV, bf16 output, odd N
    "matmul 2x5x3 a=bf16:col batch=2 colscale act=relu residual",  # batch: residual (2, 2, 3)
    "gated 2x40x13 b=bf16:col bias act=silu",  # the gated pair: f(a, b1, b2, bias1=, bias2=)
]


def _shared_search_header(spec, *, isa, name, namespace, db=None, threads=None):
    """synthesize_header with one search memo per target for all test kernels (header_fn of compile_kernels): the
    small specs share most sub-programs, half the search time of a fresh search each. pyapi's own synthesis
    path (header cache, isa, threads) is tested by the build-cache tests below and test_threads.py."""
    from morello_build.codegen import emit_header
    from morello_build.ir.grammar import parse_spec
    from morello_build.target import get_target

    user, target = parse_spec(spec), get_target(isa, threads=threads)
    impl = shared_search.search_for(target).best(user.to_spec(target.limits()))
    assert impl is not None, spec
    return emit_header(user, impl, target, name=name, namespace=namespace)


@pytest.fixture(scope="session")
def kernels(pyapi_cache_dir):
    """spec -> Kernel, all built in one extension (one compile, one link)."""
    from morello_build.ir.grammar import format_spec, parse_spec

    specs = ALL_SPECS + EPILOGUE_SPECS
    ks = pyapi.compile_kernels(specs, header_fn=_shared_search_header)
    return {format_spec(parse_spec(s)): k for s, k in zip(specs, ks)}


def _kernel(kernels, spec):
    from morello_build.ir.grammar import format_spec, parse_spec

    return kernels[format_spec(parse_spec(spec))]


# -- numpy model ----------------------------------------------------------------------------------
def _logical(x: np.ndarray, layout: str) -> np.ndarray:
    """f64 view of an operand as (batch, rows, cols), whatever its stored layout."""
    x = x.astype(np.float32).astype(np.float64)
    if x.ndim == 2:
        x = x[None]
    return x if layout == "row" else np.swapaxes(x, -1, -2)


def check_against_numpy(f: pyapi.Kernel, a, b, c_old, got) -> None:
    la, lb, lc = f.layouts
    A, B, G = _logical(a, la), _logical(b, lb), _logical(got, lc)
    exact = A @ B
    size = np.abs(A) @ np.abs(B)
    if f.accum:
        C0 = _logical(c_old, lc)
        exact, size = exact + C0, size + np.abs(C0)
    tol = 1e-5 * np.sqrt(f.k) * size + (2.0**-8 * np.abs(exact) if f.dtypes[2] == "bf16" else 0) + 1e-30
    err = np.abs(G - exact)
    bad = err > tol
    assert not bad.any(), (
        f"{f.spec}: {bad.sum()} of {bad.size} outputs off; worst error {err.max():.3g} "
        f"(tolerance there {tol.flat[np.argmax(err)]:.3g})"
    )


def _run(f: pyapi.Kernel, a, b, c, method="__call__", **kw):
    call = getattr(f, method)
    if f.accum:
        out = c.copy()
        res = call(a, b, out=out, **kw)
        assert res is out
        return res
    res = call(a, b, **kw)
    assert res.shape == f.shapes[2] and res.dtype == (BF16 if f.dtypes[2] == "bf16" else np.float32)
    return res


# -- correctness ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ALL_SPECS)
def test_matches_numpy(kernels, spec):
    f = _kernel(kernels, spec)
    assert f.supported
    a, b, c = f.random_inputs(rng=abs(hash(spec)) % 2**32)
    check_against_numpy(f, a, b, c, _run(f, a, b, c))
    check_against_numpy(f, a, b, c, _run(f, a, b, c, method="reference"))
    check_against_numpy(f, a, b, c, _run(f, a, b, c, parallel=False))


def test_shapes_follow_the_stored_layout(kernels):
    f = _kernel(kernels, "matmul 1x100x17 b=bf16:col")
    assert f.shapes == ((1, 100), (17, 100), (1, 17))  # b=bf16:col: W is (N, K)
    assert (f.batch, f.m, f.k, f.n, f.accum) == (1, 1, 100, 17, False)
    assert f.dtypes == ("f32", "bf16", "f32") and f.layouts == ("row", "col", "row")
    g = _kernel(kernels, "matmul 5x2x1 a=bf16:col b=bf16:col c=bf16:col batch=2 accum")
    assert g.shapes == ((2, 2, 5), (2, 1, 2), (2, 1, 5))
    assert f.header_path.is_file() and "kernel_info" in f.header_path.read_text()


def test_bf16_as_uint16_bits(kernels):
    f = _kernel(kernels, "matmul 1x256x40 b=bf16:col")
    a, b, _ = f.random_inputs(rng=1)
    np.testing.assert_array_equal(f(a, b), f(a, b.view(np.uint16)))
    g = _kernel(kernels, "matmul 1x1x1 a=bf16 b=bf16 c=bf16")
    x, y = np.array([[1.5]], BF16), np.array([[2.0]], BF16)
    assert float(g(x, y)[0, 0]) == 3.0 and g(x.view(np.uint16), y.view(np.uint16)).dtype == BF16


def test_gil_released_threads(kernels):
    """Concurrent calls from Python threads give the same answers (the GIL is released in the call), also
    into a kernel whose parallel loop runs on the header's thread pool."""
    from concurrent.futures import ThreadPoolExecutor

    f = _kernel(kernels, "matmul 1x256x2048 b=bf16:col")
    a, b, _ = f.random_inputs(rng=2)
    want = f(a, b)
    np.testing.assert_array_equal(f(a, b, parallel=False), want)
    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(lambda _: f(a, b), range(64)):
            np.testing.assert_array_equal(got, want)


# -- errors ----------------------------------------------------------------------------------------
def test_wrong_shape_names_the_argument(kernels):
    f = _kernel(kernels, "matmul 1x100x17 b=bf16:col")
    a, b, _ = f.random_inputs(rng=3)
    with pytest.raises(ValueError, match=r"^b: expected shape \(17, 100\) bfloat16 .*C-contiguous, got \(100, 17\)"):
        f(a, b.T.copy())
    with pytest.raises(ValueError, match=r"^a: expected shape \(1, 100\)"):
        f(a[:, :50].copy(), b)
    with pytest.raises(ValueError, match=r"^out: expected shape \(1, 17\)"):
        f(a, b, out=np.empty((17, 1), np.float32))


def test_wrong_dtype_names_the_argument(kernels):
    f = _kernel(kernels, "matmul 1x100x17 b=bf16:col")
    a, b, _ = f.random_inputs(rng=4)
    with pytest.raises(TypeError, match=r"^b: expected shape \(17, 100\) bfloat16.*got \(17, 100\) float32"):
        f(a, b.astype(np.float32))
    with pytest.raises(TypeError, match=r"^a: .*float32.*got \(1, 100\) float64"):
        f(a.astype(np.float64), b)
    with pytest.raises(TypeError, match=r"^a: expected a numpy array"):
        f(a.tolist(), b)


def test_non_contiguous_and_bad_out(kernels):
    f = _kernel(kernels, "matmul 7x13x29")
    a, b, _ = f.random_inputs(rng=5)
    with pytest.raises(ValueError, match=r"^a: .*non-contiguous"):
        f(np.asfortranarray(a), b)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    mis = raw[1:].view(np.float32).reshape(a.shape)  # C-contiguous but not 4-byte aligned
    mis[...] = a
    with pytest.raises(ValueError, match=r"^a: .*misaligned"):
        f(mis, b)
    ro = np.empty(f.shapes[2], np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out: .*read-only"):
        f(a, b, out=ro)
    g = _kernel(kernels, "matmul 31x2x37 c=bf16:col accum")
    a, b, c = g.random_inputs(rng=6)
    with pytest.raises(TypeError, match=r"^out: required for an accum kernel"):
        g(a, b)


def test_out_must_not_overlap(kernels):
    g = _kernel(kernels, "matmul 1x1x1 a=bf16 b=bf16 c=bf16")  # a, b and c all (1, 1) bf16
    x, y = np.array([[1.5]], BF16), np.array([[2.0]], BF16)
    with pytest.raises(ValueError, match=r"^out: must not overlap a or b"):
        g(x, y, out=x)


# -- epilogues: terms as keyword arguments ---------------------------------------------------------
def check_epilogue_against_numpy(f: pyapi.Kernel, a, b, terms, got) -> None:
    """y = act(scale * colscale * A·B + bias) + residual in f64 on the kernel's inputs. Tolerance: the sum's
    (as above) times the activation's slope and |scale * colscale|, plus a few f32 roundings of the
    epilogue's intermediate values (and one bf16 rounding of the output when c is bf16)."""
    from morello_build.ir.epilogue import ACTIVATIONS

    la, lb, lc = f.layouts
    A, B, G = _logical(a, la), _logical(b, lb), _logical(got, lc)
    factor = np.float64(terms.get("scale", 1.0)) * terms.get("colscale", np.ones(f.n, np.float32)).astype(np.float64)
    x = factor * (A @ B) + terms.get("bias", np.zeros(f.n, np.float32)).astype(np.float64)
    act = next((ACTIVATIONS[t[4:]] for t in f.epilogue.split() if t.startswith("act=")), None)
    y = act.numpy(x) if act else x
    residual = terms["residual"].reshape(y.shape).astype(np.float64) if "residual" in terms else 0.0
    exact = y + residual
    slope = 1.13 if act else 1.0
    tol = slope * np.abs(factor) * 1e-5 * np.sqrt(f.k) * (np.abs(A) @ np.abs(B))
    tol += 2.0**-21 * (np.abs(x) + np.abs(y) + np.abs(residual) + np.abs(exact)) + 1e-30
    if f.dtypes[2] == "bf16":
        tol += 2.0**-8 * np.abs(exact)
    err = np.abs(G - exact)
    bad = err > tol
    assert not bad.any(), f"{f.spec}: {bad.sum()} of {bad.size} outputs off; worst error {err.max():.3g}"


def test_gated_pair_matches_numpy(kernels):
    f = _kernel(kernels, "gated 2x40x13 b=bf16:col bias act=silu")
    assert [p.name for p in f.params] == ["a", "b1", "b2", "c", "bias1", "bias2"]
    rng = np.random.default_rng(15)
    a = rng.uniform(-1, 1, (2, 40)).astype(np.float32)
    b1, b2 = (rng.uniform(-1, 1, (13, 40)).astype(ml_dtypes.bfloat16) for _ in range(2))  # N×K: col
    terms = {t: rng.uniform(-1, 1, 13).astype(np.float32) for t in ("bias1", "bias2")}
    g = a.astype(np.float64) @ b1.astype(np.float64).T + terms["bias1"]
    u = a.astype(np.float64) @ b2.astype(np.float64).T + terms["bias2"]
    want = g / (1 + np.exp(-g)) * u
    tol = 4 * 42 * 2.0**-24 * np.abs(a) @ (np.abs(b1.astype(np.float64)) + np.abs(b2.astype(np.float64))).T
    np.testing.assert_array_less(np.abs(f(a, b1, b2, **terms) - want), 2 * tol * (np.abs(u) + np.abs(g) + 2) + 1e-6)
    with pytest.raises(TypeError, match=r"^bias2: required argument missing"):
        f(a, b1, b2, bias1=terms["bias1"])


@pytest.mark.parametrize("spec", [s for s in EPILOGUE_SPECS if s.startswith("matmul")])
def test_epilogue_terms_match_numpy(kernels, spec):
    f = _kernel(kernels, spec)
    a, b, _ = f.random_inputs(rng=11)
    terms = f.random_terms(rng=12)
    assert tuple(terms) == f.terms and f.epilogue in spec
    want = f.reference(a, b, **terms)
    check_epilogue_against_numpy(f, a, b, terms, want)
    check_epilogue_against_numpy(f, a, b, terms, f(a, b, **terms))
    np.testing.assert_array_equal(f(a, b, parallel=False, **terms), f(a, b, **terms))
    out = np.empty(f.shapes[2], want.dtype)
    assert f(a, b, out=out, **terms) is out


def test_epilogue_params_and_shapes(kernels):
    f = _kernel(kernels, "matmul 4x64x20 scale colscale bias act=gelu residual")
    assert [p.name for p in f.params] == ["a", "b", "c", "scale", "colscale", "bias", "residual"]
    assert f.terms == ("scale", "colscale", "bias", "residual") and f.shapes == ((4, 64), (64, 20), (4, 20))
    assert [p.shape for p in f.params[3:]] == [None, (20,), (20,), (4, 20)]
    g = _kernel(kernels, "matmul 2x5x3 a=bf16:col batch=2 colscale act=relu residual")
    assert g.shapes == ((2, 5, 2), (2, 5, 3), (2, 2, 3)) and g.params[-1].shape == (2, 2, 3)
    h = _kernel(kernels, "matmul 7x13x29")
    assert h.terms == () and h.epilogue == ""


def test_epilogue_argument_errors_name_the_argument(kernels):
    f = _kernel(kernels, "matmul 4x64x20 scale colscale bias act=gelu residual")
    a, b, _ = f.random_inputs(rng=13)
    terms = f.random_terms(rng=14)
    without = {k: v for k, v in terms.items() if k != "bias"}
    with pytest.raises(TypeError, match=r"^bias: required argument missing; call f\(a, b\[, out=\], scale=, "):
        f(a, b, **without)
    with pytest.raises(TypeError, match=r"^bias: required argument missing"):
        f.reference(a, b, **without)
    with pytest.raises(TypeError, match=r"^shift: unexpected argument"):
        f(a, b, shift=1.0, **terms)
    with pytest.raises(ValueError, match=r"^colscale: expected shape \(20,\) float32 .*got \(19,\)"):
        f(a, b, **dict(terms, colscale=terms["colscale"][:19].copy()))
    with pytest.raises(TypeError, match=r"^residual: expected shape \(4, 20\) float32.*got \(4, 20\) float64"):
        f(a, b, **dict(terms, residual=terms["residual"].astype(np.float64)))
    with pytest.raises(TypeError, match=r"^scale: expected a float, got str"):
        f(a, b, **dict(terms, scale="2"))
    with pytest.raises(ValueError, match=r"^out: must not overlap a, b, colscale, bias or residual"):
        f(a, b, out=terms["residual"], **terms)
    g = _kernel(kernels, "matmul 7x13x29")  # no epilogue: no terms accepted
    x, y, _ = g.random_inputs(rng=15)
    with pytest.raises(TypeError, match=r"^bias: unexpected argument; call f\(a, b\[, out=\]\); spec: matmul 7x13x29"):
        g(x, y, bias=np.zeros(29, np.float32))
    np.testing.assert_array_equal(g(a=x, b=y), g(x, y))  # inputs by name, as before


def test_bad_spec_is_a_spec_error():
    from morello_build.ir.grammar import SpecError

    with pytest.raises(SpecError, match="bad spec token 'q=f32'"):
        pyapi.compile_kernel("matmul 2x2x2 q=f32")


# -- the build cache --------------------------------------------------------------------------------
def test_second_compile_runs_no_compiler(kernels, pyapi_cache_dir, monkeypatch):
    spec = "matmul 7x13x29"
    first = pyapi.compile_kernel(spec)  # may build (a single-kernel extension)
    mtime = first.extension_path.stat().st_mtime_ns

    def no_compiler(cmd, kind):
        raise AssertionError(f"compiler ran on a cached build: {cmd}")

    monkeypatch.setattr(pyapi, "_run_compiler", no_compiler)
    pyapi._loaded.clear()  # forget loaded modules too: the cache on disk alone must suffice
    again = pyapi.compile_kernel(spec)
    assert again.extension_path == first.extension_path
    assert again.extension_path.stat().st_mtime_ns == mtime
    a, b, _ = again.random_inputs(rng=7)
    np.testing.assert_array_equal(again(a, b), first(a, b))


def test_fresh_process_reuses_the_cache(kernels, pyapi_cache_dir):
    spec = "matmul 7x13x29"  # the same single-kernel extension as the test above: built at most once
    pyapi.compile_kernel(spec)
    code = textwrap.dedent(
        f"""
        from morello_build.fingerprint import generator_fingerprint
        from morello_build.tools import pyapi
        f = pyapi.compile_kernel({spec!r})
        print(pyapi.stats["compile"], pyapi.stats["link"], pyapi.stats["synthesized"],
              generator_fingerprint())
        """
    )
    env = dict(os.environ, MORELLO_CACHE_DIR=str(pyapi_cache_dir))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    *counts, fingerprint = out.stdout.split()
    if fingerprint != generator_fingerprint():
        pytest.skip("the synthesizer's files changed while the tests ran (cached headers are per version)")
    assert counts == ["0", "0", "0"], f"compile, link, synthesized in the fresh process: {counts}"


def test_concurrent_builds_are_safe(kernels, pyapi_cache_dir, tmp_path):
    """Two processes building the same new kernel into one cache dir both succeed, and agree."""
    fresh = tmp_path / "cache"
    (fresh / "objs").mkdir(parents=True)
    for p in (pyapi_cache_dir / "objs").glob("binding-*.o"):  # skip the slow pybind11 part
        shutil.copy(p, fresh / "objs" / p.name)
    if (pyapi_cache_dir / "headers").exists():
        shutil.copytree(pyapi_cache_dir / "headers", fresh / "headers")
    code = textwrap.dedent(
        """
        from morello_build.tools import pyapi
        import numpy as np
        f = pyapi.compile_kernel("matmul 1x256x40 b=bf16:col")
        a, b, _ = f.random_inputs(rng=0)
        print(f.extension_path, float(f(a, b).sum()))
        """
    )
    env = dict(os.environ, MORELLO_CACHE_DIR=str(fresh))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert outs[0][0] == outs[1][0]
    assert not [p for p in fresh.rglob(".*") if p.is_file()], "temporary files left behind"


def test_load_header_and_build_errors(kernels):
    f = _kernel(kernels, "matmul 7x13x29")
    g = pyapi.load_header(f.header_path, name=f.name, namespace=f.namespace)
    a, b, _ = f.random_inputs(rng=8)
    np.testing.assert_array_equal(g(a, b), f(a, b))
    with pytest.raises(pyapi.BuildError, match="boom"):
        pyapi.load_header('#error "boom"\n')


def test_isa_is_passed_to_the_synthesizer(pyapi_cache_dir):
    f = pyapi.compile_kernel("matmul 1x100x17 b=bf16:col", isa="avx2")
    assert "avx512" not in f.header_path.read_text().split("#pragma once")[0].split("Target:")[1].splitlines()[0]
    a, b, c = f.random_inputs(rng=9)
    check_against_numpy(f, a, b, c, f(a, b))


def test_unsupported_cpu_raises_but_reference_runs(kernels, monkeypatch):
    f = _kernel(kernels, "matmul 7x13x29")
    monkeypatch.setattr(f, "supported", False)
    a, b, c = f.random_inputs(rng=10)
    with pytest.raises(RuntimeError, match="ISA features this CPU lacks"):
        f(a, b)
    check_against_numpy(f, a, b, c, f.reference(a, b))
