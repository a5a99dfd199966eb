"""User-facing entry points: the CLI, vendoring, the Python APIs and the CMake package directory."""
