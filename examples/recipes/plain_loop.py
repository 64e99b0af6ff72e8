"""Recipe: FedBN, FixBN, HBN or FedTAN in your own PyTorch federated loop.

No bnfl engine here. Your loop keeps its shape (download, local SGD, upload,
weighted average); each fix changes one or two lines of it, using bnfl's
layers and pure functions only:

- what stays on the client is chosen by layer type
  (``bnfl.fl.state.keys_in``), never by name;
- the server's average is ``bnfl.fl.weighted_sum`` over the uploads;
- FixBN freezes the BN statistics after round T*
  (``bnfl.nn.freeze_bn_stats``);
- HBN uses ``bnfl.nn.HybridBatchNorm1d``; each client computes eq. 7
  moments (``bnfl.fl.hbn_client_stats``) and the server pools them with
  eq. 8 (``bnfl.stats.hbn_global``);
- FedTAN replaces the first local step of a round by
  ``bnfl.fedtan.coupled_step`` (eqs. 39-41), which needs the clients' first
  batches in one step: here, one process plays every client.

Run: ``python examples/recipes/plain_loop.py --rounds 20``
(tests/test_recipes.py runs it).
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn

from bnfl import stats
from bnfl.data import load
from bnfl.data import partition as P
from bnfl.fedtan import coupled_step
from bnfl.fl import hbn_client_stats, weighted_sum
from bnfl.fl.state import keys_in
from bnfl.nn import HybridBatchNorm1d, bn_modules, freeze_bn_stats

torch.set_num_threads(1)
METHODS = ("fedavg+bn", "fedbn", "fixbn", "hbn", "fedtan")

# What each method keeps on the client, and what only the server sets.
# Groups of bnfl.fl.state: bn_affine = gamma/beta, bn_stats = running (or
# HBN's global) statistics, bn_count = num_batches_tracked, local = HBN's
# alpha. Everything else is uploaded and averaged.
KEEP_LOCAL = {
    "fedavg+bn": ("bn_count",),
    "fixbn": ("bn_count",),
    "fedtan": ("bn_count",),
    "fedbn": ("bn_affine", "bn_stats", "bn_count"),
    "hbn": ("local",),
}
SERVER_SETS = {"hbn": ("bn_stats",)}  # HBN: pooled by the server (eq. 8)


# -- your code: a model, the clients' data, local training -------------------
def make_model(*, hybrid: bool = False) -> nn.Module:
    # HBN: swap the layer type, nothing else
    norm = HybridBatchNorm1d if hybrid else nn.BatchNorm1d
    return nn.Sequential(
        nn.Linear(64, 32), norm(32), nn.ReLU(), nn.Linear(32, 10)
    )


def clients_data(num_clients: int = 5, *, seed: int = 0):
    """Label skew: the embedded digits, 2 classes per client."""
    split = load("digits", form="flat")
    y = split.y_train.numpy()
    parts = P.classes_per_client(y, 2, num_clients, seed)
    data = [(split.x_train[i], split.y_train[i]) for i in parts]
    return data, (split.x_test, split.y_test)


def draw_batch(x, y, batch_size: int, gen: torch.Generator):
    idx = torch.randint(len(x), (batch_size,), generator=gen)
    return x[idx], y[idx]


def local_train(model, x, y, *, steps, lr, batch_size, gen, first_grads=None):
    """Plain SGD. FedTAN: step 1's gradient is given (``first_grads``)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for t in range(steps):
        opt.zero_grad()
        if t == 0 and first_grads is not None:
            for n, p in model.named_parameters():
                p.grad = first_grads[n].clone()
        else:
            xb, yb = draw_batch(x, y, batch_size, gen)
            F.cross_entropy(model(xb), yb).backward()
        opt.step()
    return model


@torch.no_grad()
def accuracy(model, x, y) -> float:
    model.eval()
    return (model(x).argmax(1) == y).float().mean().item()


# -- the federated loop, with each fix where it goes -------------------------
def federated(method: str, *, rounds: int = 20, local_steps: int = 5,
              lr: float = 0.1, batch_size: int = 32, seed: int = 0,
              switch: int | None = None, lam: float = 0.1) -> dict:
    """Train ``method``; return its accuracy, final states, round records.

    ``switch``: FixBN's T* (default: half the rounds).
    ``lam``: HBN's EMA weight (eq. 11).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, "
                         f"got {method!r}")
    data, (x_test, y_test) = clients_data(seed=seed)
    torch.manual_seed(seed)
    server = make_model(hybrid=method == "hbn")
    n = sum(len(x) for x, _ in data)
    p = [len(x) / n for x, _ in data]  # p_i = n_i / N
    gens = [torch.Generator().manual_seed(seed * 1000 + i)
            for i in range(len(data))]

    # by layer type, never `"bn" in name`
    local_keys = keys_in(server, *KEEP_LOCAL[method])
    groups = SERVER_SETS.get(method)
    server_keys = keys_in(server, *groups) if groups else []
    start = server.state_dict()
    client_local = [{k: start[k].clone() for k in local_keys} for _ in data]
    t_star = rounds // 2 if switch is None else switch
    history, first_batches = [], []
    for r in range(1, rounds + 1):
        if method == "fixbn" and r == t_star + 1:
            # FixBN Stage II: normalise with the statistics of round T*
            freeze_bn_stats(server)

        first_grads = [None] * len(data)
        if method == "fedtan":
            # step 1 of every client, coupled: eqs. 39-40 forward, 41 back
            first_batches = [draw_batch(x, y, batch_size, g)
                             for (x, y), g in zip(data, gens, strict=True)]
            step = coupled_step(server, first_batches, F.cross_entropy,
                                weights=p)
            first_grads = step.grads
            update_running_stats(server, step)

        moments = []
        if method == "hbn":
            # HBN eq. 7 on the downloaded model, uploaded with the weights
            moments = [hbn_client_stats(server, x) for x, _ in data]

        uploads = []
        for i, (x, y) in enumerate(data):
            model = copy.deepcopy(server)  # download, restore what stayed
            model.load_state_dict({**model.state_dict(), **client_local[i]})
            local_train(model, x, y, steps=local_steps, lr=lr,
                        batch_size=batch_size, gen=gens[i],
                        first_grads=first_grads[i])
            state = model.state_dict()
            client_local[i] = {k: state[k].clone() for k in local_keys}
            uploads.append({k: v for k, v in state.items()
                            if k not in local_keys and k not in server_keys})

        average = weighted_sum(uploads, p)
        server.load_state_dict({**server.state_dict(), **average})
        if method == "hbn":
            # eq. 8 pools the clients' moments; eq. 11: EMA after round 1
            for name, layer in bn_modules(server):
                mean, var = stats.hbn_global([m[name] for m in moments])
                if r > 1:
                    mean = (1 - lam) * layer.global_mean + lam * mean
                    var = (1 - lam) * layer.global_var + lam * var
                layer.set_global_stats(mean, var)
        acc = evaluate(method, server, client_local, x_test, y_test)
        kept = keys_in(server, "bn_stats")
        history.append({"round": r, "accuracy": acc,
                        "stats": {k: v.clone() for k, v in
                                  server.state_dict().items() if k in kept}})
    return {"accuracy": history[-1]["accuracy"], "server": server,
            "client_local": client_local, "history": history,
            "local_keys": local_keys, "first_batches": first_batches,
            "p": p}


@torch.no_grad()
def update_running_stats(model: nn.Module, step) -> None:
    """FedTAN eq. 6 after the coupled step: the running statistics follow
    the *global* batch statistics the clients normalised with (unbiased
    variance over the union's elements)."""
    for name, m in bn_modules(model):
        mean, var = step.layer_stats[name]
        n = sum(int(mm.count) for mm in step.local_stats[name])
        m.running_mean.lerp_(mean, m.momentum)
        m.running_var.lerp_(var * n / (n - 1), m.momentum)


def evaluate(method, server, client_local, x, y) -> float:
    """The global model on the test set; FedBN (a model per client): the
    mean over the clients, each with its own BN."""
    if method != "fedbn":
        return accuracy(server, x, y)
    accs = []
    for kept in client_local:
        model = copy.deepcopy(server)
        model.load_state_dict({**model.state_dict(), **kept})
        accs.append(accuracy(model, x, y))
    return sum(accs) / len(accs)


def main(argv=None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    args = ap.parse_args(argv)
    out = {}
    for m in args.methods:
        out[m] = federated(m, rounds=args.rounds)["accuracy"]
        print(f"{m:10s} test accuracy after {args.rounds} rounds: "
              f"{100 * out[m]:.2f}%")  # accuracy in %, as everywhere in bnfl
    return out


if __name__ == "__main__":
    main()
