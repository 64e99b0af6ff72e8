"""``bnfl flwr ...``: Flower's ``flwr`` command with this environment's programs on ``PATH``.

``flwr run`` (Flower 1.42) starts a local SuperLink as ``flower-superlink`` from ``PATH``, and the
SuperLink starts ``flwr-serverapp``/``flwr-simulation`` the same way. From a shell where the
virtual environment is not activated (``.venv/bin/flwr run ...``) these are not found, and
Flower stops with "Unable to launch `flower-superlink` ... No such file or directory".
``bnfl flwr run examples/flower_app ...`` (``.venv/bin/bnfl``, no activation needed) runs the same
``flwr`` command after putting the folder of this Python's programs first on ``PATH``, which the
SuperLink it starts inherits. See docs/flower.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["env_bin_on_path", "register"]


def env_bin_on_path(environ: dict[str, str] | Any = os.environ) -> Path:
    """Put the folder holding this interpreter's console scripts (``flower-superlink`` among them)
    first on ``environ["PATH"]`` (unless it is there already); return the folder."""
    bin_dir = Path(sys.executable).parent
    parts = [p for p in environ.get("PATH", "").split(os.pathsep) if p]
    if str(bin_dir) not in parts:
        environ["PATH"] = os.pathsep.join([str(bin_dir), *parts])
    return bin_dir


def _cli(args: argparse.Namespace) -> int:
    try:  # Flower is an optional dependency (the [flower] extra)
        from flwr.cli.app import app
    except ImportError as err:
        raise ValueError(f"bnfl flwr needs Flower ({err}); install the extra: pip install -e '.[flower]'") from None
    bin_dir = env_bin_on_path()
    if not (bin_dir / "flower-superlink").exists() and not (bin_dir / "flower-superlink.exe").exists():
        raise ValueError(f"{bin_dir} has no flower-superlink: install Flower in this environment "
                         f"(pip install -e '.[flower]') or run flwr from the environment that has it")
    try:
        app(args=list(args.flwr_args), prog_name="bnfl flwr")
    except SystemExit as done:  # typer/click end with SystemExit
        return int(done.code or 0) if not isinstance(done.code, str) else 1
    return 0


def register(subparsers: Any) -> None:
    """Add ``bnfl flwr`` to the ``bnfl`` command line."""
    # prefix_chars="+": every argument, --help included, is flwr's (``bnfl flwr --help`` is flwr's help)
    p = subparsers.add_parser("flwr", help="Flower's flwr command with this environment on PATH (flwr run ... "
                              "from a shell that did not activate it)", add_help=False, prefix_chars="+",
                              description="Run Flower's `flwr` with this environment's programs on PATH.")
    p.add_argument("flwr_args", nargs=argparse.REMAINDER, help="arguments of flwr, e.g. run examples/flower_app")
    p.set_defaults(func=_cli)
