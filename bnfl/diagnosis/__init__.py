"""Diagnose Batch Normalization on a federated partition, and recommend a fix.

``bnfl.diagnose(model, data, ...)`` (:func:`diagnose`) measures, per BN layer, how far the clients'
statistics are from the union's and what that does to the first local step's gradient; tells label
skew from feature shift; and recommends a fix from one rule table (:data:`RULES`) with what each
fix costs in communication. ``bnfl diagnose --config FILE`` runs it on a run config
(:mod:`bnfl.diagnosis.cli`); :mod:`bnfl.diagnosis.report` prints, plots and serialises it.
"""

from __future__ import annotations

from bnfl.diagnosis import measure, rules
from bnfl.diagnosis._core import client_samples, diagnose
from bnfl.diagnosis.report import Diagnosis
from bnfl.diagnosis.rules import (
           RULES,
           Facts,
           Recommendation,
           Rule,
           classify_shift,
           communication,
           recommend,
)

__all__ = ["RULES", "Diagnosis", "Facts", "Recommendation", "Rule", "classify_shift", "client_samples",
           "communication", "diagnose", "measure", "recommend", "rules"]
