"""The ``fanloop`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fanloop",
        description="Run an agent: stream its answer, fan its tool calls out, ask before "
        "dangerous tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="an offline tour of fanloop (no API key needed)")
    demo.add_argument("--fast", action="store_true", help="skip the pauses between steps")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fanloop`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(fast=args.fast)
    parser.print_help(sys.stderr)
    return 2
