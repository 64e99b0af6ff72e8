"""Tables 4-8 (App. D.2): the client settings of the five digits experiments, checked against the
registered entries that run them and the partitions bnfl builds for them.

For each table: the printed setting (clients per dataset, samples per client, local epochs), the
paper profile's configuration of the entry that runs the experiment, and the quick profile's
partition counted on the Q-DOM data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnfl import experiments as E
from bnfl.data import partition as P
from bnfl.experiments.claims import at_least
from bnfl.experiments.core import Context, Result
from bnfl.experiments.papers.fedbn import numbers as N
from bnfl.experiments.registry import entry, plotter, same_for_all_profiles
from bnfl.experiments.training import load_data
from bnfl.plots import new_figure

#: table -> (entry that runs it, how its E / sizes / clients are read from the config).
_WHERE: dict[str, tuple[str, str]] = {
    "tab4": ("fedbn-fig3", "fixed"),
    "tab5": ("fedbn-fig4", "E"),
    "tab6": ("fedbn-fig4", "fractions"),
    "tab7": ("fedbn-fig4", "n"),
    "tab8": ("fedbn-fig5", "fixed"),
}


def _setting(config: dict[str, Any], knob: str) -> dict[str, Any]:
    """(clients per dataset, samples per client, local epochs) stated by an entry's config."""
    base = config["base"]
    data = base["data"]
    frac = float(data.get("fraction", 0.1))
    if data["name"] == "digit_domains":
        per = data.get("train_per_domain") or 287
        samples = [int(per)]
    else:
        samples = [int(frac * N.DIGITS_TRAIN)]
    clients, epochs = [1], [int(base["train"]["local_steps"])]
    if knob == "E":
        epochs = [int(e) for e in config["E"]]
    elif knob == "fractions":  # quick: of the 287-digit split; paper: of the 7438 digits (Table 14)
        full = int(data.get("train_per_domain") or 287) if data["name"] == "digit_domains" else N.DIGITS_TRAIN
        samples = [int(float(f) * full) for f in config["fractions"]]
    elif knob == "n":  # each domain in `shards` shards (paper: 10 x 743 of the 7438 digits)
        clients = [int(n) for n in config["n"]]
        full = int(data.get("train_per_domain") or 287) if data["name"] == "digit_domains" else N.DIGITS_TRAIN
        samples = [full // int(config["shards"])]
    return {"clients": clients, "samples": samples, "epochs": epochs}


def _quick_partition(config: dict[str, Any], knob: str) -> dict[str, Any]:
    """Clients per domain and samples per client of the quick partitions, counted on the data."""
    split = load_data(config["base"]["data"])
    dom = split.domain_train.numpy()
    if knob == "n":
        counts = [len(P.by_domain(dom, shards=int(config["shards"]), clients_per_domain=int(n))) // len(split.domains)
                  for n in config["n"]]
        size = int(np.median([len(c) for c in P.by_domain(dom, shards=int(config["shards"]))]))
        return {"clients": counts, "samples": [size]}
    parts = P.by_domain(dom)
    return {"clients": [len(parts) // len(split.domains)], "samples": sorted({len(p) for p in parts})}


def _fmt(v: list[Any]) -> str:
    return ", ".join(str(x) for x in v)


def _compute(table: str, profile: str) -> dict[str, Any]:
    _, what, clients, samples, epochs = next(s for s in N.SETTINGS if s[0] == table)
    eid, knob = _WHERE[table]
    paper = _setting(E.get(eid).configs["paper"], knob)
    quick_cfg = E.get(eid).configs["quick"]
    quick = {**_setting(quick_cfg, knob), **_quick_partition(quick_cfg, knob)}
    printed_samples = {"tab6": [int(p / 100 * N.DIGITS_TRAIN) for p in N.TABLE14_FRACTIONS],
                       "tab7": [N.DIGITS_DEFAULT_SAMPLES]}.get(table, [int(samples)] if samples.isdigit() else [])
    printed_clients = list(N.HETEROGENEITY_CLIENTS) if table == "tab7" else [int(clients)]
    printed_epochs = [int(e) for e in epochs.split(",")]
    ok = {"clients": paper["clients"] == printed_clients,
          "samples": paper["samples"] == printed_samples,
          "epochs": paper["epochs"] == printed_epochs}
    rows = [{"setting": k, "paper (printed)": p, "paper profile of " + eid: _fmt(paper[k]), "quick (counted)": _fmt(quick.get(k, paper[k]))}
            for k, p in (("clients", clients), ("samples", samples), ("epochs", epochs))]
    claims = [at_least(f"paper-{k}", f"the paper profile of {eid} states the printed {k} per client / dataset",
                       float(v), 1.0, detail=f"config {_fmt(paper[k])} vs printed "
                       f"{_fmt({'clients': printed_clients, 'samples': printed_samples, 'epochs': printed_epochs}[k])}")
              for k, v in ok.items()]
    return {"rows": rows, "paper": [{"experiment": what, "clients per dataset": clients, "samples per client": samples,
                                     "local epochs": epochs}], "claims": claims,
            "series": {"table": table, "entry": eid, "paper": paper, "quick": quick},
            "notes": [f"Samples per client: a fraction of {N.DIGITS_TRAIN} (the paper truncates every digits data set to "
                      "7438 training samples); the quick column counts the Q-DOM partition (287 training digits per "
                      "domain at 100%)."]}


def _plot(result: Result) -> Any:
    rows = result.rows
    cols = list(rows[0])
    fig, ax = new_figure(1, 1, width=7.6, height=1.6)
    ax.axis("off")
    t = ax.table(cellText=[[str(r[c]) for c in cols] for r in rows], colLabels=cols, loc="center", cellLoc="left")
    t.auto_set_font_size(False)
    t.set_fontsize(7)
    ax.set_title(f"FedBN {result.id.split('-')[1].replace('tab', 'Table ')}: {result.paper[0]['experiment']}")
    return fig


def _register(table: str, title: str) -> None:
    eid = f"fedbn-{table}"

    def compute(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
        return _compute(table, ctx.profile)

    compute.__name__ = f"compute_{table}"
    entry(eid, title=title,
          summary=(f"Table {table[3:]} (App. D.2): clients per dataset, samples per client and local epochs of "
                   f"experiment {next(s[1] for s in N.SETTINGS if s[0] == table)}."),
          look_for=(f"The printed setting beside the paper profile of {_WHERE[table][0]} (the entry that runs it) "
                    "and the quick partition as built."),
          kind="exact", configs=same_for_all_profiles({"table": table}))(compute)
    plotter(eid)(_plot)


for _t, _title in (("tab4", "Client settings: convergence rate (App. D.2)"),
                   ("tab5", "Client settings: local update epochs (App. D.2)"),
                   ("tab6", "Client settings: local dataset size (App. D.2)"),
                   ("tab7", "Client settings: statistical heterogeneity (App. D.2)"),
                   ("tab8", "Client settings: comparison with the state of the art (App. D.2)")):
    _register(_t, _title)
