"""FixBN ((Zhong, Chen, Chao), *Making Batch Normalization Great in Federated Deep Learning*; paper
002): every figure and table as a registry entry.

One module per topic; importing this package registers all 11 entries:

- :mod:`.numbers`: the paper's reported numbers, verbatim, and its setup constants;
- :mod:`.setups`: budgets, methods and the run specs of each profile; :mod:`.runs`: runs with
  the statistics log, re-accumulated statistics or segmentation metrics;
- :mod:`.motivation` (Fig. 1, Table 1, Fig. 2), :mod:`.noniid` (Fig. 3, Tables 2-3), :mod:`.other_fixes`
  (Tables 4-5),
  :mod:`.esweep` (Figs. 4-6).
"""

from bnfl.experiments.papers.fixbn import esweep, motivation, noniid, other_fixes  # noqa: F401  (importing registers the entries)
from bnfl.experiments.papers.fixbn.numbers import TABLE1, TABLE2, TABLE3, TABLE4, TABLE5

__all__ = ["TABLE1", "TABLE2", "TABLE3", "TABLE4", "TABLE5"]
