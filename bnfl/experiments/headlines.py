"""The headline claims of the four papers and the benchmark, declared once.

:data:`HEADLINES` names the claims a reader of each paper remembers (18-25 of them), each by the
registered entry that checks it and the claim's ``name`` in that entry's result, with the paper's
effect in words and numbers and the stand-in data set the ``quick`` profile trains on.
:data:`STAND_INS` says what each quick stand-in replaces. :mod:`bnfl.experiments.dashboard` renders
both (REPORT.md's opening table, the docs' reproductions index); nothing here is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DATA_STAND_INS", "HEADLINES", "STAND_INS", "Headline", "StandIn"]


@dataclass(frozen=True)
class Headline:
    """One headline claim.

    Attributes
    ----------
    entry : str
        The registered entry id whose result holds the claim (``"fedtan-tab1"``).
    claim : str
        The claim's ``name`` in that result.
    topic : str
        What the claim is about, in a few words (the table's first column).
    paper_effect : str
        The paper's effect in words and numbers (its own table or figure).
    stand_in : str
        The data set the quick profile measures it on (a key of :data:`STAND_INS` first).
    """

    entry: str
    claim: str
    topic: str
    paper_effect: str
    stand_in: str

    @property
    def paper(self) -> str:
        """The paper key (the part of :attr:`entry` before the first ``-``)."""
        return self.entry.split("-", 1)[0]


@dataclass(frozen=True)
class StandIn:
    """A quick-profile data set: what it is and what it stands in for (CATALOG.md, Sec. 0.3)."""

    name: str
    what: str
    replaces: str


#: The quick profile's stand-in data sets (CATALOG.md Sec. 0.3); the banner lists those that the
#: stored results name.
STAND_INS: tuple[StandIn, ...] = (
    StandIn("Q-DIG", "scikit-learn's embedded 8x8 digits (1,437 train / 360 test images), split by class "
            "(Q-DIG-k) or by Dirichlet(phi)", "CIFAR-10, CIFAR-100, MNIST"),
    StandIn("Q-DOM", "the same 8x8 digits in styled domains (clean, contrast, blur, noise, thick, ...)",
            "the five digit data sets, Office-Caltech10, DomainNet"),
    StandIn("Q-GAUSS(C)", "synthetic Gaussian classes in 64 dimensions (C classes)",
            "Tiny-ImageNet, CIFAR-100 with 20 classes per client, ImageNet"),
    StandIn("Q-ABIDE", "synthetic binary sites with site-specific scaling and shift", "ABIDE I"),
    StandIn("Q-SEG", "digit-stroke segmentation on styled digits", "Cityscapes"),
)

#: The registry data sets (``bnfl.data.load`` names) the quick profile trains on -> the stand-in of
#: :data:`STAND_INS` each one is; a title names it where an entry's quick numbers come from it.
DATA_STAND_INS: dict[str, str] = {
    "digits": "Q-DIG",
    "digit_domains": "Q-DOM",
    "gaussian_mixture": "Q-GAUSS(C)",
    "abide_sites": "Q-ABIDE",
    "digit_segmentation": "Q-SEG",
}

_DIG2 = "Q-DIG-2 (8x8 digits, 2 classes per client)"
_DIR = "Q-DIG-DIR (8x8 digits, Dirichlet clients)"
_DOM = "Q-DOM (8x8 digits in 5 styles)"
_GAUSS2 = "Q-GAUSS(10) (2 classes per client, n_test 5,000; chosen by bench-calib-proxies)"

#: The headline claims, by paper in the order FedTAN, HBN, FixBN, FedBN, then the benchmark.
HEADLINES: tuple[Headline, ...] = (
    # FedTAN (Wang, Shi, Chang)
    Headline("fedtan-fig3", "b-fedavg+bn", "FedAvg+BN collapses on non-iid data",
             "ResNet-20, CIFAR-10, E=1: FedAvg+BN ends far below centralized on non-iid data (Fig. 3b)", _DIG2),
    Headline("fedtan-tab1", "fedtan-gap", "FedTAN repairs the collapse",
             "non-iid, momentum: FedTAN 87.66 vs FedAvg+BN 45.90 (+41.76 pts; Table 1)", _DIG2),
    Headline("fedtan-fig4", "iid-fedtan", "FedTAN reaches centralized accuracy",
             "iid: FedTAN 89.32 vs centralized within ~1 pt (Fig. 4, Table 2)", "Q-DIG (8x8 digits, iid)"),
    Headline("fedtan-fig4", "fedbn", "FedBN fails on label skew",
             "non-iid: FedBN 19.46 and SiloBN 19.43, near chance (Table 1)", _DIG2),
    Headline("fedtan-tab2", "with mom.-non-iid", "FedTAN >= FedAvg+GN",
             "non-iid, momentum: FedTAN 87.66 vs FedAvg+GN 82.66 (Table 2)", _GAUSS2),
    # HBN (Chen, Xu, Wu, Kittler)
    Headline("hbn-tab1", "hbn-best-Q-DIG phi=0.1", "HBN is the best normaliser under strong non-iid",
             "CIFAR-10, phi=0.1: HBN 71.56 vs FixBN 70.36, BN 69.61, GN 68.76 (Table 1)", _DIR),
    Headline("hbn-tab1", "hbn-vs-bn-Q-DIG phi=0.1", "HBN beats BN under strong non-iid",
             "CIFAR-10, phi=0.1: HBN - BN = +1.95 pts (Table 1)", _DIR),
    Headline("hbn-tab2", "drop-0.6", "HBN keeps its accuracy at small batches",
             "CIFAR-100, phi=0.6, B=32 -> 2: BN drops 5.74 pts, HBN 2.19 (Table 2)", _DIR),
    Headline("hbn-tab2", "hbn-ge-bn-0.6-B2", "HBN >= BN at B = 2",
             "CIFAR-100, phi=0.6, B=2: HBN above BN (Table 2)", _DIR),
    Headline("hbn-tab4", "gains", "HBN as a plug-in helps FL solvers",
             "CIFAR-10: +HBN gains +1.0 to +3.2 pts on all 8 solvers (Table 4)", _DIR),
    Headline("hbn-tab6", "moving-average-worst", "Ablation: eq. 7 by moving average is worst",
             "CIFAR-10: (1) 72.25 vs full HBN 78.22, other ablations 76.33-77.90 (Table 6)", _DIR),
    # FixBN (Zhong, Chen, Chao)
    Headline("fixbn-tab1", "bn-gap", "BN's FL gap at E = 1 (GN has none)",
             "ResNet-20, non-iid CIFAR-10: BN 89.30 centralized vs 42.93 FL; GN 87.46 vs 87.37 (Table 1)", _DIG2),
    Headline("fixbn-fig1", "fixbn-closes", "FixBN closes the gap",
             "FixBN recovers most of BN's centralized accuracy at E=1 (Fig. 1)", _DIG2),
    Headline("fixbn-fig1", "star", "Local momentum helps FixBN",
             "FixBN* (maintained local momentum) >= FixBN (Fig. 1)", _DIG2),
    Headline("fixbn-fig4", "fixbn-local-E1", "Maintained local momentum helps",
             "Shards, fixed epochs: maintained momentum raises every norm's accuracy (Fig. 4)",
             "Q-DIG shards (8x8 digits)"),
    Headline("fixbn-fig3", "Q-DIG / Q-MLP-BN-Shards-fixbn-gn", "FixBN >= GN under non-iid",
             "CIFAR-10, E=100: FixBN at or above GN on every non-iid partition (Fig. 3)",
             "Q-DIG shards (8x8 digits)"),
    Headline("fixbn-tab5", "fixbn-best", "FixBN is the best normalisation layer",
             "ResNet-20, Shards, E=100: FixBN above BN, GN, LN, IN, FixUp (Table 5)",
             "Q-GAUSS(10) shards (n_test 5,000; chosen by bench-calib-proxies)"),
    # FedBN (Li, Jiang, Zhang, Kamp, Dou)
    Headline("fedbn-tab11", "fedbn-best-mean", "FedBN beats FedAvg/FedProx under feature shift",
             "digits, 10%, E=1: FedBN 85.22 vs FedAvg 82.68, FedProx 82.68 (mean over 5 domains; Table 11)", _DOM),
    Headline("fedbn-tab1", "office-best-mean", "FedBN wins on real feature shift",
             "Office-Caltech10: FedBN best mean over the 4 domains (Table 1)", "Q-DOM (4 styled digit domains)"),
    Headline("fedbn-fig3", "faster", "FedBN converges faster",
             "digits, E=1: FedBN's training loss below FedAvg's through training (Fig. 3)", _DOM),
    Headline("fedbn-fig4", "a-E16", "Robust to many local epochs",
             "digits: FedBN above FedAvg at every E in {1, 4, 8, 16} (Fig. 4a)", _DOM),
    Headline("fedbn-tab17", "fedbn-fedprox-thin", "Comparable on unseen domains",
             "Morpho-global: FedBN 92.45 vs FedProx 92.35 (App. G, Table 17)", "Q-DOM with unseen 'thin' style"),
    # the common benchmark (no paper)
    Headline("bench-bn-fixes", "label-skew-fedtan", "Benchmark: FedTAN repairs label-skew damage",
             "no paper: FedTAN vs FedAvg+BN, same seeds and partitions", _DIG2),
    Headline("bench-bn-fixes", "feature-shift-fedbn", "Benchmark: FedBN repairs feature-shift damage",
             "no paper: FedBN vs FedAvg+BN, same seeds and partitions", "Q-DOM (clean, blur, thick)"),
)
