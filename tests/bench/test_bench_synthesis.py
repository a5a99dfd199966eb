"""Synthesis time: cold (fresh search memo, process caches emptied, no database) and warm (a second call
answered by a synthesis database filled by the first), for the flagship GEMV and two square matmuls; and the
Python API's warm path (compile of specs built before: synthesis database and build cache)."""

import pytest

from morello_build.tools.api import synthesize_header

FLAGSHIP = "matmul 1x2048x16384 a=f32 b=bf16:col c=f32"
SPECS = [FLAGSHIP, "matmul 64x64x64", "matmul 512x512x512"]
pytestmark = pytest.mark.slow  # synthesizes the flagship and 512^3 and builds them


@pytest.mark.parametrize("spec", SPECS)
def test_synthesis_cold(benchmark, spec, clear_process_caches):
    benchmark.group = "synthesis cold"
    benchmark.extra_info["spec"] = spec
    header = benchmark.pedantic(synthesize_header, args=(spec,), setup=clear_process_caches, rounds=3, iterations=1)
    assert "_info" in header and spec.split()[1] in header


@pytest.mark.parametrize("spec", SPECS)
def test_synthesis_warm_db(benchmark, spec, synth_db):
    benchmark.group = "synthesis warm (database)"
    benchmark.extra_info["spec"] = spec
    db = synth_db
    first = synthesize_header(spec, db=db)  # fills the database unless the kernel benchmarks did
    again = benchmark.pedantic(synthesize_header, args=(spec,), kwargs={"db": db}, rounds=5, iterations=1)
    assert again == first


def test_pyapi_compile_warm(benchmark, pyapi_cache_dir, synth_db):
    """morello_build.tools.pyapi.compile_kernels of specs built before: database lookups, extension from the cache."""
    pyapi = pytest.importorskip("morello_build.tools.pyapi")
    benchmark.group = "python api"
    benchmark.extra_info["specs"] = SPECS
    pyapi.compile_kernels(SPECS, db=synth_db)  # builds, or finds everything in the caches

    def warm():
        pyapi._synthesize.cache_clear()  # in-memory memo off: exercise the database and the build cache
        pyapi._loaded.clear()
        return pyapi.compile_kernels(SPECS, db=synth_db)

    before = dict(pyapi.stats)
    ks = benchmark.pedantic(warm, rounds=5, iterations=1)
    assert ks[0].n == 16384
    assert (pyapi.stats["compile"], pyapi.stats["link"]) == (before["compile"], before["link"])
