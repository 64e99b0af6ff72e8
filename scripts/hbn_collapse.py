"""Why HBN collapses at K = 100 (hbn-tab3) and on tiny-MobileNet (hbn-tab5): measure it.

Trains one HBN run of the quick proxy (sequential engine), then compares, layer by layer, three sets
of BN statistics with the moments each layer's input really has in the test forward that uses them
(mean shift in units of the true standard deviation, |log variance ratio|), and the test accuracy
each gives:

* ``stored``: what HBN stores (eq. 8 pooled over each round's clients, EMA of eq. 11 over T rounds);
* ``eq8(all, final)``: eq. 7 on every client's data with the final model, pooled by eq. 8 with
  weight 1 (no EMA, no client sampling): the eq. 7 statistics themselves, computed under
  client-normalised lower layers;
* ``recalibrated``: each layer's statistics taken from the test forward itself, layer after layer on
  the whole training set (what a perfectly consistent estimate gives).

``eq8(all, final)`` vs its own test forward isolates the hypothesis "eq. 7 computes deeper layers'
statistics under client-normalised lower layers while the test forward uses global ones";
``stored`` vs ``eq8(all, final)`` isolates the EMA (lambda) and the per-round client sample.

    PYTHONPATH=. python scripts/hbn_collapse.py k100 --seed 0 [--lam 0.08] [--lr 0.02]
    PYTHONPATH=. python scripts/hbn_collapse.py mobilenet --seed 0
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch

from bnfl import stats
from bnfl.experiments.papers.hbn.setups import Q_BASE, batch, dirichlet, spec, variant
from bnfl.experiments.training import _build, canonical
from bnfl.fl.algorithms._statistics import _global_stats_layers, hbn_client_stats
from bnfl.fl.engine import accuracy


def _setting(name: str, lr: float | None, options: dict) -> dict:
    if name == "k100":  # hbn-tab3's K = 100 column: 5 clients a round, about 14 digits each
        return spec(Q_BASE, variant("HBN", **options), {"partition": {"num_clients": 100},
                                                        "train": {"participation": 0.05, "lr": lr or 0.005}})
    if name == "k20":
        return spec(Q_BASE, variant("HBN", **options), {"train": {"lr": lr or 0.005}})
    if name == "mobilenet":  # hbn-tab5's tiny-MobileNet column: phi = 0.1, B = 16
        return spec(batch(Q_BASE, 16), variant("HBN", **options), dirichlet(0.1),
                    {"model": {"name": "tiny_mobilenet"}, "train": {"lr": lr or 0.02}})
    raise SystemExit(f"unknown setting {name!r}: k100, k20 or mobilenet")


def _input_moments(model, x) -> dict[str, stats.Moments]:
    """Each HBN layer's input moments in the eval forward (the layers normalise with their stored stats)."""
    out: dict[str, stats.Moments] = {}
    hooks = [m.register_forward_hook(lambda m, a, o, n=n: out.__setitem__(n, stats.moments(a[0].detach())))
             for n, m in _global_stats_layers(model)]
    model.eval()
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return out


def _with(model, st):
    m = copy.deepcopy(model)
    for n, layer in _global_stats_layers(m):
        layer.set_global_stats(*st[n])
    return m


def _mismatch(st, true: stats.Moments) -> tuple[float, float]:
    sd = true.var.clamp_min(1e-8).sqrt()
    shift = ((st[0] - true.mean).abs() / sd).mean().item()
    logv = (st[1].clamp_min(1e-8) / true.var.clamp_min(1e-8)).log().abs().mean().item()
    return shift, logv


def main() -> None:
    torch.set_num_threads(1)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("setting", choices=("k100", "k20", "mobilenet"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--lam", type=float, default=None, help="HBN's lambda (default: the entries' 0.01)")
    p.add_argument("--lr", type=float, default=None, help="default: HBN's chosen rate (0.005 x B / 4)")
    args = p.parse_args()
    options = {} if args.lam is None else {"lam": args.lam}
    s = canonical(spec(_setting(args.setting, args.lr, options), {"rounds": args.rounds, "seed": args.seed}))
    sim, _ = _build(s, device="cpu", data_root=None, progress=False)
    sim.run()
    model, x = sim.global_model(), sim.x_train
    layers = [n for n, _ in _global_stats_layers(model)]
    sizes = [len(i) for i in sim.client_indices]
    print(f"{args.setting} seed {args.seed} lam {args.lam or 0.01}: client sizes min {min(sizes)}, median "
          f"{int(np.median(sizes))}")
    stored = {n: (m.global_mean.clone(), m.global_var.clone()) for n, m in _global_stats_layers(model)}
    parts: dict[str, list[stats.Moments]] = {n: [] for n in layers}
    for idx in sim.client_indices:
        for n, mom in hbn_client_stats(copy.deepcopy(model), x[torch.as_tensor(idx)]).items():
            parts[n].append(mom)
    eq8 = {n: stats.hbn_global(ps) for n, ps in parts.items()}
    recal, m = {}, copy.deepcopy(model)
    for n, layer in _global_stats_layers(m):
        t = _input_moments(m, x)[n]
        recal[n] = (t.mean, t.var * t.count / max(t.count - 1, 1))
        layer.set_global_stats(*recal[n])
    own_s, own_e = _input_moments(_with(model, stored), x), _input_moments(_with(model, eq8), x)
    rows = []
    print(f"{'layer':24s} | stored vs its test forward | eq8(all, final) vs its test forward | stored vs eq8(all, final)")
    for n in layers:
        a, b = _mismatch(stored[n], own_s[n]), _mismatch(eq8[n], own_e[n])
        c = _mismatch(stored[n], stats.Moments(count=1, mean=eq8[n][0], var=eq8[n][1]))
        rows.append((*a, *b, *c))
        print(f"{n:24s} | {a[0]:6.3f} sd {a[1]:6.3f}          | {b[0]:6.3f} sd {b[1]:6.3f}                   | "
              f"{c[0]:6.3f} sd {c[1]:6.3f}")
    print("mean over layers (shift, |log var ratio|):", np.round(np.mean(rows, axis=0), 3).tolist())
    xt, yt = sim.x_test, sim.y_test
    print("test accuracy: stored", round(100 * accuracy(_with(model, stored), xt, yt)[0], 2),
          "| eq8(all, final)", round(100 * accuracy(_with(model, eq8), xt, yt)[0], 2),
          "| recalibrated", round(100 * accuracy(_with(model, recal), xt, yt)[0], 2))


if __name__ == "__main__":
    main()
