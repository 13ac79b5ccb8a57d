"""The ``dx1`` command: one entry point, a subcommand per tool.

:mod:`.app` builds the parser from each tool's ``add_parser``; :mod:`.args` holds the argument types
every command uses.  This module stays small: the tools import :mod:`.args`, so importing the package
must not import them back.
"""

from __future__ import annotations

import argparse

from .operands import gemm_problem

__all__ = ["build_parser", "gemm_problem", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``dx1`` with every subcommand (see :func:`.app.build_parser`)."""
    from .app import build_parser as build

    return build()


def main(argv: list[str] | None = None) -> int:
    """Run ``dx1 argv`` (``sys.argv[1:]`` by default) and return its exit status.

    A bad argument returns 2 after argparse printed the usage and why, ``--help`` 0: this never raises
    ``SystemExit``, so a caller in the same process gets the status as a command's own refusals give it.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return args.func(args)
