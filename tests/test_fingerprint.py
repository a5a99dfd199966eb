"""morello_build.fingerprint: the synthesis fingerprint (DB namespaces) and the generator fingerprint (the
Python API's header cache, CMake's DEPENDS), derived from the package's directories."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from morello_build import fingerprint
from morello_build.fingerprint import PACKAGE_ROOT


@pytest.fixture
def package_copy(tmp_path) -> Path:
    """A copy of the package's sources to edit."""
    root = tmp_path / "morello_build"
    shutil.copytree(PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _relative(files, root) -> set[str]:
    return {p.relative_to(root).as_posix() for p in files}


def test_synthesis_files_are_the_deciding_packages():
    files = _relative(fingerprint.synthesis_files(), PACKAGE_ROOT)
    assert {
        "synth/overwrite.py",
        "synth/cost.py",
        "synth/search.py",
        "ir/spec.py",
        "target/kernels/outer.py",
        "db/encode.py",
    } <= files
    assert any(f.startswith("synth/actions/") for f in files)  # subpackages too
    assert not any(f.startswith(("codegen/", "tools/", "check/")) for f in files)


@pytest.mark.parametrize("edited", ["synth/overwrite.py", "synth/cost.py", "ir/spec.py", "target/kernels/outer.py"])
def test_synthesis_fingerprint_changes_with_the_synthesizer(package_copy, edited):
    before = fingerprint.synthesis_fingerprint(package_copy)
    assert before == fingerprint.synthesis_fingerprint(PACKAGE_ROOT)  # the same files, the same hash
    with open(package_copy / edited, "a") as f:
        f.write("\n# edited\n")
    assert fingerprint.synthesis_fingerprint(package_copy) != before


def test_synthesis_fingerprint_sees_new_files_in_synth(package_copy):
    before = fingerprint.synthesis_fingerprint(package_copy)
    (package_copy / "synth" / "actions" / "fuse.py").write_text("X = 1\n")
    assert fingerprint.synthesis_fingerprint(package_copy) != before


def _generator_digest(root: Path) -> str:
    return fingerprint.digest(fingerprint.generator_files(root), root)  # generator_fingerprint() is cached


def test_codegen_and_tools_change_only_the_generator_fingerprint(package_copy):
    synth = fingerprint.synthesis_fingerprint(package_copy)
    for edited in ("codegen/lower.py", "tools/cli.py", "templates/header.hpp.j2"):
        gen = _generator_digest(package_copy)
        with open(package_copy / edited, "a") as f:
            f.write("\n")
        assert _generator_digest(package_copy) != gen
    assert fingerprint.synthesis_fingerprint(package_copy) == synth
    assert fingerprint.generator_fingerprint(PACKAGE_ROOT) == _generator_digest(PACKAGE_ROOT)


def test_generator_files_cover_sources_and_nested_templates(package_copy):
    nested = package_copy / "templates" / "ops" / "conv.hpp.j2"
    nested.parent.mkdir()
    nested.write_text("// nested\n")
    files = _relative(fingerprint.generator_files(package_copy), package_copy)
    assert {
        "templates/ops/conv.hpp.j2",
        "templates/header.hpp.j2",
        "codegen/lower.py",
        "synth/overwrite.py",
        "fingerprint.py",
    } <= files
    assert not any("__pycache__" in f for f in files)


def test_the_db_uses_the_synthesis_fingerprint(monkeypatch):
    from morello_build.db.sqlite import code_fingerprint

    monkeypatch.delenv("_MORELLO_DB_FINGERPRINT", raising=False)
    assert code_fingerprint() == fingerprint.synthesis_fingerprint()
    monkeypatch.setenv("_MORELLO_DB_FINGERPRINT", "pinned")
    assert code_fingerprint() == "pinned"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
def test_cmake_depends_are_the_generator_files(package_copy, tmp_path):
    """MorelloBuildConfig.cmake's DEPENDS of the synthesis commands glob the generator fingerprint's files."""
    nested = package_copy / "templates" / "ops" / "conv.hpp.j2"
    nested.parent.mkdir()
    nested.write_text("// nested\n")
    (package_copy / "synth" / "__pycache__").mkdir()
    (package_copy / "synth" / "__pycache__" / "stale.py").write_text("")
    script = tmp_path / "list.cmake"
    script.write_text(
        f'include("{PACKAGE_ROOT / "cmake" / "MorelloBuildGeneratorFiles.cmake"}")\n'
        f'_morello_build_generator_files(files "{package_copy.as_posix()}")\n'
        'foreach(f IN LISTS files)\n  message("${f}")\nendforeach()\n'
    )
    out = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = [Path(line) for line in out.stderr.splitlines() if line]
    assert sorted(listed) == fingerprint.generator_files(package_copy)
