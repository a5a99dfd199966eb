"""Call generated kernels from Python: synthesize, build a small pybind11 extension, cache it, wrap it.

    >>> import numpy as np, ml_dtypes, morello_build
    >>> f = morello_build.compile("matmul 1x2048x16384 a=f32 b=bf16:col c=f32")
    >>> x = np.random.rand(1, 2048).astype(np.float32)
    >>> w = np.random.rand(16384, 2048).astype(ml_dtypes.bfloat16)   # b=bf16:col is stored as N rows of K
    >>> y = f(x, w)                                                   # (1, 16384) float32

An epilogue's terms are keyword arguments named as in the header (``f(x, w, bias=..., residual=...)``,
``scale=`` a float): the wrapper reads the kernel's parameters from the header's table (``NAME_param``) and
calls its type-erased ``NAME_call``, so nothing here depends on the op or its parameter list.

Arrays are passed **as stored**: an operand with layout ``row`` is ``(rows, cols)``, one with layout ``col`` is
``(cols, rows)`` (so B ``K×N`` with ``b=...:col`` is an ``(N, K)`` array); with ``batch=B`` every operand gets a
leading ``B`` dim. f32 is ``numpy.float32``; bf16 is ``ml_dtypes.bfloat16`` (or ``numpy.uint16`` holding the raw
bits). Nothing is converted silently: a wrong shape, dtype or a non-C-contiguous array raises an error naming
the argument.

How the build works (all steps cached under ``$MORELLO_CACHE_DIR``, default ``~/.cache/morello-build/pyapi``):

* the header is synthesized once per spec / ISA / generator version (``headers/``; skipped when ``db=`` is
  given: the synthesis database is then the cache);
* one generic pybind11 binding object (``binding-<hash>.o``), compiled once per compiler / flags / Python /
  pybind11 — the only part that parses pybind11 headers (~4 s);
* one object for the kernels of a call (``kernels-<hash>.o``; the headers are ``kernel-<hash>.hpp``), keyed by
  the header bytes + compiler + flags; it exports plain C table entries (the header's ``NAME_param`` and
  type-erased ``NAME_call``/``NAME_reference_call``, ``NAME_info``) and includes no pybind11;
* a tiny table object and a link step give the extension ``ext/_mb_<hash>-<hash><EXT_SUFFIX>``.

The C++ sources are the templates ``templates/pyapi_*.j2`` (entry struct, kernel exports, pybind11 module,
table); the Python wrapper of one kernel is ``tools/pykernel.py``.

Nothing is ever deleted: remove the cache directory to reclaim the space (it is safe to do at any time
that no build is running).

Every file is written to a temporary name in its final directory and moved into place with ``os.replace``, so
concurrent processes never see a partial file (at worst two of them build the same thing). All extensions share
one generic binding object; each is loaded under its own module name ``_mb_<hash>`` (pybind11 caches modules
by name), through a one-line ``PyInit__mb_<hash>`` trampoline in the table object.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Sequence

from morello_build.codegen import render
from morello_build.fingerprint import generator_fingerprint
from morello_build.tools.files import atomic_output, write_if_changed
from morello_build.tools.pykernel import Kernel

__all__ = ["compile_kernel", "compile_kernels", "load_header", "Kernel", "BuildError", "cache_dir", "stats"]

MODULE_NAME = "_morello_pyapi"
CXXFLAGS = ("-O2", "-std=c++17", "-fPIC", "-fvisibility=hidden", "-pthread")
LDFLAGS = ("-shared", "-pthread")

#: Counters of what this process did, for tests and curiosity: compiler runs ("compile", "link"),
#: artifacts found on disk ("disk_hits"), extensions found already loaded ("memory_hits"), searches run
#: ("synthesized") and headers found in the cache instead ("header_hits").
stats = {"compile": 0, "link": 0, "disk_hits": 0, "memory_hits": 0, "synthesized": 0, "header_hits": 0}


class BuildError(RuntimeError):
    """The C++ compiler failed on a generated kernel or the binding; the message has the command and output."""


# -- cache, compiler ---------------------------------------------------------------------------------
def cache_dir() -> Path:
    """``$MORELLO_CACHE_DIR``, else ``$XDG_CACHE_HOME/morello-build/pyapi`` (``~/.cache/...``)."""
    env = os.environ.get("MORELLO_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "morello-build" / "pyapi"


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CXX") or "g++")


@lru_cache(maxsize=8)
def _compiler_identity(cxx: tuple[str, ...]) -> str:
    """Resolved path + ``--version`` output: part of every cache key (a compiler upgrade rebuilds)."""
    path = shutil.which(cxx[0])
    if path is None:
        raise BuildError(f"C++ compiler '{cxx[0]}' not found (set CXX, or install g++)")
    out = subprocess.run([*cxx, "--version"], capture_output=True, text=True).stdout
    return f"{os.path.realpath(path)} {' '.join(cxx[1:])}\n{out}"


def _include_flags() -> list[str]:
    import pybind11

    paths = sysconfig.get_paths()
    dirs = [pybind11.get_include(), paths["include"], paths.get("platinclude", paths["include"])]
    out: list[str] = []
    for d in dirs:
        if f"-I{d}" not in out:
            out.append(f"-I{d}")
    return out


def _run_compiler(cmd: list[str], kind: str) -> None:
    """Run one compiler command (the single hook through which every compile and link goes)."""
    stats[kind] += 1
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).splitlines()
        head = "\n".join(lines[:40]) + (f"\n... ({len(lines) - 40} more lines)" if len(lines) > 40 else "")
        raise BuildError(f"{kind} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{head}")


def _produce(target: Path, cmd_for: Callable[[str], list[str]], kind: str) -> None:
    """Build ``target`` unless it exists: the command writes a temp file that is renamed into place."""
    if target.exists():
        stats["disk_hits"] += 1
        return
    with atomic_output(target) as tmp:
        _run_compiler(cmd_for(tmp), kind)


@dataclass(frozen=True)
class _Entry:
    header: str
    name: str
    namespace: str


_lock = threading.Lock()
_loaded: dict[str, object] = {}  # extension path -> module


@dataclass(frozen=True)
class _Toolchain:
    """The compiler of this process and the object directory: compiles sources into cached objects."""

    cxx: tuple[str, ...]
    ident: str  # _compiler_identity(cxx)
    objs: Path
    entry_h: str  # mb_entry.h, included by every source

    def compile(self, stem: str, source: str, *key: str, flags: Sequence[str] = ()) -> Path:
        """``objs/<stem>-<hash>.o`` from ``source``, hashed with all it depends on (compiler, flags, ``key``)."""
        digest = _sha(source, self.entry_h, self.ident, *CXXFLAGS, *flags, *key)[:24]
        src = self.objs / f"{stem}-{digest}.cpp"
        write_if_changed(src, source)
        obj = src.with_suffix(".o")
        cmd = [*self.cxx, *CXXFLAGS, f"-I{self.objs}", *flags, "-c", str(src)]
        _produce(obj, lambda out: [*cmd, "-o", out], "compile")
        return obj


def _toolchain() -> _Toolchain:
    cxx = tuple(_compiler())
    objs = cache_dir() / "objs"
    entry_h = render("pyapi_entry.h.j2")
    write_if_changed(objs / "mb_entry.h", entry_h)
    return _Toolchain(cxx, _compiler_identity(cxx), objs, entry_h)


def _binding_object(tc: _Toolchain) -> Path:
    """The generic pybind11 module: the only source that parses pybind11 headers (~4 s), built once."""
    import pybind11

    source = render("pyapi_module.cpp.j2", module_name=MODULE_NAME)
    return tc.compile("binding", source, pybind11.__version__, sys.version, flags=_include_flags())


def _kernels_object(tc: _Toolchain, entries: Sequence[_Entry]) -> tuple[Path, list[Path]]:
    """All kernels of one call in one translation unit: the shared runtime part of the headers is parsed
    once (compile time is dominated by headers, not by the kernels). Returns (object, header paths)."""
    headers = []
    for e in entries:
        headers.append(tc.objs / f"kernel-{_sha(e.header)[:24]}.hpp")  # named by content: in the source's hash
        write_if_changed(headers[-1], e.header)
    kernels = [{"header": h.name, "ns": e.namespace, "name": e.name} for h, e in zip(headers, entries)]
    return tc.compile("kernels", render("pyapi_exports.cpp.j2", kernels=kernels)), headers


def _load(ext: Path, modname: str):
    module = _loaded.get(str(ext))
    if module is not None:
        stats["memory_hits"] += 1
        return module
    loader = importlib.machinery.ExtensionFileLoader(modname, str(ext))
    spec = importlib.util.spec_from_file_location(modname, str(ext), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    _loaded[str(ext)] = module
    return module


def _build_extension(entries: Sequence[_Entry]) -> tuple[object, list[Path]]:
    """Build (or find) the extension holding ``entries``; returns (module, header paths)."""
    names = [f"{e.namespace}::{e.name}" for e in entries]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise ValueError(f"two kernels named {twice} in one extension")
    with _lock:
        tc = _toolchain()
        binding_o = _binding_object(tc)
        kernels_o, headers = _kernels_object(tc, entries)
        # pybind11 caches modules by name: each extension gets its own (see templates/pyapi_table.cpp.j2).
        modname = "_mb_" + _sha(binding_o.name, kernels_o.name)[:24]
        table = render("pyapi_table.cpp.j2", count=len(entries), modname=modname, binding=MODULE_NAME)
        link_inputs = [binding_o, kernels_o, tc.compile("table", table)]
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        ekey = _sha(*(p.name for p in link_inputs), tc.ident, *LDFLAGS)[:16]
        ext = cache_dir() / "ext" / f"{modname}-{ekey}{suffix}"
        _produce(ext, lambda out: [*tc.cxx, *LDFLAGS, *map(str, link_inputs), "-o", out], "link")
        return _load(ext, modname), headers


# -- public entry points ------------------------------------------------------------------------------
def _canonical_spec(spec) -> str:
    from morello_build.ir.grammar import format_spec, parse_spec

    return format_spec(parse_spec(spec) if isinstance(spec, str) else spec)


@lru_cache(maxsize=256)
def _synthesize(
    spec: str, isa: str, threads: int | None, db: str | None, name: str, namespace: str, profile=None, tune: int = 0
) -> str:
    """Synthesized header text. Without ``db`` (and untuned), headers are also cached on disk under
    ``<cache>/headers``, keyed by spec, resolved ISA, thread count and cost profile, name, namespace and the
    generator fingerprint, so a spec compiled before costs no search at all (the search is deterministic; a
    measurement is not: tuned headers are kept by the DB's tuned table instead)."""
    from morello_build.target import profiles, resolve_threads
    from morello_build.tools.api import resolve_isa, synthesize_header

    kw = dict(isa=isa, threads=threads, name=name, namespace=namespace, profile=profile)
    if db is not None or tune:
        return synthesize_header(spec, db=db, tune=tune, **kw)
    resolved = f"{resolve_isa(isa)}@{resolve_threads(threads)}"
    resolved += "" if profiles.resolve(profile) is profiles.BUILTIN else f"@{profiles.resolve(profile)!r}"
    path = cache_dir() / "headers" / f"{_sha(spec, resolved, name, namespace, generator_fingerprint())[:32]}.hpp"
    try:
        text = path.read_text()
        stats["header_hits"] += 1
        return text
    except OSError:
        pass
    text = synthesize_header(spec, **kw)
    stats["synthesized"] += 1
    write_if_changed(path, text)
    return text


def _headers_from(header_fn, specs, isa, threads, db, names, namespaces, profile=None, tune=0):
    from morello_build.tools.tune import check_k

    tune = check_k(tune)
    out = []
    for spec, name, ns in zip(specs, names, namespaces):
        if header_fn is None:
            text = _synthesize(spec, isa, threads, None if db is None else os.fspath(db), name, ns, profile, tune)
        else:
            extra = {} if threads is None else {"threads": threads}
            extra.update({} if profile is None else {"profile": profile})
            if tune:
                extra["tune"] = tune
            text = header_fn(spec, isa=isa, name=name, namespace=ns, db=db, **extra)
        out.append(_Entry(text, name, ns))
    return out


def _wrap(entries: Sequence[_Entry]) -> list[Kernel]:
    module, headers = _build_extension(entries)
    ext = Path(module.__file__)
    return [Kernel(module, i, h, ext) for i, h in enumerate(headers)]


def compile_kernel(
    spec,
    isa: str = "native",
    db=None,
    name: str | None = None,
    *,
    threads: int | None = None,
    header_fn=None,
    profile=None,
    tune: int = 0,
) -> Kernel:
    """Synthesize ``spec``, build it into a pybind11 extension (cached) and return the callable ``Kernel``.

    ``isa``, ``threads`` (default: this machine's CPUs), ``db`` and the cost ``profile`` (a profile file
    from ``morello-build calibrate``, a name, or None: $MORELLO_PROFILE, else the host's) are passed to the synthesizer
    (``morello_build.tools.api.synthesize_header``); ``name`` is
    the C++ function name in the header (default ``kernel``, namespace ``morello``). ``header_fn`` replaces
    the synthesizer (same signature as ``synthesize_header``), e.g. to wrap hand-written headers. ``tune`` K
    > 0: the fastest of the K best candidates measured on this host (``synth --tune``; stored in ``db``).
    """
    spec = _canonical_spec(spec)
    entries = _headers_from(header_fn, [spec], isa, threads, db, [name or "kernel"], ["morello"], profile, tune)
    return _wrap(entries)[0]


def compile_kernels(
    specs: Iterable,
    isa: str = "native",
    db=None,
    *,
    threads: int | None = None,
    header_fn=None,
    profile=None,
    tune: int = 0,
) -> list[Kernel]:
    """Several kernels in **one** extension, compiled as one translation unit (the headers' shared runtime is
    parsed once: much faster than a ``compile_kernel`` per spec when many kernels are new).

    Each kernel gets its own namespace (``morello_k<i>``) and name ``kernel`` so headers cannot clash.
    """
    specs = [_canonical_spec(s) for s in specs]
    names = ["kernel"] * len(specs)
    namespaces = [f"morello_k{i}" for i in range(len(specs))]
    return _wrap(_headers_from(header_fn, specs, isa, threads, db, names, namespaces, profile, tune))


def load_header(header: str | os.PathLike, *, name: str = "kernel", namespace: str = "morello") -> Kernel:
    """Wrap an already generated header (its text, or a path to it), e.g. one produced by CMake or
    ``morello-build synth``."""
    text = header
    if isinstance(header, os.PathLike) or (isinstance(header, str) and "\n" not in header and len(header) < 4096):
        text = Path(header).read_text()
    return _wrap([_Entry(text, name, namespace)])[0]
