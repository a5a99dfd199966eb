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
- ``PairAccum``: two fresh accumulators, zeroed, the pair body, the gate store; ``Seq``: its two matmuls.
- ``Kernel``: its op's numpy semantics (``OpDef.evaluate``, ir/ops.py) on its tiles, computed in f32 and
  rounded to the outputs' dtypes: matmul ``c (+)= a @ b``, move a copy with dtype conversion (widening
  exact, narrowing round-to-nearest-even), zero.

Inputs are passed down as read-only views, so a program that writes an input raises. At every node the
arrays must have the shapes and dtypes of the node's spec.

An epilogue's tensors (``extras``: each term's array broadcast to C's shape) follow C's tile through
loops and moves down to the store that applies them (ir/epilogue.py).
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

from morello_build.ir import aquant
from morello_build.ir.formats import is_format
from morello_build.ir.impl import Accum, Kernel, Loop, MoveImpl, PairAccum, Seq
from morello_build.ir.spec import DType, Spec
from morello_build.target.kernels import BY_NAME

FORMAT_NP = {"f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn}
NP_DTYPES = {DType.F32: np.dtype(np.float32), DType.BF16: np.dtype(ml_dtypes.bfloat16)}


class InterpretError(AssertionError):
    """The Impl tree is inconsistent (shapes, dtypes, regions) with the arrays it is run on."""


def np_dtype(dtype: DType) -> np.dtype:
    """A weight format's logical array is its values: f16 and e4m3 as themselves, the quantized
    formats dequantized to f32 (formats.dequantize; their storage is tested on its own)."""
    if is_format(dtype) or aquant.is_quantized_a(dtype):  # quantized A: f32 (ir/aquant.py)
        return np.dtype(FORMAT_NP.get(getattr(dtype, "name", ""), np.float32))
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


def execute(impl, arrays: list[np.ndarray], extras: dict | None = None) -> None:
    """Run ``impl`` on ``arrays`` (one per operand of its spec, in order), writing outputs in place;
    ``extras``: the epilogue's tensors at the output's tile, when the spec has an epilogue."""
    spec = impl.spec
    _check(spec, arrays)
    op = spec.op
    if bool(op.epilogue) != (extras is not None):
        raise InterpretError(f"{spec.describe()}: epilogue tensors {'missing' if extras is None else 'given'}")
    arrays = [x if i in op.outputs else _readonly(x) for i, x in enumerate(arrays)]
    if isinstance(impl, Kernel):
        _kernel(impl, arrays, extras)
    elif isinstance(impl, Loop):
        _loop(impl, arrays, extras)
    elif isinstance(impl, MoveImpl):
        _move(impl, arrays, extras)
    elif isinstance(impl, Accum):
        if not op.definition.reduction_dims or op.accum:
            raise InterpretError(f"to_accum on {spec.describe()}")
        execute(impl.zero, [arrays[i] for i in op.outputs])
        execute(impl.body, arrays)
    elif isinstance(impl, PairAccum):
        _pair_accum(impl, arrays, extras)
    elif isinstance(impl, Seq):
        a, b1, b2, c1, c2 = arrays
        execute(impl.first, [a, b1, c1])
        execute(impl.second, [a, b2, c2])
    else:
        raise InterpretError(f"unknown Impl node {type(impl).__name__}")


def _kernel(impl: Kernel, arrays, extras) -> None:
    op = impl.spec.op
    k = BY_NAME.get(impl.name)
    if k is None or k.kind != op.kind or (op.epilogue and not k.epilogue):
        raise InterpretError(f"kernel {impl.name} does not implement a {op.describe() if op.epilogue else op.kind}")
    if k.name == "quantize_a":  # its buffer's logical values: sa * qa per block (ir/aquant.py)
        arrays[1][...] = aquant.fake_quantize(arrays[0])
        return
    for i, value in zip(op.outputs, op.definition.evaluate(op, arrays, np.float32, extras)):
        arrays[i][...] = value.astype(arrays[i].dtype)


def tile_origins(loop: Loop, region) -> list[tuple[int, ...]]:
    """Origins of the tiles of one region: main tiles at multiples of the tile, a ragged end after them."""
    full, tile = loop.spec.op.iter_shape, loop.tile
    per_dim = []
    for d, rem in zip(loop.dims, region.remainder):
        q = full[d] // tile[d]
        first = region.start
        per_dim.append(
            [q * tile[d]] if rem else [i * tile[d] for i in range(first, first + loop.main_trips(region, d))]
        )
    origins = []
    for combo in itertools.product(*per_dim):
        o = [0] * len(full)
        for d, x in zip(loop.dims, combo):
            o[d] = x
        origins.append(tuple(o))
    return origins


def _loop(impl: Loop, arrays, extras) -> None:
    op = impl.spec.op
    out_dims = op.operand_iter_dims[op.outputs[0]]
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
            out_idx = tuple(slice(o[j], o[j] + region.shape[j]) for j in out_dims)
            execute(region.body, views, extras and {k: x[out_idx] for k, x in extras.items()})


def _move(impl: MoveImpl, arrays, extras) -> None:
    op = impl.spec.op
    i = impl.operand
    t = arrays[i]
    if tuple(impl.buffer.shape) != tuple(t.shape):
        raise InterpretError(f"{impl.label()}: buffer shape {impl.buffer.shape}, operand {t.shape}")
    if impl.view:
        if impl.buffer.dtype != op.operands[i].dtype or impl.load or impl.store:
            raise InterpretError(f"{impl.label()}: a view must keep the dtype and copy nothing")
        execute(impl.body, arrays, extras)
        return
    buf = np.full(t.shape, np.nan, dtype=np_dtype(impl.buffer.dtype))
    is_output = i in op.outputs
    if impl.load is not None:
        execute(impl.load, [t, buf])
    elif not is_output or op.accum:
        raise InterpretError(f"{impl.label()}: the operand's values are needed but never loaded")
    inner = list(arrays)
    inner[i] = buf if is_output else _readonly(buf)
    execute(impl.body, inner, None if is_output else extras)  # the store applies the epilogue
    if impl.store is not None:
        execute(impl.store, [_readonly(buf), t], extras)
    elif is_output:
        raise InterpretError(f"{impl.label()}: an output moved to a new buffer is never stored back")


def broadcast_extras(op, extras: dict | None) -> dict | None:
    """The epilogue's tensors (user-level: scale a number, colscale and bias N values, residual (B,)M,N)
    as read-only f32 arrays of C's shape."""
    if not op.epilogue:
        return None
    shape = op.operands[op.outputs[0]].shape
    missing = [t for t in op.epilogue.tensors if t not in (extras or {})]
    if missing:
        raise ValueError(f"{op.kind}: epilogue tensor(s) {', '.join(missing)} needed")
    return {t: np.broadcast_to(np.asarray(extras[t], dtype=np.float32), shape) for t in op.epilogue.tensors}


def _pair_accum(impl: PairAccum, arrays, extras) -> None:
    a, b1, b2, c = arrays
    if tuple(impl.buffer.shape) != tuple(c.shape):
        raise InterpretError(f"{impl.label()}: buffer shape {impl.buffer.shape}, operand {c.shape}")
    acc1, acc2 = (np.full(c.shape, np.nan, dtype=np_dtype(impl.buffer.dtype)) for _ in range(2))
    execute(impl.zero1, [acc1])
    execute(impl.zero2, [acc2])
    execute(impl.body, [a, b1, b2, acc1, acc2])
    execute(impl.store, [_readonly(acc1), _readonly(acc2), c], extras)


def interpret(impl, *arrays, extras: dict | None = None) -> np.ndarray:
    """Run a program on its user-level operands (a matmul: A (B,M,K), B (B,K,N) and, for accumulating
    specs, the initial C (B,M,N)); ``extras``: the epilogue's tensors by term name (broadcast_extras).

    Arrays are converted to the spec's dtypes first (2-D arrays get a batch of 1). Returns the new (first)
    output in its dtype. Outputs of non-accumulating specs start as NaN, so unwritten elements show.
    """
    op = impl.spec.op

    def prep(x, t):
        x = np.asarray(x)
        if x.ndim == 2:
            x = x[None]
        return convert(x, t.dtype)

    given = arrays + (None,) * (len(op.operands) - len(arrays))
    inputs = []
    for i, (x, t, name) in enumerate(zip(given, op.operands, op.operand_names)):
        if i in op.outputs and not op.accum:
            inputs.append(np.full(t.shape, np.nan, dtype=np_dtype(t.dtype)))
        elif x is None:
            raise ValueError(
                f"{op.kind}: operand {name} is needed"
                + (" (the initial value of an accumulating spec's output)" if i in op.outputs else "")
            )
        else:
            inputs.append(prep(x, t))
    execute(impl, inputs, broadcast_extras(op, extras))
    return inputs[op.outputs[0]]


def reference(spec: Spec, *arrays, extras: dict | None = None) -> np.ndarray:
    """The spec's (first) output from its operands (a matmul: ``A @ B (+ C)``), by the op's semantics in
    float64 from the spec-dtype inputs, rounded to the output's dtype."""
    op = spec.op
    given = arrays + (None,) * (len(op.operands) - len(arrays))
    xs = [None if x is None else convert(np.asarray(x), t.dtype) for x, t in zip(given, op.operands)]
    out = op.definition.evaluate(op, xs, np.float64, broadcast_extras(op, extras))[0]
    return out.astype(np.float32).astype(np_dtype(op.operands[op.outputs[0]].dtype))
