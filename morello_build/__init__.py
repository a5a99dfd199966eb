"""morello-build: synthesize fast CPU matmul/GEMV kernels by dynamic programming, emit header-only C++."""

__version__ = "0.1.0"


__all__ = ["__version__", "compile"]


def __dir__():
    return sorted(set(globals()) | set(__all__))  # lazy attributes too (dir() would omit `compile`)


def __getattr__(name):
    # `morello_build.compile(spec)` without importing numpy/pybind11 for CLI or CMake users.
    if name == "compile":
        from morello_build.tools.pyapi import compile_kernel

        return compile_kernel
    raise AttributeError(f"module 'morello_build' has no attribute {name!r}")
