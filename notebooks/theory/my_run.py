# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # My own run: its curves, a comparison, and a score on new data
#
# `bnfl train --out FOLDER` leaves a run folder: `history.json` (one row per round, and a meta
# that says what ran and where), `history.csv` and the checkpoint. This walkthrough does from
# Python what `bnfl plot` and `bnfl evaluate` do from the command line (docs: "Your own runs").
# It trains its runs into a temporary folder first; with your own, start at `bnfl.load_run`.

# %%
import tempfile
from pathlib import Path

import bnfl
from bnfl import fl, runs
from bnfl.experiments import notebook  # notebook.image(fig): a figure as an inline PNG

root = Path(tempfile.mkdtemp(prefix="bnfl-my-run-"))
base = {"rounds": 12, "model": {"name": "q_mlp_bn"}, "data": {"name": "digits", "form": "flat"},
        "partition": {"kind": "classes_per_client", "num_clients": 5, "k": 2},
        "train": {"local_steps": 5, "batch_size": 32, "lr": 0.1, "progress": False}}
for method in ("fedtan", "fedavg+bn"):
    for seed in (0, 1, 2):
        fl.run({**base, "method": method, "seed": seed, "out": str(root / method / f"seed{seed}")})

# %% [markdown]
# One run: `bnfl.load_run(folder)` gives its `History`; `.plot()` draws test accuracy and loss
# against rounds. The meta says what ran, so a folder found later explains itself.

# %%
h = bnfl.load_run(root / "fedtan" / "seed0")
print({k: h.meta["run"][k] for k in ("method", "model", "data", "partition", "seed", "engine")})
print({k: h.meta["machine"][k] for k in ("bnfl", "git_commit", "python", "torch")})
notebook.image(h.plot())

# %% [markdown]
# Several runs: the seeds of one configuration (runs that differ only in `seed`) are drawn as
# their mean with a band, the 95% t-interval over seeds the reproduction reports use, and the
# table gives the final accuracy with the same interval, the bytes communicated and the wall
# time (means over seeds). `bnfl plot root/fedtan root/fedavg+bn` prints and draws the same.

# %%
all_runs = runs.find_runs([root / "fedtan", root / "fedavg+bn"])
print(runs.format_comparison(runs.compare(all_runs)))
notebook.image(runs.plot_runs(all_runs))

# %% [markdown]
# A new client. A FedBN model keeps one set of BN layers per client, so a client that joins
# later has none of its own; `evaluate_run` names the choice. `own` recomputes the statistics on
# the new client's (unlabelled) training samples; `global` uses the clients' averaged BN layers.
# Here FedBN trains on five styled domains of the digits and is scored on a sixth, "thin".

# %%
from bnfl.train.evaluate_run import evaluate_run

fedbn = root / "fedbn"
fl.run({"method": "fedbn", "rounds": 10, "model": {"name": "q_lenet"},
        "data": {"name": "digit_domains", "domains": ["clean", "contrast", "blur", "noise", "thick"]},
        "partition": {"kind": "by_domain", "num_clients": 5},
        "train": {"local_steps": 1, "local_unit": "epochs", "batch_size": 32, "lr": 0.05, "progress": False},
        "out": str(fedbn)})
for choice in ("own", "global"):
    r = evaluate_run(fedbn, data="digit_domains", data_options={"domains": ["thin"]}, client_stats=choice)
    print(f"BN statistics {choice:6s}: accuracy {100 * r['accuracy']:.1f}% on {r['samples']} unseen-domain samples")
