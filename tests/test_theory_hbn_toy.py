"""HBN Fig. 2 toy clusters (CATALOG hbn-fig2 checks)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bnfl.theory import hbn_toy as h


def test_hbn_fig2_claims():
    c = h.make_clusters(n=300, seed=0)
    local = h.local_normalize(c)
    glob = h.global_normalize(c)
    hyb = h.hybrid_normalize(c, alpha=0.0)
    assert h.centre_distance(local) < 0.05
    assert h.centre_distance(glob) > 1
    assert h.centre_distance(local) < h.centre_distance(hyb) < h.centre_distance(glob)
    assert abs(h.std_ratio(hyb) - 1) < abs(h.std_ratio(glob) - 1)


def test_per_sample_normalisation_collapses_2d_points():
    out = h.per_sample_normalize(h.make_clusters(n=50))
    for c in out:
        # each point lands on the line x2 = -x1 within [-1, 1]: (a-b)/2 / sqrt(((a-b)/2)^2 + eps)
        np.testing.assert_allclose(c[:, 0], -c[:, 1], atol=1e-12)
        assert np.all(np.abs(c) <= 1.0)
        assert np.median(np.abs(c)) > 0.99


@given(st.integers(0, 2**16), st.floats(-3, 3))
def test_hybrid_hbn_eq9_interpolates_and_limits(seed, alpha):
    c = h.make_clusters(n=40, seed=seed)
    np.testing.assert_allclose(h.hybrid_normalize(c, alpha=40.0)[0], h.global_normalize(c)[0], atol=1e-9)
    np.testing.assert_allclose(h.hybrid_normalize(c, alpha=-40.0)[1], h.local_normalize(c)[1], atol=1e-9)
    # the hybrid centres lie between local BN's (distance ~0) and global BN's
    d = h.centre_distance(h.hybrid_normalize(c, alpha=alpha))
    assert h.centre_distance(h.local_normalize(c)) - 1e-12 <= d <= h.centre_distance(h.global_normalize(c)) + 1e-12
    # local BN: every cluster has zero mean and unit variance
    for x in h.local_normalize(c):
        np.testing.assert_allclose(x.mean(0), 0, atol=1e-12)
        np.testing.assert_allclose(x.var(0), 1, atol=1e-3)


@given(st.integers(0, 2**16), st.integers(2, 40), st.integers(2, 40),
       st.lists(st.floats(-5, 5), min_size=2, max_size=2), st.floats(0.1, 3))
def test_hybrid_hbn_eq9_centre_distance_grows_with_alpha_up_to_global(seed, n_a, n_b, shift, scale):
    """Per feature the hybrid centre of cluster k is s (m_k - mu_g) / sqrt((1-s) v_k + s v_g + eps),
    which grows in |.| with s = sigmoid(alpha) (derivative ~ 2 (v_k + eps) + s (v_g - v_k) > 0), and
    the two clusters sit on opposite sides of mu_g: the centre distance is non-decreasing in alpha,
    from local BN's (0) to global BN's."""
    rng = np.random.default_rng(seed)
    c = [rng.normal(size=(n_a, 2)), rng.normal(size=(n_b, 2)) * scale + np.asarray(shift)]
    alphas = np.linspace(-30.0, 30.0, 61)
    d = np.array([h.centre_distance(h.hybrid_normalize(c, alpha=a)) for a in alphas])
    d_local, d_global = h.centre_distance(h.local_normalize(c)), h.centre_distance(h.global_normalize(c))
    tol = 1e-12 * (1 + d_global)
    assert np.all(np.diff(d) >= -tol)
    assert d_local - tol <= d[0] and d[-1] <= d_global + tol
    np.testing.assert_allclose(d[0], d_local, atol=1e-8 * (1 + d_global))  # s = sigmoid(-30) ~ 1e-13
    np.testing.assert_allclose(d[-1], d_global, rtol=1e-8)


def test_bad_inputs_and_plot():
    with pytest.raises(ValueError):
        h.make_clusters(means=((0, 0),), stds=((1, 1), (1, 1)))
    with pytest.raises(ValueError, match="NaN"):
        h.local_normalize([np.array([[np.nan, 0.0], [1.0, 1.0]])])
    with pytest.raises(ValueError, match="finite"):
        h.hybrid_normalize(h.make_clusters(n=5), alpha=float("inf"))
    fig = h.plot_clusters(h.all_normalizations(h.make_clusters(n=20)))
    assert len(fig.axes) == 5
    # readable on a page: a 2 x 3 grid (not one row of five), each panel at least 3.4 inches wide
    width, height = fig.get_size_inches()
    assert width / 3 >= 3.4 and height >= 6.5
    rows = sorted({round(ax.get_position().y0, 2) for ax in fig.axes})
    assert len(rows) == 2
    with pytest.raises(ValueError, match="ncols"):
        h.plot_clusters(h.all_normalizations(h.make_clusters(n=20)), ncols=0)
