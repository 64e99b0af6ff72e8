"""HBN (Chen et al., *Hybrid Batch Normalisation: Resolving the Dilemma of Batch Normalisation
in Federated Learning*; paper 001): every figure and table as a registry entry.

One module per topic; importing this package imports every topic module in it, which registers
their entries:

- :mod:`.numbers`: the paper's reported numbers, verbatim, and its setup constants;
- :mod:`.setups`: the methods compared, the run specs of each profile, the lr protocol;
- :mod:`.regime`: the calibrated stand-ins and fair rates of the headline entries (issue 36);
- the topic modules: the toy figure, the partitions and the architecture table (``toy``), the
  learning-rate grids (``grids``), the performance comparison (``comparison``: the normalisers,
  Tables 1, 3; the FL solvers, Table 4), the architectures (``architectures``: Table 5, Fig. 7), the batch size
  (``batchsize``: Table 2, Figs. 1, 4), the ablations and sensitivities (``ablations``: Table 6,
  Figs. 5, 6).
"""

import importlib
import pkgutil

from bnfl.experiments.papers.hbn.numbers import TABLE1, TABLE2, TABLE3, TABLE4

__all__ = ["TABLE1", "TABLE2", "TABLE3", "TABLE4"]

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name not in ("numbers", "setups"):
        importlib.import_module(f"{__name__}.{_info.name}")  # importing registers the entries
