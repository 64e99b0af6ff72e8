"""Entries that no paper has: common benchmarks of bnfl's methods on shared settings.

Each module registers its entries like a paper's (:mod:`bnfl.experiments.registry` imports every
module found here); their ids start with ``bench-`` and their "paper" key is ``bench``:

- :mod:`.bn_fixes`: ``bench-bn-fixes``, the four BN fixes (FedTAN, HBN, FixBN, FedBN), FedAvg+BN
  and FedAvg+GN on the same three settings, with paired 95% intervals over seeds.
- :mod:`.calib_proxies`: ``bench-calib-proxies``, BN-only calibration of the headline claims' proxies
  (:mod:`bnfl.experiments.calibration`): can each proxy resolve the paper's effect?

``bnfl bench`` (:mod:`.bench_cli`) runs a user's methods on ``bench-bn-fixes``' protocol beside the
built-in ones: :mod:`.bench` (the protocol, its hash and the stored baseline runs in
``baselines/``), :mod:`.bench_board` (the leaderboard). :mod:`.bench_extended` declares the
extended benchmark's settings and methods (not yet run). These register no entries.
"""
