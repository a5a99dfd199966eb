"""The implementations of the quantized-weights benchmark, each a callable ``run(copy)`` on its own weight copies.

- ggml (Q8_0, Q4_0, Q4_0 repacked to Q4_0x8): bench/quant/ggml_peer.c through ctypes;
- ONNX Runtime MatMulNBits (int8 / int4, block 32, accuracy_level 0 and 4): one-node models, one session
  per weight copy (the weights are initializers: ORT prepacks them at session creation);
- ours: kernels generated through morello_build.tools.pyapi;
- the read sweep (bench/quant/sweep.c through ctypes): the roofline.
Shared libraries are compiled here with the system C compiler, into a cache directory outside the repository.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent


@dataclass
class Impl:
    """One implementation of one workload: ``run(copy, threads)`` computes ``out()`` from weight copy ``copy``."""

    name: str  # e.g. "ggml Q4_0"
    fmt: str  # "q8_0", "q4_0", "bf16": the format whose read sweep and peers it is compared with
    weight_bytes: int  # bytes of one weight copy as this implementation stores them
    int8_act: bool  # quantizes the activations to int8 (checked with that error bound)
    run: Callable[[int, int], None]
    out: Callable[[], np.ndarray]
    ncopies: int
    label: str = ""
    error: str = ""
    keep: list = field(default_factory=list)


def build_so(src: Path, out_dir: Path, flags: list[str]) -> Path:
    """Compile one C file into a shared library, keyed by its bytes and flags (rebuilt when either changes)."""
    key = hashlib.sha256(src.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    so = out_dir / f"{src.stem}-{key}.so"
    if not so.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = so.with_suffix(".tmp.so")
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", str(src), "-o", str(tmp), *flags], check=True)
        os.replace(tmp, so)
    return so


# ---- the read sweep
class Sweep:
    def __init__(self, cache: Path):
        self.lib = ctypes.CDLL(str(build_so(HERE / "sweep.c", cache, [])))
        self.lib.morello_sweep.restype = ctypes.c_uint64
        self.lib.morello_sweep.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]

    def __call__(self, ptr: int, nbytes: int, threads: int, mode: int = 0) -> int:
        return self.lib.morello_sweep(ptr, nbytes, threads, mode)


def sweep_impl(sweep: Sweep, fmt: str, ptrs: list[int], nbytes: int) -> Impl:
    """The read sweep over the copies of one format (contiguous slice per thread: see bench/README.md)."""
    return Impl(
        f"read sweep ({fmt} bytes)",
        fmt,
        nbytes,
        False,
        lambda c, t: sweep(ptrs[c], nbytes, t),
        lambda: None,
        len(ptrs),
        label="AVX2/AVX-512 loads, one contiguous slice per thread",
    )


# ---- ggml
class GGML:
    def __init__(self, libdir: Path, incdir: Path, cache: Path):
        for name in ("libggml-base.so", "libggml-cpu.so", "libggml.so"):  # dependencies first, found by path
            ctypes.CDLL(str(libdir / name), mode=ctypes.RTLD_GLOBAL)
        flags = [f"-I{incdir}", f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lggml", "-lggml-base", "-lggml-cpu"]
        lib = ctypes.CDLL(str(build_so(HERE / "ggml_peer.c", cache, flags)))
        vp, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        lib.ggml_peer_new.restype = vp
        lib.ggml_peer_new.argtypes = [c_int, c_int, ctypes.POINTER(i64), i64, i64, c_int, c_int]
        lib.ggml_peer_label.restype = ctypes.c_char_p
        lib.ggml_peer_label.argtypes = [vp]
        lib.ggml_peer_weight_bytes.restype = ctypes.c_size_t
        lib.ggml_peer_weight_bytes.argtypes = [vp]
        lib.ggml_peer_weight_ptr.restype = vp
        lib.ggml_peer_weight_ptr.argtypes = [vp, c_int]
        lib.ggml_peer_set_weights.argtypes = [vp, c_int, vp]
        lib.ggml_peer_set_x.argtypes = [vp, c_int, vp]
        lib.ggml_peer_get_y.argtypes = [vp, c_int, c_int, vp]
        lib.ggml_peer_run.restype = c_int
        lib.ggml_peer_run.argtypes = [vp, c_int, c_int, c_int]
        lib.ggml_peer_free.argtypes = [vp]
        self.lib = lib

    def impls(self, fmt: str, ms: list[int], xs: list[np.ndarray], copies, k: int, n: int, repack: bool):
        """One Impl per M, sharing the weight copies (``copies``: a callable copy index -> raw block bytes)."""
        from formats import GGML_TYPE

        nc = len(copies)
        marr = (ctypes.c_int64 * len(ms))(*ms)
        h = self.lib.ggml_peer_new(GGML_TYPE[fmt], len(ms), marr, k, n, nc, int(repack))
        if not h:
            return [], []
        for c in range(nc):
            raw = np.ascontiguousarray(copies[c](), np.uint8)
            self.lib.ggml_peer_set_weights(h, c, raw.ctypes.data)
        ys = []
        for i, x in enumerate(xs):
            self.lib.ggml_peer_set_x(h, i, np.ascontiguousarray(x, np.float32).ctypes.data)
            ys.append(np.empty((ms[i], n), np.float32))
        label = self.lib.ggml_peer_label(h).decode()
        name = f"ggml {fmt.upper()}" + ("x8 (repack)" if repack else "")
        wbytes = self.lib.ggml_peer_weight_bytes(h)
        out = []
        for i in range(len(ms)):

            def run(c, t, i=i):
                if self.lib.ggml_peer_run(h, i, c, t) != 0:
                    raise RuntimeError("ggml_backend_graph_compute failed")

            def get(i=i):
                self.lib.ggml_peer_get_y(h, i, 0, ys[i].ctypes.data)
                return ys[i]

            out.append(Impl(name, fmt, wbytes, True, run, get, nc, label=f"ggml_mul_mat, {label} buffer"))
        out[0].keep.append(_Freer(self.lib, h))
        ptrs = [self.lib.ggml_peer_weight_ptr(h, c) for c in range(nc)]
        return out, ptrs


class _Freer:
    def __init__(self, lib, h):
        self.lib, self.h = lib, h

    def __del__(self):
        self.lib.ggml_peer_free(self.h)


# ---- ONNX Runtime
def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ort_impls(fmt, ms, xs, ort_copies, k: int, n: int, accuracy: int, threads: int, rotate_bytes: int):
    """MatMulNBits sessions on `threads` threads, one per weight copy (``ort_copies[c]()`` -> (B, scales, bits)).
    ORT keeps its own prepacked weights (larger than the blocks for some paths): sessions are added until the
    process's resident memory has grown by ``rotate_bytes`` (so the rotation spans that much of ORT's memory)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    sessions = []
    bits = wbytes = 0
    rss0 = resident_bytes()
    for make in ort_copies:
        if len(sessions) >= 2 and resident_bytes() - rss0 >= rotate_bytes:
            break
        b, scales, bits = make()
        wbytes = b.nbytes + scales.nbytes
        node = helper.make_node(
            "MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
            K=k, N=n, bits=bits, block_size=32, accuracy_level=accuracy,
        )  # fmt: skip
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
            [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")],
        )  # fmt: skip
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        )
        data = model.SerializeToString()
        del model, graph, b, scales
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sessions.append(ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]))
    kind = f"int{bits}, block 32, " + ("int8 activations (accuracy_level=4)" if accuracy == 4 else "accuracy_level=0")
    out = []
    for x in xs:
        feed = {"A": np.ascontiguousarray(x, np.float32)}
        res = {}

        def run(c, t, feed=feed, res=res):
            res["y"] = sessions[c].run(None, feed)[0]

        name = f"ORT MatMulNBits int{bits}" + (" acc4" if accuracy == 4 else "")
        label = f"onnxruntime {ort.__version__}, {kind}"
        out.append(
            Impl(name, fmt, wbytes, accuracy == 4, run, lambda res=res: res["y"], len(sessions), label, keep=[sessions])
        )
    return out


# ---- ours (generated through the Python API)
def our_impl(name: str, fmt: str, kernel, x: np.ndarray, args: list, int8_act: bool) -> Impl:
    """A generated kernel: 1 thread = its serial overload, 2 threads = its default overload (own pool).
    ``args[c]``: copy c's weight operand b, or (b, {name: extra input array}) (e.g. group scales)."""
    res = {}
    xx = np.ascontiguousarray(x, np.float32)
    args = [a if isinstance(a, tuple) else (a, {}) for a in args]

    def run(c, t):
        b, extra = args[c]
        res["y"] = kernel(xx, b, parallel=t > 1, **extra)

    b0, extra0 = args[0]
    wbytes = b0.nbytes + sum(v.nbytes for v in extra0.values())
    weights = args
    return Impl(name, fmt, wbytes, int8_act, run, lambda: res["y"], len(weights), label=kernel.spec)
