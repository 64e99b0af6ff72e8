r"""Which BN fix for which setting: the shift classification, the rule table and each fix's cost.

Everything a diagnosis decides is stated here, once.

**Shift.** Label skew is a difference of :math:`P(y)` across clients, feature shift a difference
of :math:`P(x \mid y)`. Both are measured against their value on an i.i.d. re-partition of the
same samples (same client sizes, seeded; the *floor*), so that finite clients do not read as
shift:

- label skew when the label divergence :math:`D_y` (mean total-variation distance, see
  :func:`bnfl.diagnosis.measure.label_divergence`) exceeds its floor by
  :data:`LABEL_SKEW_THRESHOLD`;
- feature shift when the between-client share of the first BN layer's input variance *within
  classes* (:func:`bnfl.diagnosis.measure.layer_shares`, ``between_given_label``) is at least
  :data:`FEATURE_SHIFT_RATIO` times its floor and exceeds it by at least
  :data:`FEATURE_SHIFT_MIN_EXCESS` (a ratio, because the floor depends on the layer: about 0.07
  after the MLP's first linear layer, 0.001-0.008 after a convolution, whose channel statistics
  pool many positions). When no class is held by two clients, feature shift cannot be told apart
  from label skew and is not reported.
- small batches when the batch noise at the configured batch size (what BN sees: the error of a
  batch's per-channel mean and standard deviation over its B x H x W positions against the
  population's, in units of its variance, :func:`bnfl.diagnosis.measure.batch_noise`), summed
  over the BN layers (:func:`total_batch_noise`), reaches :data:`SMALL_BATCH_THRESHOLD`.

Calibration (embedded digits at initialisation, 5 clients, up to 256 samples each, seed 0;
excess of D_y over its floor / within-class share as a multiple of its floor). MLP
64-32-BN-32-BN-10: i.i.d. 0.003 / 1.3x; Dirichlet(5) 0.10 / 1.0x; Dirichlet(0.5) 0.31 / 0.8x;
k = 4 classes per client 0.52 / 0.3x; k = 2 0.73 / not measurable; the six feature-shift domains
of :func:`bnfl.data.digit_domains` 0.000 / 12x. The CNNs ``q_lenet``, ``digit_cnn`` and
``q_res``: i.i.d. 1.1-1.2x, Dirichlet(0.5) 0.7-0.8x, k = 4 0.2x, domains 29x (excess 0.067 to
0.110). The label threshold sits between the mild Dirichlet(5) skew (read as no shift: its
FedAvg+BN gradient error, 0.29, is close to the i.i.d. 0.23) and the clear cases.

The small-batch threshold is calibrated on measured damage (``benchmarks/calibrate_small_batch.py``:
FedAvg+BN against FedAvg+GN, the same model with GroupNorm, on the embedded digits, 10 rounds of
1 local epoch, lr 0.05, every client every round, seeds 0-2; BN's damage = GN - BN final test
accuracy in points, paired 95% t-interval; noise at initialisation, summed over BN layers).
5 clients, Dirichlet(0.5): MLP ``q_mlp_bn`` (2 BN layers) B = 2 noise 1.76, damage +42.1
[21.2, 63.0]; B = 4 0.85, +4.4 [0.8, 8.1]; B = 32 0.092, +3.1 [-0.3, 6.6]. LeNet ``q_lenet``
(2 BN layers, maps 8x8 and 4x4) B = 2 0.156, -0.9 [-8.3, 6.5]; B = 4 0.109, -0.4 [-3.5, 2.7];
B = 32 0.017, -3.2 [-9.7, 3.2]. 20 clients, Dirichlet(0.1), deep layers on 2x2 maps (HBN's
regime): ResNet-20 layout ``q_res`` (7 BN layers) B = 2 0.885, +4.7 [3.5, 5.9]; B = 4 0.526,
+2.0 [-6.0, 10.1]; B = 32 0.077, +10.7 [-14.3, 35.7] (both undertrained after 10 rounds of
2-3 steps); ``tiny_vgg`` (6 BN layers) B = 2 0.770, +4.4 [-6.2, 15.1]; B = 4 0.484, -2.5
[-13.3, 8.3]; B = 32 0.066, -1.6 [-24.7, 21.6]; ``q_scnn`` (HBN's Simple-CNN, 3 BN layers)
B = 2 0.357, -1.5 [-3.9, 0.9]. The committed HBN Table 2 runs (``figures/hbn-tab2``: ``q_scnn``,
20 clients, Dirichlet(0.6) and (0.3), lr 0.0025 with momentum, 60 rounds) show no damage at
B = 2 either (-0.3 [-4.5, 3.9] and -0.3 [-3.0, 2.5]; noise 0.40). The threshold, 0.7, sits
between the largest noise without measured damage (0.526) and the smallest with it (0.85).
The mean over layers, the previous measure, does not separate the conv nets (``q_scnn`` 0.119
without damage, ``q_res`` 0.126 with it), nor does the noisiest layer with room to spare (0.21
for ``q_scnn`` in HBN's setting, 0.231 for ``q_res``): a conv net is hurt when several layers on
small maps are noisy, and the sum counts them. ``tests/test_diagnose.py`` pins the verdicts.
The sum grows with depth: calibrated on 2-7 BN layers; for deeper nets it is an extrapolation
(the 9-BN-layer MLP ``q_plain`` reads 0.88 at B = 16, unmeasured; ResNet-20 on 3x32x32 inputs,
19 BN layers, 0.16 at B = 2).

**Rules** (:data:`RULES`, first match wins):

1. no shift, batches not small: BN is not the problem (keep FedAvg+BN);
2. small batches, no shift: the batch statistics are noisy whoever holds the data: FedAvg+GN
   (no batch statistics) or HBN;
3. small batches with shift: HBN (global statistics mixed with the batch's, HBN eqs. 8-11) or
   FedAvg+GN;
4. feature shift and per-client models acceptable: FedBN (BN layers stay local, FedBN Alg. 1);
5. shift, one global model, extra synchronous rounds acceptable: FedTAN (the exact centralized
   gradient, eq. 41; 3L+1 rounds per iteration), else FixBN;
6. shift, one global model: FixBN (frozen global statistics after an exploration phase; FedAvg's
   communication), then HBN, then FedTAN.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from bnfl.fl.state import bn_modules
from bnfl.methods import METHODS
from bnfl.nn import replace_norm
from bnfl.train.accounting import comm_volume

__all__ = [
    "FEATURE_SHIFT_MIN_EXCESS",
    "FEATURE_SHIFT_RATIO",
    "FIXES",
    "Facts",
    "LABEL_SKEW_THRESHOLD",
    "RULES",
    "Recommendation",
    "Rule",
    "SMALL_BATCH_THRESHOLD",
    "classify_shift",
    "communication",
    "recommend",
    "total_batch_noise",
]

#: Excess of the label divergence D_y over its i.i.d. floor that counts as label skew.
LABEL_SKEW_THRESHOLD = 0.15
#: Multiple of its i.i.d. floor the first BN layer's within-class between-client share must reach
#: to count as feature shift ...
FEATURE_SHIFT_RATIO = 3.0
#: ... and its smallest excess over the floor (so that a tiny floor does not turn noise into shift).
FEATURE_SHIFT_MIN_EXCESS = 0.02
#: Batch noise (:func:`bnfl.diagnosis.measure.batch_noise`, summed over BN layers by
#: :func:`total_batch_noise`) that counts as small batches: between the noise of BN runs at small B
#: without damage (at most 0.526) and with it (at least 0.85; module docstring). For an MLP with
#: two BN layers of independent features: B <= 4.
SMALL_BATCH_THRESHOLD = 0.7

#: The methods a recommendation chooses from, in the order the cost table lists them.
FIXES = ("fedavg+bn", "fedtan", "fedavg+alg2", "fixbn", "hbn", "fedbn", "fedavg+gn")


def total_batch_noise(layer_noise: Sequence[float]) -> float:
    r"""The small-batch rule's measure: the batch noise :math:`\nu_l` of each BN layer, summed.

    Each BN layer normalises with its own noisy batch statistics, and the errors of the layers a
    sample passes through add up in the network's output; a conv net whose late layers sit on
    small maps is hurt when several of them are noisy (the calibration in the module docstring:
    neither the mean over layers nor the noisiest layer separates the conv nets BN hurts at B = 2
    from those it does not).

    Parameters
    ----------
    layer_noise : sequence of float
        :func:`bnfl.diagnosis.measure.batch_noise` of each BN layer.
    """
    return float(sum(layer_noise))


def classify_shift(label: float | None, label_floor: float | None, feature: float | None,
                   feature_floor: float | None) -> str:
    """``"none"``, ``"label"``, ``"feature"`` or ``"label+feature"``.

    Parameters
    ----------
    label, label_floor : float or None
        The label divergence :math:`D_y` and its value on an i.i.d. re-partition.
    feature, feature_floor : float or None
        The first BN layer's within-class between-client share and its i.i.d. value.
        ``None``: not measurable, counts as absent.
    """
    is_label = label is not None and label_floor is not None and label - label_floor >= LABEL_SKEW_THRESHOLD
    is_feature = (feature is not None and feature_floor is not None and feature >= FEATURE_SHIFT_RATIO * feature_floor
                  and feature - feature_floor >= FEATURE_SHIFT_MIN_EXCESS)
    label, feature = is_label, is_feature
    return {(False, False): "none", (True, False): "label", (False, True): "feature",
            (True, True): "label+feature"}[(label, feature)]


@dataclass(frozen=True)
class Facts:
    """What the rules read.

    Attributes
    ----------
    shift : {"none", "label", "feature", "label+feature"}
    small_batch : bool
    per_client_models : bool
        Each client may keep its own model (personalised FL).
    sync_rounds_ok : bool
        Clients can take part in extra synchronous exchanges inside a local step (FedTAN's
        3L+1 rounds per iteration).
    """

    shift: str
    small_batch: bool
    per_client_models: bool
    sync_rounds_ok: bool


@dataclass(frozen=True)
class Rule:
    """One row of the which-fix table: when it applies, what it recommends (first = primary), why."""

    when: str
    fixes: tuple[str, ...]
    reason: str
    applies: Callable[[Facts], bool]


#: The which-fix table (first match wins); see the module docstring.
RULES: tuple[Rule, ...] = (
    Rule("no shift, batches not small", ("fedavg+bn",),
         "the clients' statistics agree up to sampling noise: BN is not the problem; plain FedAvg+BN",
         lambda f: f.shift == "none" and not f.small_batch),
    Rule("small batches, no shift", ("fedavg+gn", "hbn"),
         "batch statistics are noisy at this batch size whatever the split: a batch-free norm (GN) "
         "or HBN's global statistics",
         lambda f: f.shift == "none" and f.small_batch),
    Rule("small batches with shift", ("hbn", "fedavg+gn"),
         "small batches and skewed clients: HBN mixes pooled global statistics (eq. 8) with the batch's "
         "and costs almost FedAvg's communication; GN avoids batch statistics altogether",
         lambda f: f.small_batch),
    Rule("feature shift, per-client models acceptable", ("fedbn",),
         "the clients' features differ (P(x|y)): FedBN keeps each client's BN layers local and shares the rest",
         lambda f: "feature" in f.shift and f.per_client_models),
    Rule("shift, one global model, synchronous rounds acceptable", ("fedtan", "fixbn"),
         "FedTAN aggregates statistics and stat-gradients layer by layer (eqs. 39-41): its first-step "
         "gradient is the centralized one, for 3L more communication rounds per iteration",
         lambda f: f.sync_rounds_ok),
    Rule("shift, one global model", ("fixbn", "hbn", "fedtan"),
         "FixBN freezes global statistics after an exploration phase, so local steps stop using skewed "
         "batch statistics, at FedAvg's communication; HBN and FedTAN follow (FedTAN needs 3L+1 "
         "synchronous rounds per iteration)",
         lambda f: True),
)


@dataclass(frozen=True)
class Recommendation:
    """The first rule of :data:`RULES` that applies, with its fixes."""

    fix: str
    alternatives: tuple[str, ...]
    rule: str
    reason: str


def recommend(facts: Facts) -> Recommendation:
    """The recommendation of the first rule of :data:`RULES` that applies to ``facts``."""
    if facts.shift not in ("none", "label", "feature", "label+feature"):
        raise ValueError(f"shift must be none, label, feature or label+feature, got {facts.shift!r}")
    rule = next(r for r in RULES if r.applies(facts))
    return Recommendation(fix=rule.fixes[0], alternatives=rule.fixes[1:], rule=rule.when, reason=rule.reason)


def _hbn_round_bytes(model: nn.Module, num_clients: int, element_size: int) -> tuple[int, int]:
    """HBN's bytes per training round and its extra statistics-only round T+1 (HBN Alg. 1).

    A round is FedAvg+BN's exchange (the model with the global statistics down, the model up)
    where each client's upload carries its eq. 7 moments (C means, C variances) plus one count
    per BN layer instead of running statistics; round T+1 sends the model down and the moments
    up once. Equal to what :class:`bnfl.fl.comm.Channel` counts (tests/test_diagnose.py).
    """
    base = comm_volume(model, num_clients, "fedavg+bn", element_size=element_size)
    bns = bn_modules(model)
    moments = sum(2 * b.num_features + 1 for _, b in bns)
    final = base.model_elements * element_size + num_clients * moments * element_size
    return base.bytes + num_clients * len(bns) * element_size, final


def communication(model: nn.Module, num_clients: int, *, element_size: int = 4) -> list[dict[str, Any]]:
    """Bytes and communication rounds per training round of each fix of :data:`FIXES` on ``model``.

    Closed forms of :func:`bnfl.fl.comm_volume` (FedTAN Tables 3-5; N uploads + one multicast
    per exchange), HBN's from :func:`_hbn_round_bytes`, FedAvg+GN's on a copy of ``model`` with
    every BN layer replaced by GroupNorm (2 groups; ``None`` where the channels do not divide).

    Returns
    -------
    list of dict
        ``method``, ``label``, ``bytes`` (per round), ``rounds`` (communication rounds per
        round), ``extra`` (bytes relative to FedAvg+BN), ``leaves_client`` (what a client sends
        besides its model), ``note``.
    """
    base = comm_volume(model, num_clients, "fedavg+bn", element_size=element_size).bytes
    sends = {"fedavg+bn": "running statistics inside the model", "fedtan": "per-layer batch means, variances and stat-gradients",
             "fedavg+alg2": "per-layer batch means and variances",
             "hbn": "per-layer means, variances and counts of its data",
             "fedbn": "its BN layers stay on the client", "fixbn": "running statistics until frozen"}
    rows = []
    for mid in FIXES:
        m = METHODS[mid]
        note = ""
        if mid == "hbn":
            b, final = _hbn_round_bytes(model, num_clients, element_size)
            r = 1
            note = f"+ one statistics round at the end ({final / 1024:.1f} KiB)"
        elif mid == "fedavg+gn":
            try:
                gn = replace_norm(copy.deepcopy(model), "gn")
                v = comm_volume(gn, num_clients, mid, element_size=element_size)
                b, r = v.bytes, v.rounds
                note = "no BN statistics at all (GroupNorm, 2 groups)"
            except (ValueError, RuntimeError) as err:
                b, r, note = None, None, f"GN does not fit this model: {err}"
        else:
            v = comm_volume(model, num_clients, mid, element_size=element_size)
            b, r = v.bytes, v.rounds
        rows.append({"method": mid, "label": m.label, "bytes": b, "rounds": r,
                     "extra": None if b is None else b / base - 1,
                     "leaves_client": sends.get(mid, ""), "note": note})
    return rows
