"""Helpers for tests: compile generated headers with cpp_tests/check.hpp and run the comparison.

Not used by the generator itself. ``check_headers`` puts several kernels in one translation unit (their
runtimes and ISA helpers are shared through include guards), compiles it once and runs every check.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from morello_build.ir.grammar import parse_spec

CHECK_DIR = Path(__file__).resolve().parents[2] / "cpp_tests"  # a source checkout's cpp_tests/


@dataclass
class Checked:
    ok: bool
    output: str


def cxx() -> str:
    return os.environ.get("CXX", "g++")


def check_headers(
    kernels,
    workdir: Path,
    *,
    opt: str = "-O1",
    extra_flags=(),
    env=None,
    check_dir: Path = CHECK_DIR,
    timeout: float = 600,
) -> Checked:
    """kernels: [(spec string, header text, namespace, name)]. Writes, compiles, runs; returns the result."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    lines = ['#include "check.hpp"']
    calls = []
    for i, (spec, text, ns, name) in enumerate(kernels):
        h = workdir / f"kernel{i}.hpp"
        h.write_text(text)
        lines.append(f'#include "{h.name}"')
        cols = ", ".join("true" if lay == "col" else "false" for lay in parse_spec(spec).layouts)
        calls.append(f"  failures += MORELLO_CHECK_KERNEL({ns}, {name}, {cols});")
    lines += ["int main() {", "  int failures = 0;", *calls, "  return failures != 0;", "}", ""]
    src = workdir / "check_main.cpp"
    src.write_text("\n".join(lines))
    exe = workdir / "check_main"
    built = compile_program(src, exe, opt=opt, includes=(check_dir, workdir), extra_flags=extra_flags, timeout=timeout)
    if not built.ok:
        return built
    run_env = dict(os.environ, **(env or {}))
    r = subprocess.run(
        [str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env, timeout=timeout
    )
    return Checked(r.returncode == 0, r.stdout[-20000:])


def compile_program(
    src: Path, exe: Path, *, opt: str = "-O1", includes=(), extra_flags=(), timeout: float = 600
) -> Checked:
    """Compile one test program warning-free (-Wall -Wextra -Werror, C++17, -pthread): the flags every
    generated header must pass."""
    cmd = [
        *cxx().split(),
        "-std=c++17",
        opt,
        "-Wall",
        "-Wextra",
        "-Werror",
        *(f"-I{d}" for d in includes),
        *extra_flags,
        str(src),
        "-o",
        str(exe),
        "-pthread",
    ]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if r.returncode:
        return Checked(False, f"compile failed: {' '.join(cmd)}\n{r.stdout[-20000:]}")
    return Checked(True, r.stdout)
