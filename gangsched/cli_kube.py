"""The cluster-facing subcommands (``run``, ``dev-cluster``), imported lazily."""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    return None
