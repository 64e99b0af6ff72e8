"""HBN Table 5 and Fig. 7 (Sec. 4.2, App. B.4): the normalisers on five architectures.

Table 5: the paper fine-tunes ImageNet-pretrained MobileNetV2, ResNet-18/50 and VGG-11/19 (dropout
removed) on CIFAR-100 with phi = 0.1 and B = 64. Nothing is downloaded: the paper profile reads
``<data root>/pretrained/<model>.pth`` (torchvision's state_dict layout, :func:`bnfl.models.load_pretrained`)
and stops with an error naming the file when it is missing (``pretrained = false`` trains from
scratch). The quick profile trains five small networks from scratch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnfl.experiments.core import Context, Result
from bnfl.experiments.drawing import line_panels
from bnfl.experiments.evidence import count_of, mean_of, paired_at_least, per_seed, rounded
from bnfl.experiments.evidence import fmt as fmt_seeds
from bnfl.experiments.papers.hbn import numbers as N
from bnfl.experiments.papers.hbn import setups as S
from bnfl.experiments.papers.hbn.comparison import _bars, reported_rows
from bnfl.experiments.registry import entry, plotter

# -- Table 5 / Fig. 7 ----------------------------------------------------------------------------
#: quick stand-ins (CATALOG hbn-tab5): name -> (bnfl model, spec override)
_QUICK_ARCHS = {"Q-MLP-BN": ["q_mlp_bn", {"data": {"form": "flat"}}], "Q-SCNN": ["q_scnn", {}],
                "Q-RES": ["q_res", {}], "tiny-VGG": ["tiny_vgg", {}], "tiny-MobileNet": ["tiny_mobilenet", {}]}
#: paper: torchvision's five networks; ResNet-18 with torchvision's 7x7 stem + max-pool (its weights' layout)
_PAPER_ARCHS = {"MobilenetV2": ["mobilenet_v2", {}], "ResNet-18": ["resnet18", {"model": {"stem": "imagenet"}}],
                "ResNet-50": ["resnet50", {}], "VGG-11": ["vgg11", {}], "VGG-19": ["vgg19", {}]}
#: The extra column of the paper profile: BN starting from the file's norm weights and statistics.
BN_STATS = "BN (pretrained norm)"

_QUICK = {"base": S.batch(S.Q_BASE, 16), "lr": S.Q_LR3, "phi": 0.1, "archs": _QUICK_ARCHS, "methods": S.THREE,
          "pretrained": False, "eval_every": 5,
          "deviations": ["no pretrained weights (offline): five small networks trained from scratch on Q-DIG "
                         "(K = 20, 5 per round, B = 16, T = 60)", "each method's rate chosen for Q-SCNN at B = 4 "
                         "on the mean of 3 seeds (hbn-tab8's runs, setups.Q_LR3) x 16 / 4, for every network",
                         "HBN with the paper's lambda = 0.01 unscaled and the server's EMA statistics at test (eq. 11, "
                         "eval_stats='global'), not the headline entries' scaled lambda and Sec. 4.1 evaluation: no run "
                         "here is shared with them (B = 16, phi = 0.1, evaluated every 5 rounds for the curves)", "3 seeds, paired by seed", S.DECAY_NOTE]}
_PAPER = {"base": S.batch(S.P_BASES["CIFAR-100"], 64), "lr": S.P_LR["CIFAR-100"], "phi": 0.1, "archs": _PAPER_ARCHS,
          "methods": S.THREE, "pretrained": True, "eval_every": 10, "pretrained_norm": False, "bn_pretrained_norm": True,
          "deviations": ["the rates are not printed for Table 5: Table 9's choices x 64 / 4 (linear scaling)",
                         "pretrained weights from <data root>/pretrained/<model>.pth; every norm layer starts fresh "
                         "(as HBN's code, which replaces them), and a fourth column trains BN from the file's norm "
                         "weights and statistics", S.DECAY_NOTE]}
_CONFIGS = S.profiles(_QUICK, _PAPER, smoke={"use": ["Q-MLP-BN", "Q-SCNN"], "eval_every": 1})


def weights_file(ctx: Context, model: str) -> str:
    """``<data root>/pretrained/<model>.pth``; a clear error when it is missing."""
    root = Path(ctx.data_root or ".").expanduser()
    path = root / "pretrained" / f"{model}.pth"
    if not path.is_file():
        raise FileNotFoundError(
            f"pretrained weights for {model} not found: expected {path} (a torchvision-layout state_dict saved "
            "with torch.save; nothing is downloaded). Put the file there, or set pretrained = false in the "
            "entry's config to train from scratch")
    return str(path)


def _arch_runs(ctx: Context, config: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{network: {method: [run per seed]}}``; with ``bn_pretrained_norm`` (paper) also :data:`BN_STATS`: BN
    whose norm layers start from the weights file (the others start fresh, ``pretrained_norm``)."""
    out = {}
    for arch in config.get("use") or list(config["archs"]):
        model, extra = config["archs"][arch]
        m: dict[str, Any] = {"name": model, **extra.get("model", {})}
        if config["pretrained"]:
            m["weights"] = weights_file(ctx, model)
            if "pretrained_norm" in config:
                m["pretrained_norm"] = bool(config["pretrained_norm"])
        part = {**extra, "model": m, "train": {"eval_every": int(config["eval_every"])}}
        phi = S.dirichlet(float(config["phi"]))
        out[arch] = {k: S.run(ctx, config["lr"], config["base"], k, phi, part) for k in config["methods"]}
        if config["pretrained"] and config.get("bn_pretrained_norm"):
            stats = {**part, "model": {**m, "pretrained_norm": True}}
            out[arch][BN_STATS] = S.run(ctx, config["lr"], config["base"], "BN", phi, stats)
    return out


@entry(
    "hbn-tab5",
    title="Normalisers on five architectures",
    summary=("Table 5: CIFAR-100 (phi = 0.1, B = 64) with pretrained MobileNetV2, ResNet-18, ResNet-50, VGG-11 and "
             "VGG-19 (dropout removed): HBN beats BN and GN on every network."),
    look_for="For each network, the three normalisers' final accuracy.",
    kind="training", configs=_CONFIGS, seeds={"smoke": 1, "quick": 5, "paper": 3},
)
def compute_tab5(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    seeds = [int(x) for x in ctx.seeds]
    runs = _arch_runs(ctx, config)
    table = {a: {k: per_seed(rs) for k, rs in d.items()} for a, d in runs.items()}
    n_test = int(next(iter(next(iter(runs.values())).values()))[0]["n_test"])
    claims = [paired_at_least(f"hbn-vs-bn-{a}", f"{a}: HBN >= BN - 0.5", t["HBN"], t["BN"], -0.5, seeds=seeds,
                              n_test=n_test, detail=f"HBN {fmt_seeds(t['HBN'])} vs BN {fmt_seeds(t['BN'])}")
              for a, t in table.items()]
    vs_gn = {a: paired_at_least(f"hbn-gt-gn-{a}", f"{a}: HBN > GN", t["HBN"], t["GN"], 0.0, seeds=seeds,
                                n_test=n_test, detail=f"HBN {fmt_seeds(t['HBN'])} vs GN {fmt_seeds(t['GN'])}")
             for a, t in table.items()}
    need = min(4, len(table))
    claims.append(count_of("hbn-vs-gn", f"HBN > GN (paired 95% interval above 0) on at least {need} of "
                           f"{len(table)} networks", vs_gn, need))
    rows = [{"model": a, **{f"+{k}": rounded(mean_of(v)) for k, v in t.items()},
             **({f"+{k} per seed": fmt_seeds(v) for k, v in t.items() if k in S.THREE} if len(seeds) > 1 else {})}
            for a, t in table.items()]
    paper = [{"model": m, "+BN": bn, "+GN": gn, "+HBN": h} for m, bn, gn, h in N.TABLE5]
    series: dict[str, Any] = {"acc": {a: {k: mean_of(t[k]) for k in S.THREE if k in t} for a, t in table.items()},
                              "per_seed": {a: {k: t[k] for k in S.THREE if k in t} for a, t in table.items()}}
    notes = []
    if ctx.profile == "paper":  # the authors' code reports the best round or the last-10 mean
        rows, _ = reported_rows(rows, {f"+{k}": {a: runs[a][k] for a in runs} for k in next(iter(runs.values()))},
                                "model")
        series["acc_pretrained_norm"] = {a: mean_of(t[BN_STATS]) for a, t in table.items() if BN_STATS in t}
        notes.append("Rows 'best' and 'last-10 mean': the best evaluated round and the mean of the last 10 rounds "
                     "(the authors' code reports these); the claims use the last round.")
    return {"rows": rows, "paper": paper, "claims": S.explain(ctx, claims), "deviations": list(config["deviations"]),
            "series": series, "notes": notes}


@plotter("hbn-tab5")
def plot_tab5(result: Result) -> Any:
    groups = list(dict.fromkeys(r["model"] for r in result.rows))  # the table's order (JSON sorts keys)
    return _bars(groups, result.series["acc"], S.THREE, "HBN Table 5: normalisers on five architectures (ours)")


def _auc(r: dict[str, Any]) -> float:
    if r.get("diverged"):
        return float("nan")
    x, y = np.asarray(r["round"], float), np.asarray(r["test_acc"], float)
    return float(np.trapezoid(y, x) / (x[-1] - x[0])) if len(x) > 1 else float(y[-1])


@entry(
    "hbn-fig7",
    title="Convergence curves on five architectures",
    summary="Fig. 7 (App. B.4): accuracy against rounds for BN, GN and HBN on Table 5's networks.",
    look_for="One panel per network; HBN's curve should lie above BN's for most of training.",
    kind="training", configs=_CONFIGS, seeds={"smoke": 1, "quick": 5, "paper": 3},
)
def compute_fig7(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    seeds = [int(x) for x in ctx.seeds]
    runs = {a: {k: rs for k, rs in d.items() if k in S.THREE} for a, d in _arch_runs(ctx, config).items()}
    auc = {a: {k: per_seed(rs, _auc) for k, rs in d.items()} for a, d in runs.items()}
    n_test = int(next(iter(next(iter(runs.values())).values()))[0]["n_test"])
    items = {a: paired_at_least(f"auc-{a}", f"{a}: HBN's area under the curve >= BN's", t["HBN"], t["BN"], 0.0,
                                seeds=seeds, n_test=n_test, detail=f"HBN {fmt_seeds(t['HBN'])} vs BN {fmt_seeds(t['BN'])}")
             for a, t in auc.items()}
    need = min(4, len(auc))
    claims = [count_of("auc", f"HBN's mean accuracy over rounds (area under the curve) >= BN's (paired 95% interval) "
                       f"on at least {need} of {len(auc)} networks", items, need)]
    rows = [{"model": a, **{f"{k} mean acc over rounds": rounded(mean_of(v)) for k, v in t.items()},
             **{f"{k} per seed": fmt_seeds(v) for k, v in t.items()}, "seeds": len(seeds)} for a, t in auc.items()]
    curves = {a: {k: _mean_curve(rs) for k, rs in d.items()} for a, d in runs.items()}
    return {"rows": rows, "paper": [], "claims": S.explain(ctx, claims), "deviations": list(config["deviations"]),
            "series": {"curves": curves, "auc_per_seed": auc},
            "notes": ["Same runs as hbn-tab5 (shared through the cache); curves are the mean over seeds (a diverged "
                      "seed is left out of the mean curve); the area under the curve is a different measurement "
                      "from Table 5's final accuracy."]}


def _mean_curve(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The seeds' mean accuracy per evaluated round (seeds that diverged are left out; all share rounds)."""
    ok = [r for r in runs if not r.get("diverged") and r.get("test_acc")]
    if not ok:
        return {"round": [], "acc": []}
    n = min(len(r["test_acc"]) for r in ok)
    return {"round": list(ok[0]["round"][:n]), "acc": [float(np.mean([r["test_acc"][i] for r in ok])) for i in range(n)]}


@plotter("hbn-fig7")
def plot_fig7(result: Result) -> Any:
    curves = result.series["curves"]
    panels = [{"curves": {k: dict(zip(c["round"], c["acc"], strict=True)) for k, c in curves[r["model"]].items()},
               "xlabel": "round", "title": r["model"], "ticks": False} for r in result.rows]  # the table's order (stored results sort keys)
    return line_panels(panels, rows=S.ROWS, ylabel="test accuracy (%)", width=3.0, height=2.8,
                       title="HBN Fig. 7: convergence on five architectures (ours)")
