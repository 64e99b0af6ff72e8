"""What every paper's ``setups`` module declares the same way, declared once.

A paper's setups module (``bnfl.experiments.papers.<paper>.setups``) names the methods it compares
by the paper's own row names, builds run specs from parts, says how many seeds each profile runs
and derives the smoke profile from the quick one. The pieces that do not depend on the paper live
here; the paper keeps only what is its own (its row names, method options, bases, smoke cut)::

    METHODS = {"FedAvg": "fedavg+bn", "FedBN": "fedbn"}   # paper row -> bnfl method id
    SEEDS = seeds(quick=3, paper=5)
    label("fedavg+bn", METHODS)                            # -> "FedAvg"
    spec(Q_BASE, {"partition": IID}, variant("fedbn"))     # parts merged in order
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bnfl.experiments.augmentation import declare
from bnfl.experiments.core import deep_merge
from bnfl.experiments.curves import accuracy_row, final_stats, fmt_mean_std, merge_specs, noise
from bnfl.methods import METHODS as ALL_METHODS
from bnfl.models.inits import AUTHORS_INIT

__all__ = ["acc_noise", "beside_printed", "config_deviations", "label", "method_row", "profile_set", "seeds",
           "smoke_on_bases", "spec", "with_data", "with_init"]


def spec(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """A run spec from ``parts`` deep-merged in order (:func:`bnfl.experiments.curves.merge_specs`)."""
    return merge_specs({}, *parts)


def config_deviations(config: Mapping[str, Any]) -> list[str]:
    """The ``"deviations"`` of an entry's ``config`` (where its profile departs from the paper), as the
    result's list; ``[]`` when it names none."""
    return list(config.get("deviations", []))


def with_data(base: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with its ``data`` table replaced, not merged (another data set takes other options).

    Parameters
    ----------
    base : mapping
        A run spec.
    data : mapping
        The new ``data`` table.
    """
    return {**{k: v for k, v in base.items() if k != "data"}, "data": dict(data)}


def with_init(base: Mapping[str, Any], init: str) -> dict[str, Any]:
    """``base`` with ``model.init`` set to ``init``, written so that equal runs get equal specs (hence
    share a cache entry): ``"pytorch"`` removes the key (the models' default), and so does
    ``"authors"`` where the model's own initialisation already is its authors' (ResNet-20,
    :data:`bnfl.models.inits.AUTHORS_INIT`).

    Parameters
    ----------
    base : mapping
        A run spec with a ``model`` table.
    init : str
        ``"pytorch"``, ``"authors"`` or a scheme :mod:`bnfl.models.inits` knows (``"he_normal"``).
    """
    out = dict(base)
    model = {k: v for k, v in dict(base.get("model", {})).items() if k != "init"}
    same = init == "authors" and AUTHORS_INIT.get(str(model.get("name")), ("", "", ""))[2] == "pytorch"
    if init != "pytorch" and not same:
        model["init"] = init
    out["model"] = model
    return out


def seeds(*, quick: int, paper: int, smoke: int = 1) -> dict[str, int]:
    """An entry's ``seeds=``: how many seeds each profile runs (smoke runs one unless told)."""
    return {"smoke": int(smoke), "quick": int(quick), "paper": int(paper)}


def label(key: str, rows: Mapping[str, str] | None = None) -> str:
    """The name a figure shows for method ``key``: the paper's row name when ``rows`` (paper row
    name -> bnfl method id) maps one to it, else bnfl's label (:data:`bnfl.methods.METHODS`), else
    ``key`` as given."""
    for name, mid in (rows or {}).items():
        if mid == key:
            return name
    return ALL_METHODS[key].label if key in ALL_METHODS else key


def method_row(setting: str, key: str, runs: Sequence[Mapping[str, Any]], *,
               rows: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A result row of method ``key`` in ``setting`` (:func:`bnfl.experiments.curves.accuracy_row`
    under :func:`label`)."""
    return accuracy_row(setting, label(key, rows), runs, **extra)


def beside_printed(table: Sequence[Sequence[str]], keys: Sequence[str], columns: Sequence[str],
                   runs: Any) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """A paper's accuracy table with ours beside each printed cell, and our means per column.

    Parameters
    ----------
    table : sequence of rows
        The paper's rows as printed: the scheme's name, then one printed cell per column.
    keys : sequence of str
        The bnfl method id of each row.
    columns : sequence of str
        The name of each printed column.
    runs : callable
        ``runs(key, j)``: the runs (one per seed) of method ``key`` in column ``j``.

    Returns
    -------
    rows : list of dict
        ``{"FL scheme": name, "<column> ours": "mean ± std", "<column> paper": printed, ...}`` per row.
    bars : dict
        ``{"<column> ours": [our mean per row]}``: the numbers a bar chart of the table draws.
    """
    rows, bars = [], {f"{col} ours": [] for col in columns}
    for (name, *printed), key in zip(table, keys, strict=True):
        row: dict[str, Any] = {"FL scheme": name}
        for j, (col, cell) in enumerate(zip(columns, printed, strict=True)):
            mean, std = final_stats(runs(key, j))
            row[f"{col} ours"], row[f"{col} paper"] = fmt_mean_std(mean, std), cell
            bars[f"{col} ours"].append(mean)
        rows.append(row)
    return rows, bars


def acc_noise(*settings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``noise=`` and ``noise_label=`` for a claim comparing the final accuracies of ``settings``
    (each a list of runs over seeds): the seed std or one test sample, whichever is larger
    (:func:`bnfl.experiments.curves.noise`)."""
    value, text = noise(*settings)
    return {"noise": value, "noise_label": text}


def smoke_on_bases(quick: Mapping[str, Any], smoke: Mapping[str, Any]) -> dict[str, Any]:
    """``quick`` with ``smoke`` merged into every ``base*`` key (the run specs an entry builds on)."""
    return deep_merge(quick, {k: smoke for k in quick if k.startswith("base")})


def profile_set(smoke: Mapping[str, Any], quick: Mapping[str, Any], paper: Mapping[str, Any], *, note: str,
                paper_deviations: Sequence[str] = (), declare_quick: bool = True) -> dict[str, dict[str, Any]]:
    """An entry's ``configs=``: ``{"smoke", "quick", "paper"}``.

    ``smoke`` is the finished smoke config; its deviations become ``[note]``. ``paper`` keeps its own
    deviations, or gets ``paper_deviations``. ``quick`` names the augmentation the paper profile
    uses and it does not (:func:`bnfl.experiments.augmentation.declare`) unless ``declare_quick``
    is False.
    """
    sm = dict(smoke)
    sm["deviations"] = [note]
    paper = dict(paper)
    paper.setdefault("deviations", list(paper_deviations))
    return {"smoke": sm, "quick": declare(quick, paper) if declare_quick else dict(quick), "paper": paper}
