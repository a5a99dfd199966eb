"""Where CMake finds morello-build: ``morello-build --cmakedir`` and the configure-time query.

Two copies of ``MorelloBuildConfig.cmake`` exist after ``pip install``:

* ``<prefix>/share/cmake/MorelloBuild/`` (the wheel's data dir): found by ``find_package(MorelloBuild)``
  with no hints in an activated venv (CMake searches ``<prefix>/share/cmake/<name>*/`` for every
  ``<prefix>/bin`` on PATH). It knows its prefix, so it runs ``<prefix>/bin/python``: the interpreter
  the package was installed into, even when the venv is not activated.
* ``morello_build/cmake/`` in the package itself: the real implementation (the functions, the test and
  benchmark templates). The data-dir config asks Python where it is, so editable installs work too.

``cmake_dir()`` (what ``--cmakedir`` prints) prefers the data-dir copy of this installation, because
it pins the interpreter; it falls back to the package directory (a source checkout on PYTHONPATH).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

CONFIG = "MorelloBuildConfig.cmake"
_DATA_SUBDIR = ("share", "cmake", "MorelloBuild")


def package_cmake_dir() -> str:
    """The package's own CMake directory: ``.../morello_build/cmake`` (source tree for editable installs)."""
    return str(Path(__file__).resolve().parents[1] / "cmake")


def _installed_data_dir() -> Path | None:
    """``<prefix>/share/cmake/MorelloBuild`` installed with this distribution (any install scheme)."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("morello-build")
    except (ImportError, PackageNotFoundError):
        dist = None
    if dist is not None:
        for f in dist.files or ():
            if f.name == CONFIG and tuple(f.parts[-4:-1]) == _DATA_SUBDIR:
                path = Path(dist.locate_file(f)).resolve()
                if path.is_file():
                    return path.parent
    for base in (sys.prefix, sysconfig.get_path("data")):
        path = Path(base, *_DATA_SUBDIR, CONFIG)
        if path.is_file():
            return path.parent
    return None


def cmake_dir() -> str:
    """The directory to pass as ``-DMorelloBuild_DIR=`` (see the module docstring)."""
    data = _installed_data_dir()
    return str(data) if data is not None else package_cmake_dir()


def cmake_query() -> str:
    """What MorelloBuildConfig.cmake asks the interpreter at configure time, as ``key=value`` lines."""
    from morello_build import __version__
    from morello_build.target import ISAS

    pkg = Path(__file__).resolve().parents[1]
    lines = {
        "package_dir": pkg.as_posix(),
        "cmake_dir": Path(package_cmake_dir()).as_posix(),
        "version": __version__,
        "isas": ",".join(ISAS),
        "executable": Path(sys.executable).as_posix(),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


if __name__ == "__main__":  # python -m morello_build.tools.cmake_dir: the configure-time query
    sys.stdout.write(cmake_query())
