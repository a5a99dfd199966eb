"""The README's samples run as shown, so that they cannot drift from the code.

- ```` ```console ```` blocks: each line starting with ``$ `` is a command (run by bash in an empty
  directory, with this interpreter's scripts first on PATH), the lines up to the next command its output
  (stdout and stderr together). The output must match line by line, except the seconds of ``explain``'s
  first line; a last line ``...`` means the output goes on. Specs visited and costs are deterministic for a
  given synthesizer, so they are compared exactly (and depend on the synthesizer's thread count, if it has
  one: a sample that depends on it should pass it explicitly).
- the ```` ```cmake ```` block that declares a project: pasted alone into a CMakeLists.txt (with an empty
  ``main.cpp``) and configured, with the package found as tests/test_cmake_args.py finds it.
- ```` ```python ```` blocks, except those that build with the Python API (``compile(``: test_pyapi's job).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, flags=re.M | re.S)


def _console_samples() -> list[tuple[str, list[str]]]:
    samples = []
    for block in _blocks("console"):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *output = chunk.rstrip("\n").split("\n")
            samples.append((command, output))
    return samples


def _normalized(line: str) -> str:
    return re.sub(r"visited, \d+\.\d+ s\)", "visited, N s)", line)


def test_the_readme_has_samples():
    assert len(_console_samples()) >= 3 and _blocks("cmake") and _blocks("python")


@pytest.mark.parametrize("command, expected", _console_samples(), ids=lambda x: x if isinstance(x, str) else "")
def test_console_sample(tmp_path, command, expected):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = [_normalized(line) for line in r.stdout.splitlines()]
    want = [_normalized(line) for line in expected]
    if want and want[-1] == "...":
        want = want[:-1]
        out = out[: len(want)]
    assert out == want, r.stdout


def test_cmake_block_configures_alone(tmp_path):
    from morello_build.tools.cmake_dir import package_cmake_dir

    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed")
    (block,) = [b for b in _blocks("cmake") if "project(" in b]
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(block)
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_GENERATOR", "MorelloBuild_DIR")}
    cmd = ["cmake", "-S", str(src), "-B", str(tmp_path / "build"), f"-DMorelloBuild_DIR={package_cmake_dir()}"]
    cmd.append(f"-DMorelloBuild_PYTHON={sys.executable}")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    if p.returncode and "needs Google Benchmark" in p.stdout:
        pytest.skip("Google Benchmark is not installed (scripts/setup.sh installs it)")
    assert p.returncode == 0 and "Generating done" in p.stdout, p.stdout
    assert "CMake Warning" not in p.stdout, p.stdout


@pytest.mark.parametrize("index", [i for i, b in enumerate(_blocks("python")) if "compile(" not in b])
def test_python_block_runs(tmp_path, index):
    code = _blocks("python")[index]
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
