"""FedBN (Li, Jiang, Zhang, Kamp, Dou, *FedBN: Federated Learning on Non-IID Features via Local
Batch Normalization*, ICLR 2021; paper 004): every figure and table as a registry entry.

One module per topic; importing this package imports every topic module in it, which registers
their entries:

- :mod:`.numbers`: the paper's reported numbers, verbatim, and its setup constants;
- :mod:`.setups`: the methods compared, the run specs of each profile, the per-client protocol;
- the topic modules: the toy and theory figures, the tables reproduced from bnfl's own objects
  (notation, architectures, client settings, ABIDE sites), and the training entries.
"""

import importlib
import pkgutil

from bnfl.experiments.papers.fedbn.numbers import TABLE1, TABLE11, TABLE13, TABLE14

__all__ = ["TABLE1", "TABLE11", "TABLE13", "TABLE14"]

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name not in ("numbers", "setups"):
        importlib.import_module(f"{__name__}.{_info.name}")  # importing registers the entries
