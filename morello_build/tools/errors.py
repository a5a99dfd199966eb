"""How the command-line tools report: user mistakes as one line (``UserError``), warnings on stderr.
Shared by cli.py and the subcommands it registers (vendor.py), which therefore never import cli."""

from __future__ import annotations

import sys


class UserError(Exception):
    """A mistake in the command line or its inputs: reported as one line."""


def warn(message: str) -> None:
    """A one-line warning on stderr (the command goes on)."""
    print(f"morello-build: warning: {message}", file=sys.stderr)
