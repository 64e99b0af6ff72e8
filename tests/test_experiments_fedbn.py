"""The FedBN reproduction's own machinery: the per-client protocol, partitions with several clients
per domain, unequal domain sizes, unseen-domain clients, and the paper-consistency checks.

Every registered entry also runs at the smoke profile in ``tests/test_experiments_machinery.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bnfl.data import partition as P
from bnfl.data.domains import digit_domains, unseen_domain_test
from bnfl.experiments.domain_protocol import adaptation_split, new_client_model
from bnfl.experiments.papers.fedbn import numbers as N
from bnfl.experiments.papers.fedbn import setups as S
from bnfl.experiments.papers.fedbn.digits import most_shifted_domain
from bnfl.experiments.papers.fedbn.unequal import _permutation_check, unequal_sizes
from bnfl.experiments.printed import parse_mean_std

torch.set_num_threads(1)


def test_printed_mean_std_reads_fedbn_parentheses():
    assert parse_mean_std("63.0 (1.6)") == (63.0, 1.6)
    assert parse_mean_std("71.04 (0.31)") == (71.04, 0.31)
    assert parse_mean_std("91.53 ± 0.50") == (91.53, 0.5)
    with pytest.raises(ValueError, match="mean"):
        parse_mean_std("63.0")
    for _, cells in N.TABLE1 + N.TABLE11 + N.TABLE12:
        for c in cells:
            assert parse_mean_std(c)[1] >= 0


def test_table1_group_means_match_the_catalog():
    means = {m: [np.mean([float(v.split()[0]) for v in cells[lo:hi]]) for _, lo, hi in N.TABLE1_GROUPS]
             for m, cells in N.TABLE1}
    np.testing.assert_allclose(means["FedBN"], [70.475, 47.95, 68.7], atol=1e-9)
    np.testing.assert_allclose(means["SingleSet"], [65.05, 42.7667, 63.25], atol=1e-3)


@pytest.mark.parametrize("shards,use", [(1, None), (10, None), (10, 3), (4, 4)])
def test_by_domain_shards_are_disjoint_equal_shares_of_each_domain(shards, use):
    d = np.repeat(np.arange(3), [40, 50, 30])
    parts = P.by_domain(d, shards=shards, clients_per_domain=use, seed=1)
    per = use or shards
    assert len(parts) == 3 * per
    flat = np.concatenate(parts)
    assert len(set(flat.tolist())) == flat.size  # disjoint
    for j in range(3):
        mine = parts[j * per:(j + 1) * per]
        assert all((d[p] == j).all() for p in mine)  # client c belongs to domain c // per
        sizes = [p.size for p in mine]
        assert max(sizes) - min(sizes) <= 1 and abs(np.mean(sizes) - (d == j).sum() / shards) < 1
    if use is None:
        assert flat.size == d.size
    assert [p.tolist() for p in P.by_domain(d, shards=shards, clients_per_domain=use, seed=1)] == \
           [p.tolist() for p in parts]


def test_by_domain_bad_shards_are_clear_errors():
    d = np.repeat(np.arange(2), [5, 20])
    with pytest.raises(ValueError, match="cannot be split into 10 shards"):
        P.by_domain(d, shards=10)
    with pytest.raises(ValueError, match="clients_per_domain"):
        P.by_domain(d, shards=2, clients_per_domain=3)


def test_fl_partition_gives_every_client_its_domains_test_set():
    from bnfl import fl
    from bnfl.train.config import partition

    split = digit_domains(("clean", "contrast"), form="flat")
    cfg = fl.RunConfig(data={"name": "digit_domains", "domains": ["clean", "contrast"], "form": "flat"},
                       partition={"kind": "by_domain", "shards": 4, "clients_per_domain": 2})
    clients, tests = partition(cfg, split)
    assert len(clients) == len(tests) == 4
    for c, t in zip(clients, tests, strict=True):
        dom = int(split.domain_train[c[0]])
        assert (split.domain_train[c] == dom).all() and (split.domain_test[t] == dom).all()
        assert t.size == int((split.domain_test == dom).sum())


def test_digit_domains_train_sizes_truncate_each_domain():
    split = digit_domains(("clean", "blur", "thick"), train_sizes=[10, 40, 25])
    counts = np.bincount(split.domain_train.numpy())
    assert counts.tolist() == [10, 40, 25]
    full = digit_domains(("clean", "blur", "thick"))
    assert torch.equal(split.x_test, full.x_test)
    with pytest.raises(ValueError, match="one size"):
        digit_domains(("clean", "blur"), train_sizes=[10])
    with pytest.raises(ValueError, match="not both"):
        digit_domains(("clean", "blur"), train_sizes=[10, 10], train_per_domain=5)


def test_unseen_domain_test_redraws_the_test_digits_only():
    split = digit_domains(S.Q_DOMAINS)
    x, y = unseen_domain_test("thin", S.Q_DOMAINS)
    assert x.shape == split.x_test.shape and torch.equal(y, split.y_test)
    clean, _ = unseen_domain_test("clean", S.Q_DOMAINS)
    assert torch.equal(clean[:72], split.x_test[:72])  # domain 0 is clean: the same test digits
    assert not torch.equal(x, clean) and float(x.min()) >= -1 and float(x.max()) <= 1
    with pytest.raises(ValueError, match="unknown domain"):
        unseen_domain_test("swirl", S.Q_DOMAINS)


def _bn_net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        net[1].weight.uniform_(0.5, 2.0)
        net[1].bias.uniform_(-1, 1)
        net[1].running_mean.uniform_(-1, 1)
    return net


def test_new_client_averages_bn_affine_and_uses_its_own_statistics():
    clients = [_bn_net(0), _bn_net(1), _bn_net(2)]
    before = [{k: v.clone() for k, v in c.state_dict().items()} for c in clients]
    x = torch.randn(64, 4, dtype=torch.float32) * 3 + 1
    m = new_client_model(clients, x)
    bn = m[1]
    torch.testing.assert_close(bn.weight, torch.stack([c[1].weight for c in clients]).mean(0))
    torch.testing.assert_close(bn.bias, torch.stack([c[1].bias for c in clients]).mean(0))
    h = clients[0][0](x).detach()  # the shared layers are client 0's (= the global ones in FedBN)
    torch.testing.assert_close(bn.running_mean, h.mean(0))
    torch.testing.assert_close(bn.running_var, h.var(0, unbiased=True))
    assert not m.training
    for c, b in zip(clients, before, strict=True):  # the trained clients are untouched
        assert all(torch.equal(v, b[k]) for k, v in c.state_dict().items())
    with pytest.raises(ValueError, match="no trained clients"):
        new_client_model([], x)


def test_domain_accuracies_follow_fedbns_protocol():
    personal = {"domains": ["a", "b"], "client_domain": [0, 0, 1],
                "domain_acc_clients": [[90, 10, 50], [70, 20, 50], [30, 60, 50]]}
    assert S.domain_accuracies(personal) == [80.0, 60.0]  # own domain, mean over a domain's clients
    shared = {"domains": ["a", "b"], "domain_acc_global": [40.0, 50.0, 45.0]}
    assert S.domain_accuracies(shared) == [40.0, 50.0]
    assert S.domain_accuracies({"domain_acc": [1.0, 2.0]}) == [1.0, 2.0]
    assert np.isnan(S.domain_accuracies({"diverged": True, "domains": ["a"]})).all()


def test_local_epochs_keep_the_total_fixed():
    assert S.local_epochs(4, 50) == {"rounds": 12, "train": {"local_steps": 4, "local_unit": "epochs", "eval_every": 12}}
    assert S.local_epochs(16, 10)["rounds"] == 1
    with pytest.raises(ValueError):
        S.local_epochs(0)


def test_most_shifted_domain_is_computed_from_pixels():
    split = digit_domains(S.Q_DOMAINS)
    j, dist = most_shifted_domain(split)
    assert dist[0] == 0.0 and split.domains[j] == "contrast" and dist[j] == max(dist)


def test_unequal_sizes_keep_the_proportions_with_a_floor():
    sizes = unequal_sizes(N.TABLE15_SAMPLES, 287, 32)
    assert sizes == [58, 32, 287, 41, 41]
    assert unequal_sizes(("1", "2"), 100, 1) == [50, 100]


def test_table16_reads_consistently_only_in_the_reference_code_order():
    rows, claims = _permutation_check()
    by = {r["reading of Table 16's columns"]: r for r in rows}
    assert by["printed"]["cells below Table 14's 100% value"] > 0
    assert by["reference-code order"]["cells below Table 14's 100% value"] == 0
    assert claims[0].verdict == "pass" and claims[0].kind == "consistency"


def test_unseen_domain_adaptation_split_is_disjoint_seeded_and_covers_all():
    import torch

    adapt, held = adaptation_split(11, 3)
    assert len(adapt) == 5 and len(held) == 6
    assert not set(adapt.tolist()) & set(held.tolist())
    assert sorted(adapt.tolist() + held.tolist()) == list(range(11))
    again = adaptation_split(11, 3)
    assert torch.equal(adapt, again[0]) and torch.equal(held, again[1])
    assert not torch.equal(adaptation_split(11, 4)[0], adapt)
    with pytest.raises(ValueError, match="at least 2"):
        adaptation_split(1, 0)
