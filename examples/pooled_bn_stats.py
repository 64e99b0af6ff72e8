"""A worked BN fix for ``bnfl bench``: FedAvg whose server pools the clients' BN statistics.

FedAvg averages every uploaded tensor, the BN running variances included. The mean of the
clients' variances is the variance *within* clients only: when the clients' feature means differ
(label skew, feature shift), the variance of the union of their data is larger by the spread of
those means (the law of total variance),

    var_pooled = sum_k w_k * (var_k + (mean_k - mean)^2),   mean = sum_k w_k * mean_k,

and the global model, which normalises with the running statistics at test time, divides by too
small a variance. ``PooledStats`` keeps FedAvg for the weights and the BN affine parameters and the
running means, and gives each running variance the pooled value: a change of the server's step
only, in the shape of docs/own-fix.md's ``MedianStats``.

Put it on the common benchmark beside every BN fix (docs/bench.md)::

    bnfl bench examples/pooled_bn_stats.py --profile smoke --out bench-out
"""

from __future__ import annotations

import torch

from bnfl.fl import Algorithm, weighted_sum


class PooledStats(Algorithm):
    """FedAvg, except that each BN running variance is the pooled variance of the round's clients
    (the mean of their variances plus the weighted spread of their means)."""

    name = "pooled-stats"

    def aggregate(self, server, state, clients, weights, uploads):
        stats = set(server.groups["bn_stats"])  # running_mean / running_var of every BN layer
        new = {**state, **weighted_sum([{k: u[k] for k in server.upload_keys} for u in uploads], weights)}
        w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
        w = w / w.sum()
        for key in server.upload_keys:
            if key not in stats or not key.endswith("running_var"):
                continue
            mean_key = key[: -len("running_var")] + "running_mean"
            means = torch.stack([u[mean_key] for u in uploads]).double()  # (clients, C)
            spread = (w[:, None] * (means - (w[:, None] * means).sum(0)) ** 2).sum(0)
            new[key] = (new[key].double() + spread).to(new[key].dtype)  # within + between
        return new
