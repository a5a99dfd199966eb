"""morello-build: synthesize fast CPU matmul/GEMV kernels by dynamic programming, emit header-only C++."""

__version__ = "0.1.0"
