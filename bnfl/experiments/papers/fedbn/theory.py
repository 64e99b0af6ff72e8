"""Figs. 1, 2 (the toy example of Sec. 1) and Fig. 9 (App. F: model (1) on two Gaussian clients).

Everything is computed by :mod:`bnfl.theory.fedbn_toy` and :mod:`bnfl.theory.ntk`; the entries
choose the catalog's settings, check its claims and draw. The toy is [reconstructed] (CATALOG §4.1):
read literally (``y = cos(w x)`` on the raw inputs) both clients share the optimum, so the
figures' story needs the latent-scale variant (client i sees ``x = s_i z``, ``y = cos(w z)``);
Fig. 1 shows both variants side by side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnfl.experiments.claims import at_least, at_most, per_seed_claim, within
from bnfl.experiments.core import Context, Result
from bnfl.experiments.drawing import series_panels
from bnfl.experiments.papers.fedbn.setups import STYLES
from bnfl.experiments.registry import entry, plotter, same_for_all_profiles
from bnfl.plots import new_figure
from bnfl.theory.fedbn_toy import (
    averaged_model_losses,
    error_surface,
    local_bn_scale,
    local_optimum,
    loss_curves,
    make_toy_clients,
    toy_loss,
)
from bnfl.theory.ntk import bayes_accuracy, fit_target, make_synthetic_clients, train_gd

_TOY = {"scales": [1.0, 3.0], "w_true": 2.0, "noise": 0.1, "n": 500, "seed": 0, "w_grid": [-6.0, 6.0, 1201]}
#: Fig. 9's data (bnfl.theory.ntk.make_synthetic_clients): dimension, class mean, client 2's AR(1)
#: correlation, samples per class and client.
_SYNTH = {"d": 10, "mean": 1.0, "rho": 0.8, "n_per_class": 100}


def _grid(spec: list[float]) -> np.ndarray:
    lo, hi, n = spec
    return np.linspace(lo, hi, int(n))


def _clients(config: dict[str, Any], variant: str) -> list[Any]:
    return make_toy_clients(scales=config["scales"], w_true=config["w_true"], noise=config["noise"],
                            n=config["n"], variant=variant, seed=config["seed"])


@entry("fedbn-fig1", title="Toy example: the two clients' loss over w, without and with local BN",
       summary=("Fig. 1: two clients whose inputs differ in scale. Without BN their loss landscapes have "
                "different minima, so averaging the two models is poor; with local BN the landscapes "
                "align and the averaged model fits both."),
       look_for=("Left: without BN client 2's minimum sits at w*/3, client 1's at w*; the average of the two "
                 "optima fits neither. Right: each client divides its inputs by its own standard deviation "
                 "(a BN layer kept local) and both minima move to w*. The printed recipe (targets from the "
                 "raw inputs) would give both clients the same optimum already without BN, which is why "
                 "the figures need the latent-scale reading (CATALOG §4.1)."),
       kind="exact", configs=same_for_all_profiles(_TOY))
def compute_fig1(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    w = _grid(config["w_grid"])
    out: dict[str, Any] = {}
    for variant in ("latent", "printed"):
        clients = _clients(config, variant)
        s = averaged_model_losses(clients, w)
        out[variant] = {"s": s, "curves": {"no BN": loss_curves(clients, w, bn=False),
                                          "local BN": loss_curves(clients, w, bn=True)}}
    lat, pri = out["latent"]["s"], out["printed"]["s"]
    w1, w2 = lat["w_local_no_bn"]
    b1, b2 = lat["w_local_bn"]
    rel = abs(w1 - w2) / max(w1, w2)
    rel_bn = abs(b1 - b2) / max(b1, b2)
    loss_avg_nobn, loss_avg_bn = float(np.mean(lat["loss_no_bn"])), float(np.mean(lat["loss_bn_local_gamma"]))
    p1, p2 = pri["w_local_no_bn"]
    claims = [
        at_least("optima-differ-without-bn", "without BN the clients' optima differ by >= 30%", rel, 0.30,
                 detail=f"w*_1 = {w1:.3f}, w*_2 = {w2:.3f} (relative difference {rel:.2f})"),
        at_most("optima-agree-with-bn", "with local BN the optima agree to within 5%", rel_bn, 0.05,
                detail=f"w*_1 = {b1:.3f}, w*_2 = {b2:.3f} (relative difference {rel_bn:.3f})"),
        at_least("averaging-helps-with-bn", "the averaged w has a lower loss with local BN than without",
                 loss_avg_nobn - loss_avg_bn, 0.0,
                 detail=f"mean client loss at the averaged w: {loss_avg_nobn:.3f} without BN, {loss_avg_bn:.3f} with"),
        within("printed-variant-shared-optimum",
               "read literally (targets from the raw x) the clients share the optimum without BN",
               p1, p2, 0.05 * max(p1, p2), kind="consistency",
               detail=f"printed variant: w*_1 = {p1:.3f}, w*_2 = {p2:.3f}: the paper's story cannot arise, "
                      "hence the latent-scale reading (CATALOG §4.1, §5.8)"),
    ]
    rows = [{"variant": v, "BN": bn, "w* client 1": round(float(o["s"][key][0]), 3),
             "w* client 2": round(float(o["s"][key][1]), 3),
             "mean loss at averaged w": round(float(np.mean(o["s"][loss])), 4)}
            for v, o in out.items()
            for bn, key, loss in (("none", "w_local_no_bn", "loss_no_bn"),
                                  ("local", "w_local_bn", "loss_bn_local_gamma"))]
    step = max(1, w.size // 600)
    series = {"w": w[::step].tolist(),
              **{f"{v}/{k}": c[:, ::step].tolist() for v, o in out.items() for k, c in o["curves"].items()},
              "optima": {v: {"no BN": o["s"]["w_local_no_bn"].tolist(), "local BN": o["s"]["w_local_bn"].tolist()}
                         for v, o in out.items()}}
    return {"rows": rows, "paper": [], "claims": claims, "series": series,
            "notes": ["The paper's toy formulas are stripped from the provided text; the setting is CATALOG "
                      "§4.1's reconstruction (s = 1 and 3, w* = 2, noise 0.1, 500 samples per client).",
                      "Optima are grid minimisers on w > 0 (the loss is even in w)."]}


#: The two toy clients' colours in Fig. 1.
_CLIENTS = {"client 1": {"color": "#0072B2"}, "client 2": {"color": "#D55E00"}}
plotter("fedbn-fig1")(lambda r: series_panels(
    [(title, {f"client {i + 1}": (r.series["w"], curve) for i, curve in enumerate(r.series[key])})
     for key, title in (("latent/no BN", "(a) no BN"), ("latent/local BN", "(b) local BN"),
                        ("printed/no BN", "(c) printed recipe, no BN"))],
    "FedBN Fig. 1: toy loss landscapes of two clients (latent-scale reading)", styles=_CLIENTS, xlabel="w",
    ylabel="local squared loss", width=3.4, height=2.9, legend_size=10))


@entry("fedbn-fig2", title="Toy example: error surface of one client over (w, gamma)",
       summary=("Fig. 2: client 2's loss over the model weight w and the BN scale gamma. At the optimal w a "
                "wrong gamma hurts and vice versa; averaging both w and gamma gives a high error, while the "
                "averaged w with the client's own gamma works well."),
       look_for=("The loss depends on w/gamma only: its minimum is a valley through the origin. FedAvg "
                 "averages gamma too and lands off the valley (high error); FedBN keeps gamma local and the "
                 "averaged w stays on it."),
       kind="exact", configs=same_for_all_profiles(_TOY | {"gamma_grid": [0.5, 4.0, 141], "w_grid": [0.05, 6.0, 240]}))
def compute_fig2(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    clients = _clients(config, "latent")
    w, g = _grid(config["w_grid"]), _grid(config["gamma_grid"])
    s = averaged_model_losses(clients, _grid(_TOY["w_grid"]))
    c2 = clients[1]
    surf = error_surface(c2, w, g)
    g_star, w_star = local_bn_scale(c2), local_optimum(c2, w, bn=True)
    l_star = float(toy_loss(c2, w_star, gamma=g_star))
    l_avg_both = float(s["loss_bn_avg_gamma"][1])
    l_avg_local = float(s["loss_bn_local_gamma"][1])
    claims = [
        at_least("local-gamma-beats-averaged", "client 2: L(w_bar, gamma_local) < L(w_bar, gamma_bar)",
                 l_avg_both - l_avg_local, 0.0,
                 detail=f"L(w_bar, gamma_bar) = {l_avg_both:.4f}, L(w_bar, gamma_2) = {l_avg_local:.4f}"),
        at_most("optimum-is-grid-minimum", "L(w*, gamma*) is the grid minimum (to 1e-3)",
                l_star - float(surf.min()), 1e-3,
                detail=f"L(w*, gamma*) = {l_star:.5f}, grid minimum {float(surf.min()):.5f}"),
    ]
    rows = [{"point": name, "w": round(wv, 3), "gamma": round(gv, 3), "client 2 loss": round(lv, 4)}
            for name, wv, gv, lv in (("client optimum (w*, gamma_2)", w_star, g_star, l_star),
                                     ("averaged w, averaged gamma (FedAvg)", s["w_avg_bn"], s["gamma_avg"], l_avg_both),
                                     ("averaged w, local gamma (FedBN)", s["w_avg_bn"], g_star, l_avg_local))]
    return {"rows": rows, "paper": [], "claims": claims,
            "series": {"w": w.tolist(), "gamma": g.tolist(), "loss": surf.round(5).tolist(),
                       "points": [[r["w"], r["gamma"]] for r in rows], "labels": [r["point"] for r in rows]},
            "notes": ["Same toy as fedbn-fig1 (latent-scale reading); gamma is the simplified BN scale "
                      "(inputs divided by gamma)."]}


@plotter("fedbn-fig2")
def plot_fig2(result: Result) -> Any:
    s = result.series
    fig, ax = new_figure(1, 1, width=5.2, height=3.8)
    im = ax.contourf(s["w"], s["gamma"], np.asarray(s["loss"]), levels=30, cmap="viridis")
    fig.colorbar(im, ax=ax, label="client 2 loss")
    for (wv, gv), label, mk, c in zip(s["points"], s["labels"], ("*", "X", "o"),
                                      ("#FFFFFF", "#D55E00", "#CC79A7"), strict=True):
        ax.plot(wv, gv, mk, color=c, markersize=11, markeredgecolor="black", label=label)
    ax.set_xlabel("w")
    ax.set_ylabel("BN scale gamma")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("FedBN Fig. 2: error surface of client 2 over (w, gamma)")
    return fig


@entry("fedbn-fig9", title="Synthetic data (App. F): training loss of FedAvg and FedBN on model (1)",
       summary=("Fig. 9: two clients, each with two Gaussian classes, the second client's features "
                "correlated. A two-layer ReLU network with BN trained by full-batch gradient descent: "
                "FedBN's training loss falls faster than FedAvg's; both fit the data."),
       look_for=("Both methods start from the same function. FedBN keeps one BN scale per client and "
                 "neuron (the model f* of eq. 1), which is what Corollary 4.6 says converges faster; the "
                 "gap between the curves is the effect of that extra freedom."),
       kind="exact",
       # ``{...} | _SYNTH``, not ``{..., **_SYNTH}``: Sphinx's source parser (viewcode) cannot read a
       # ``**`` inside a decorator's arguments, and the module would have no source page
       configs={"smoke": {"steps": 60, "m": 100} | _SYNTH,
                "quick": {"steps": 600, "m": 100} | _SYNTH,
                "paper": {"steps": 600, "m": 100} | _SYNTH},
       # seeded gradient descent (data and initialisation drawn per seed): an interval over seeds
       seeds={"smoke": 2, "quick": 5, "paper": 5})
def compute_fig9(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    seeds = [int(s) for s in ctx.seeds]
    d, mean, rho, npc = int(config["d"]), float(config["mean"]), float(config["rho"]), int(config["n_per_class"])
    target, bayes = fit_target(d, mean, rho, npc)
    per_client = ", ".join(f"{100 * b:.1f}%" for b in bayes_accuracy(d, mean, rho))
    steps = int(config["steps"])
    # One seed draws the data and the initialisation; both methods start from the same function.
    runs: dict[str, list[dict[str, Any]]] = {"FedAvg": [], "FedBN": []}
    for seed in seeds:
        data = make_synthetic_clients(d=d, n_per_class=npc, mean=mean, rho=rho, seed=seed)
        for name, fedbn in (("FedAvg", False), ("FedBN", True)):
            runs[name].append(train_gd(data, fedbn=fedbn, m=int(config["m"]), steps=steps, seed=seed))
    n_train = 2 * 2 * npc  # two clients with two classes each: one sample is 100 / n_train accuracy points
    checks = [t for t in (100, 300, 600) if t <= steps] or [steps]

    def at(name: str, t: int) -> list[float]:
        return [float(r["loss"][t]) for r in runs[name]]

    def acc(name: str) -> list[float]:
        return [100 * float(r["accuracy"][-1]) for r in runs[name]]

    claims = [per_seed_claim(f"fedbn-below-at-{t}", f"FedBN's loss < FedAvg's at step {t}", at("FedAvg", t), 0.0,
                             baseline=at("FedBN", t), seeds=seeds,
                             detail=f"FedAvg {np.mean(at('FedAvg', t)):.4f}, FedBN {np.mean(at('FedBN', t)):.4f} "
                                    f"(means over {len(seeds)} seeds)")
              for t in checks]
    claims += [per_seed_claim(f"{k.lower()}-fits", f"{k} fits the data: training accuracy >= the Bayes accuracy less "
                              f"two standard errors ({target:.1f}%)", acc(k), target, seeds=seeds, n_test=n_train,
                              detail=f"{np.mean(acc(k)):.1f}% after {steps} steps (mean over {len(seeds)} seeds); "
                                     f"Bayes accuracy {bayes:.1f}% (clients {per_client})") for k in runs]
    rows = [{"method": k, "seeds": len(seeds), "loss at 0": round(float(np.mean(at(k, 0))), 4),
             **{f"loss at {t}": round(float(np.mean(at(k, t))), 4) for t in checks},
             "train acc (%)": round(float(np.mean(acc(k))), 2)} for k in runs]
    return {"rows": rows, "paper": [], "claims": claims,
            "series": {k: {"loss": np.mean([r["loss"] for r in rs], axis=0).round(6).tolist()}
                       for k, rs in runs.items()},
            "notes": ["The paper's means, dimension and learning rate are stripped; the data are "
                      "bnfl.data.fedbn_synthetic with d = 10, class means +-1, AR(1) covariance 0.8 on client "
                      "2 (a tridiagonal 0.8 band is not positive definite), 100 samples per class and "
                      "client, m = 100 neurons, logistic loss, lr 2.0 (bnfl.theory.ntk.train_gd).",
                      f"Seeds {seeds}: each draws the data and the initialisation (the same for both methods), so "
                      "each claim is a 95% t-interval over seeds, paired by seed where it compares the methods; "
                      "the curves and the table are means over seeds."]}


plotter("fedbn-fig9")(lambda r: series_panels(
    [("FedBN Fig. 9: two-client synthetic data, model (1)",
      {k: (range(len(v["loss"])), v["loss"]) for k, v in r.series.items()})],
    "", styles=STYLES, xlabel="gradient step", ylabel="training loss", logy=True, width=4.8, height=3.4,
    legend_size=10))
