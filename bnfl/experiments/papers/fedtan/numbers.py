"""FedTAN's reported numbers, verbatim, and the setup constants the paper states or implies.

Wang, Shi, Chang, *Why Batch Normalization Damage Federated Learning on Non-IID Data?*
(IEEE TNNLS; papers 000 and 003 in ``shared/papers``), CATALOG section 1.2. Strings are kept
as printed (``"91.53 ± 0.50"``); :mod:`bnfl.experiments.printed` reads them.
"""

from __future__ import annotations

from bnfl.experiments.printed import printed_table

#: Table 1: test accuracy (%), CIFAR-10, SGD with momentum 0.9 and wd 1e-4, 5 runs (i.i.d., non-i.i.d.).
TABLE1 = printed_table("""
    Centralized+BN     | 91.53 ± 0.50 | 91.53 ± 0.50
    FedTAN             | 91.26 ± 0.21 | 87.66 ± 0.43
    FedAvg+BN          | 91.35 ± 0.24 | 45.90 ± 6.39
    FedAvg+Algorithm 2 | 91.42 ± 0.15 | 76.01 ± 1.37
    FedBN              | 90.74 ± 0.28 | 19.46 ± 0.05
    SiloBN             | 91.31 ± 0.29 | 19.43 ± 0.09
""")

#: Table 2: FedTAN vs FedAvg+GN, CIFAR-10 (w/o mom. iid, non-iid; with mom. iid, non-iid).
TABLE2 = printed_table("""
    FedTAN    | 89.32 ±0.28 | 86.69 ±0.82 | 91.26 ±0.21 | 87.66 ±0.43
    FedAvg+GN | 85.99±0.71  | 79.01±1.63  | 88.41±0.46  | 82.66±1.48
""")

#: Table 3: communication per iteration, 5 clients, ResNet-20, 32-bit floats (MB, % over BN, % over GN).
TABLE3 = printed_table("""
    FedTAN    | 6.2679 | 1.02%  | 1.52%
    FedAvg+BN | 6.2049 | 0      | 0.51%
    FedAvg+GN | 6.1734 | -0.51% | 0
""")

#: Table 4: FedTAN-II communication over the whole run, CIFAR-10 (GB, extra rounds, extra bits).
TABLE4 = printed_table("""
    FedTAN-II (M=1000) | 60.6563 | 85.07% | 0.1014%
    FedTAN-II (M=2000) | 60.7178 | 91.94% | 0.2027%
    FedTAN-II (M=4000) | 60.8408 | 95.80% | 0.4045%
    FedTAN             | 61.2100 | 98.28% | 1.0051%
""")

#: Table 5: FedTAN-II communication, MNIST (784x30x10). The FedTAN row is only in 003.
TABLE5 = printed_table("""
    FedTAN-II (M=10)  | 2.1388 | 5.66%  | 0.0100%
    FedTAN-II (M=50)  | 2.1397 | 23.08% | 0.0501%
    FedTAN-II (M=100) | 2.1408 | 37.50% | 0.1002%
    FedTAN            | 2.1386 | 75%    | 0.4992%
""")

#: Supplement D: labels (1-based) each client holds, per k; each at fraction 1/k.
TABLE_D: dict[int, tuple[tuple[int, ...], ...]] = {
    2: ((1, 2), (3, 4), (5, 6), (7, 8), (9, 10)),
    4: ((1, 2, 3, 4), (3, 4, 5, 6), (5, 6, 7, 8), (7, 8, 9, 10), (9, 10, 1, 2)),
    6: ((1, 2, 3, 4, 5, 6), (3, 4, 5, 6, 7, 8), (5, 6, 7, 8, 9, 10), (7, 8, 9, 10, 1, 2), (9, 10, 1, 2, 3, 4)),
    8: ((1, 2, 3, 4, 5, 6, 7, 8), (3, 4, 5, 6, 7, 8, 9, 10), (5, 6, 7, 8, 9, 10, 1, 2),
        (7, 8, 9, 10, 1, 2, 3, 4), (9, 10, 1, 2, 3, 4, 5, 6)),
    10: tuple(tuple(range(1, 11)) for _ in range(5)),
}

#: Setup constants stated (or inferred, CATALOG §1.0) in the paper.
CIFAR_ITERATIONS = 10_000  # [inferred] reference code default; 580K rounds / 58 (FixBN Tab. 4)
MNIST_ITERATIONS = 500  # [inferred] from Table 5's round percentages (CATALOG §5.3)
NUM_CLIENTS = 5
