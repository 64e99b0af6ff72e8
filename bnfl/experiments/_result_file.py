"""Read one ``result.json`` back into a :class:`~bnfl.experiments.core.Result`, or fail in one
line that names the file, the field and what to do (:mod:`bnfl._input_checks`)."""

from __future__ import annotations

import os
from pathlib import Path

from bnfl._input_checks import check_result, read_json
from bnfl.experiments.core import Result

__all__ = ["read_result"]


def read_result(path: str | os.PathLike[str]) -> Result:
    """The :class:`Result` stored in ``path`` (``<folder>/<id>/result.json``).

    Raises
    ------
    ValueError
        The file is not JSON, is not a result's object, or a field has the wrong type; the message
        names the file and says to rerun the entry (``bnfl run <id>``).
    """
    p = Path(path)
    fix = f"remove it or rerun that entry (bnfl run {p.parent.name})"
    data = check_result(read_json(p, what="result", fix=fix), p, fix)
    try:
        return Result.from_dict(data)
    except (TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{p}: not a readable result ({' '.join(str(err).split())}); {fix}") from None
