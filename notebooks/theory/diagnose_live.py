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
# # How much does BN suffer on my split? A live diagnosis
#
# Federated clients that normalise with their own batch statistics compute gradients through the
# wrong statistics. How wrong depends on the split (how skewed the clients' labels are), the batch
# size, the number of clients and the local steps. This notebook runs
# [`bnfl.diagnose`](../../../diagnose.md) on the embedded digits (scikit-learn's bundled 8x8
# digits, split among clients with a Dirichlet($\phi$) label split) and the `bnfl demo` MLP
# (64-32-BN-ReLU-32-BN-ReLU-10) at initialisation, and shows:
#
# * **the statistics mismatch** per BN layer: the share of the input's variance that lies
#   *between* clients. With shares $p_i = n_i/N$ the union's variance is
#   $\sigma^2 = \sum_i p_i\sigma_i^2 + \sum_i p_i(\mu_i-\mu)^2$; FedAvg+BN averages only the first
#   term, so this share is exactly the relative bias of its averaged variance (FedTAN eq. 7);
# * **the gradient error** of one first local step: the clients' aggregated gradient against the
#   centralized gradient on the union of their batches, for FedAvg+BN, FedAvg+Algorithm 2 and
#   FedTAN (exact, eq. 41), next to the same error on an i.i.d. re-split (what batch noise alone
#   costs);
# * **the shift** (label skew or feature shift), the **recommended fix** and what each fix costs
#   in communication for this model.
#
# The first cells show the diagnosis at the default values. The last cell (run it in JupyterLab,
# `make lab`) adds sliders that recompute everything when you release one; an update takes about
# half a second of CPU.

# %% tags=["parameters"]
import torch

from bnfl.diagnosis import interactive

torch.set_num_threads(1)
PHI = 0.3  # Dirichlet concentration: 0.05 = one or two classes per client, 100 = close to i.i.d.
BATCH_SIZE = 32
CLIENTS = 5
LOCAL_STEPS = 2
SEED = 0

# %%
d = interactive.digits_diagnosis(phi=PHI, clients=CLIENTS, batch_size=BATCH_SIZE, local_steps=LOCAL_STEPS,
                                 seed=SEED)
interactive.show(d)

# %% [markdown]
# ## Reading it
#
# * **Left panel / first table.** Each BN layer's input: the between-client share (blue) is the
#   bias FedAvg+BN's averaged variance misses; the within-class share (pink) is the same measure
#   computed inside each class, over the clients that hold it: it stays at the sampling floor when
#   only the label mix differs (label skew) and rises when the same class looks different on
#   different clients (feature shift). The batch noise (orange) is how far a batch's mean and
#   standard deviation, the statistics BN normalises with, fall from the population's, in units
#   of the variance: about $1.5/B$ for this MLP. Layers are named by their place in the model
#   and their type ("features.1 (BatchNorm1d)").
# * **Middle panel / second table.** With $\phi = 0.3$ FedAvg+BN's aggregated gradient is off by
#   about half its norm, well above its error on an i.i.d. re-split of the same samples (the black
#   ticks); FedTAN's is rounding. With $E > 1$ local steps even FedTAN's round update differs from
#   $E$ centralized steps: that part is client drift, not BN.
# * **Right panel.** Where this split sits between label skew ($D_y$ above its value on an
#   i.i.d. re-partition of the same samples) and feature shift (the within-class share as a
#   multiple of its i.i.d. value); the dashed lines are the thresholds of `bnfl.diagnosis.rules`.
#
# Try: $\phi = 100$ (the error drops to the i.i.d. floor and the verdict becomes "BN is not the
# problem"), $B = 4$ (batch noise dominates: HBN or GroupNorm), more clients at small $\phi$ (each
# client holds fewer classes: the mismatch grows), more local steps (FedTAN's exact first step
# no longer makes the whole round exact).

# %% tags=["skip-execution"]
interactive.explorer(phi=PHI, clients=CLIENTS, batch_size=BATCH_SIZE, local_steps=LOCAL_STEPS, seed=SEED)
