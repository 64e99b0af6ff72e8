"""FedTAN (Wang, Shi, Chang, *Why Batch Normalization Damage Federated Learning on Non-IID
Data?*, IEEE TNNLS; papers 000 and 003): every figure and table as a registry entry.

One module per section of the paper; importing this package registers all 20 entries:

- :mod:`.numbers`: the paper's reported numbers, verbatim, and its setup constants;
- :mod:`.setups`: the methods compared and the run specs of each profile;
- :mod:`.schematics` (Figs. 1-2, Supp. D), :mod:`.noniid` (Figs. 3-5, 12, Table 1),
  :mod:`.other_data` (Figs. 6, 7, 8, 13), :mod:`.groupnorm` (Fig. 9, Table 2, Fig. 10),
  :mod:`.communication` (Tables 3-5, FedTAN-II: Figs. 11, 14).
"""

from bnfl.experiments.papers.fedtan import communication, groupnorm, noniid, other_data  # noqa: F401  (registers)
from bnfl.experiments.papers.fedtan.numbers import TABLE1, TABLE2, TABLE3, TABLE4, TABLE5, TABLE_D
from bnfl.experiments.papers.fedtan.schematics import layer_graph, paper_class_table

__all__ = ["TABLE1", "TABLE2", "TABLE3", "TABLE4", "TABLE5", "TABLE_D", "layer_graph", "paper_class_table"]
