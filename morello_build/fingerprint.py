"""Fingerprints of the package's own files, derived from its directories (never a hand-written file list).

* ``synthesis_fingerprint()``: every source file of the packages that decide programs (the IR, the search
  and its cost model, the targets and their kernels) and of the DB that stores and replays the decisions.
  The synthesis DB keys its namespaces with it, so an edited synthesizer never reuses stale decisions.
  tests/test_imports.py checks that everything the search imports lies in these packages.
* ``generator_fingerprint()``: every ``.py`` file of the package and every file under ``templates/``:
  all a generated header can depend on. The Python API's header cache is keyed by it, and CMake's
  MorelloBuildConfig.cmake globs the same set as the DEPENDS of its synthesis commands.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent

#: The directories (packages) of PACKAGE_ROOT whose sources decide which program the search picks.
SYNTHESIS_PACKAGES = ("ir", "synth", "target", "db")
TEMPLATES = "templates"


def _sources(root: Path, pattern: str) -> list[Path]:
    return [p for p in root.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts]


def synthesis_files(root: Path = PACKAGE_ROOT) -> list[Path]:
    """The ``.py`` files of SYNTHESIS_PACKAGES (subpackages included), sorted."""
    return sorted(p for package in SYNTHESIS_PACKAGES for p in _sources(root / package, "*.py"))


def generator_files(root: Path = PACKAGE_ROOT) -> list[Path]:
    """Every ``.py`` file of the package and every file under ``templates/`` (any depth), sorted."""
    return sorted(set(_sources(root, "*.py")) | set(_sources(root / TEMPLATES, "*")))


def digest(files: list[Path], root: Path) -> str:
    """sha256 over (relative path, contents) of ``files``: a moved or renamed file changes it too."""
    h = hashlib.sha256()
    for path in files:
        for part in (path.relative_to(root).as_posix().encode(), path.read_bytes()):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.hexdigest()


def synthesis_fingerprint(root: Path = PACKAGE_ROOT) -> str:
    """16 hex digits over synthesis_files(root); computed afresh on each call (the DB opens it once)."""
    return digest(synthesis_files(root), root)[:16]


@lru_cache(maxsize=4)
def generator_fingerprint(root: Path = PACKAGE_ROOT) -> str:
    """64 hex digits over generator_files(root), once per process (a running generator does not change)."""
    return digest(generator_files(root), root)
