"""Entries that no paper has: common benchmarks of bnfl's methods on shared settings.

Each module registers its entries like a paper's (:mod:`bnfl.experiments.registry` imports every
module found here); their ids start with ``bench-`` and their "paper" key is ``bench``:

- :mod:`.bn_fixes`: ``bench-bn-fixes``, the four BN fixes (FedTAN, HBN, FixBN, FedBN), FedAvg+BN
  and FedAvg+GN on the same three settings, with paired 95% intervals over seeds.
- :mod:`.calib_proxies`: ``bench-calib-proxies``, BN-only calibration of the headline claims' proxies
  (:mod:`bnfl.experiments.calibration`): can each proxy resolve the paper's effect?

``bnfl bench`` (:mod:`.bench_cli`) runs a user's methods beside the built-in ones on a suite's
protocol: :mod:`.bench_extended` (the default: five settings on a conv net, 13 methods) or
``bench-bn-fixes``'; :mod:`.bench` (the protocols, their hashes and the stored baseline runs in
``baselines/``), :mod:`.bench_board` (the leaderboard). These register no entries.
"""
