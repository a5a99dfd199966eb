"""A numpy interpreter of Impl trees: executes a program tile by tile, to check that it computes its spec.

Every operand is a *logical* array of its spec's shape and dtype (f32 as ``float32``, bf16 as
``ml_dtypes.bfloat16``); physical layouts are not modelled (``layout.py`` is tested on its own).
The semantics are applied exactly, node by node:

- ``Loop``: every region, every tile at its origin (main tiles at multiples of the tile, the ragged end
  of a dim after them); the body runs on numpy views of the operand tiles. A loop that misses part of the
  iteration space leaves it unwritten, one that covers a part twice accumulates it twice.
- ``MoveImpl``: a fresh array of the buffer's dtype (filled with NaN, so an unwritten element shows),
  the load program copies the tile into it (inputs, and outputs of accumulating specs), the body runs on
  it, and the store program copies it back (outputs). A ``view`` copies nothing.
- ``Accum``: the zero program, then the accumulating body.
- ``Kernel``: its spec's semantics on its tiles: matmul ``c (+)= a @ b`` computed in f32, move a copy
  with dtype conversion (widening exact, narrowing round-to-nearest-even), zero.

Inputs are passed down as read-only views, so a program that writes an input raises. At every node the
arrays must have the shapes and dtypes of the node's spec.
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

from morello_build.ir.impl import Accum, Kernel, Loop, MoveImpl
from morello_build.ir.spec import DType, Spec
from morello_build.target.kernels import BY_NAME

NP_DTYPES = {DType.F32: np.dtype(np.float32), DType.BF16: np.dtype(ml_dtypes.bfloat16)}


class InterpretError(AssertionError):
    """The Impl tree is inconsistent (shapes, dtypes, regions) with the arrays it is run on."""


def np_dtype(dtype: DType) -> np.dtype:
    return NP_DTYPES[dtype]


def convert(x: np.ndarray, dtype: DType) -> np.ndarray:
    """A copy of ``x`` in ``dtype``: bf16 -> f32 exact, f32 -> bf16 rounded to nearest even."""
    return np.array(x, dtype=np_dtype(dtype), copy=True)


def _readonly(x: np.ndarray) -> np.ndarray:
    v = x.view()
    v.flags.writeable = False
    return v


def _check(spec: Spec, arrays) -> None:
    ops = spec.op.operands
    if len(arrays) != len(ops):
        raise InterpretError(f"{spec.describe()}: {len(arrays)} arrays for {len(ops)} operands")
    for name, t, x in zip(spec.op.operand_names, ops, arrays):
        if tuple(x.shape) != tuple(t.shape):
            raise InterpretError(f"{spec.describe()}: operand {name} has shape {x.shape}, spec says {t.shape}")
        if x.dtype != np_dtype(t.dtype):
            raise InterpretError(f"{spec.describe()}: operand {name} has dtype {x.dtype}, spec says {t.dtype.value}")


def execute(impl, arrays: list[np.ndarray]) -> None:
    """Run ``impl`` on ``arrays`` (one per operand of its spec, in order), writing outputs in place."""
    spec = impl.spec
    _check(spec, arrays)
    op = spec.op
    arrays = [x if i in op.outputs else _readonly(x) for i, x in enumerate(arrays)]
    if isinstance(impl, Kernel):
        _kernel(impl, arrays)
    elif isinstance(impl, Loop):
        _loop(impl, arrays)
    elif isinstance(impl, MoveImpl):
        _move(impl, arrays)
    elif isinstance(impl, Accum):
        if op.kind != "matmul" or op.accum:
            raise InterpretError(f"to_accum on {spec.describe()}")
        execute(impl.zero, [arrays[2]])
        execute(impl.body, arrays)
    else:
        raise InterpretError(f"unknown Impl node {type(impl).__name__}")


def _kernel(impl: Kernel, arrays) -> None:
    op = impl.spec.op
    k = BY_NAME.get(impl.name)
    if k is None or k.kind != op.kind:
        raise InterpretError(f"kernel {impl.name} does not implement a {op.kind}")
    if op.kind == "matmul":
        a, b, c = arrays
        prod_ = np.matmul(a.astype(np.float32), b.astype(np.float32))
        acc = c.astype(np.float32) + prod_ if op.accum else prod_
        c[...] = acc.astype(c.dtype)
    elif op.kind == "move":
        src, dst = arrays
        dst[...] = convert(src, op.dst.dtype)
    elif op.kind == "zero":
        arrays[0][...] = 0
    else:
        raise InterpretError(f"unknown op kind {op.kind}")


def tile_origins(loop: Loop, region) -> list[tuple[int, ...]]:
    """Origins of the tiles of one region: main tiles at multiples of the tile, a ragged end after them."""
    full, tile = loop.spec.op.iter_shape, loop.tile
    per_dim = []
    for d, rem in zip(loop.dims, region.remainder):
        q = full[d] // tile[d]
        first = region.start
        per_dim.append([q * tile[d]] if rem else
                       [i * tile[d] for i in range(first, first + loop.main_trips(region, d))])
    origins = []
    for combo in itertools.product(*per_dim):
        o = [0] * len(full)
        for d, x in zip(loop.dims, combo):
            o[d] = x
        origins.append(tuple(o))
    return origins


def _loop(impl: Loop, arrays) -> None:
    op = impl.spec.op
    for region in impl.regions:
        if len(region.remainder) != len(impl.dims):
            raise InterpretError(f"{impl.label()}: region flags {region.remainder} for dims {impl.dims}")
        origins = tile_origins(impl, region)
        if len(origins) != region.count:
            raise InterpretError(f"{impl.label()}: region claims {region.count} tiles, has {len(origins)}")
        for o in origins:
            views = []
            for x, dims in zip(arrays, op.operand_iter_dims):
                idx = tuple(slice(o[j], o[j] + region.shape[j]) for j in dims)
                views.append(x[idx])
            execute(region.body, views)


def _move(impl: MoveImpl, arrays) -> None:
    op = impl.spec.op
    i = impl.operand
    t = arrays[i]
    if tuple(impl.buffer.shape) != tuple(t.shape):
        raise InterpretError(f"{impl.label()}: buffer shape {impl.buffer.shape}, operand {t.shape}")
    if impl.view:
        if impl.buffer.dtype != op.operands[i].dtype or impl.load or impl.store:
            raise InterpretError(f"{impl.label()}: a view must keep the dtype and copy nothing")
        execute(impl.body, arrays)
        return
    buf = np.full(t.shape, np.nan, dtype=np_dtype(impl.buffer.dtype))
    is_output = i in op.outputs
    if impl.load is not None:
        execute(impl.load, [t, buf])
    elif not is_output or op.accum:
        raise InterpretError(f"{impl.label()}: the operand's values are needed but never loaded")
    inner = list(arrays)
    inner[i] = buf if is_output else _readonly(buf)
    execute(impl.body, inner)
    if impl.store is not None:
        execute(impl.store, [_readonly(buf), t])
    elif is_output:
        raise InterpretError(f"{impl.label()}: an output moved to a new buffer is never stored back")


def interpret(impl, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """Run a Matmul program on A (B,M,K), B (B,K,N) and, for accumulating specs, the initial C (B,M,N).

    Arrays are converted to the spec's dtypes first (2-D arrays get a batch of 1). Returns the new C in
    the spec's C dtype. For non-accumulating specs the initial C is NaN, so unwritten elements show.
    """
    op = impl.spec.op
    if op.kind != "matmul":
        raise ValueError(f"interpret() runs matmul programs; use execute() for {op.kind}")

    def prep(x, t):
        x = np.asarray(x)
        if x.ndim == 2:
            x = x[None]
        return convert(x, t.dtype)

    a, b = prep(a, op.a), prep(b, op.b)
    if op.accum:
        if c is None:
            raise ValueError("an accumulating spec needs the initial C")
        c = prep(c, op.c)
    else:
        c = np.full(op.c.shape, np.nan, dtype=np_dtype(op.c.dtype))
    execute(impl, [a, b, c])
    return c


def reference(spec: Spec, a, b, c=None) -> np.ndarray:
    """``A @ B (+ C)`` for a matmul spec, in float64 from the spec-dtype inputs, rounded to C's dtype."""
    op = spec.op
    a64 = convert(np.asarray(a), op.a.dtype).astype(np.float64)
    b64 = convert(np.asarray(b), op.b.dtype).astype(np.float64)
    out = np.matmul(a64, b64)
    if op.accum:
        out = out + convert(np.asarray(c), op.c.dtype).astype(np.float64)
    return out.astype(np.float32).astype(np_dtype(op.c.dtype))
