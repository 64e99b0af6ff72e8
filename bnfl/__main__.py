"""``python -m bnfl`` runs the command line.

``python -m`` puts the current folder first on ``sys.path``; the ``bnfl`` script does not. It is
taken out here, so that ``bnfl``, ``python -m bnfl`` and ``torchrun ... -m bnfl`` import a config's
plug-ins (``method = "mypkg.algos:MyFix"``) from the same places: installed packages and the
folders on ``PYTHONPATH`` (docs/own-fix.md). A module in whatever folder a command happens to run
from is never imported by accident; ``PYTHONPATH=$PWD`` names that folder on purpose.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):  # PYTHONPATH's own entries come later and stay
    del sys.path[0]

from bnfl.cli import main  # noqa: E402 - after the path is settled

raise SystemExit(main())
