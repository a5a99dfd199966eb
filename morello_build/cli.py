"""Command-line interface (placeholder until the synthesizer lands)."""
import sys


def main(argv=None) -> int:
    print("morello-build: not implemented yet", file=sys.stderr)
    return 2
