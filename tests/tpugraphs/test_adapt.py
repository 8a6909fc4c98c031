"""Per-graph adaptation: planted signals are recovered, the prior is weighed by the
evidence, repeats are averaged, degenerate input falls back to the prior, and the
merged ridge equals the plain one."""

from __future__ import annotations

import numpy as np
import pytest

from xla_costmodel.tpugraphs import adapt
from xla_costmodel.tpugraphs.metrics import kendall_tau


def planted(n: int, layout: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Configs whose log runtime depends on two known columns (plus 1% noise).

    Tile: 24 columns of small ints, the signal in columns 3 and 7. Layout: 6 nodes,
    each picking one of 4 fixed 18-value layouts (columns move together, as in real
    files); the signal is in the choices of nodes 1 and 4.
    """
    rng = np.random.default_rng(0)
    if layout:
        table = rng.integers(-1, 6, (6, 4, 18))
        choice = rng.integers(0, 4, (n, 6))
        configs = table[np.arange(6), choice].astype(np.float32)
        a, b = choice[:, 1], choice[:, 4]
    else:
        configs = rng.integers(0, 4, (n, 24)).astype(np.float32)
        a, b = configs[:, 3].astype(int), configs[:, 7].astype(int)
    log_rt = 12 + np.array([0.0, 0.3, -0.2, 0.5])[a] + 0.4 * (b == 2)
    return configs, np.exp(log_rt + rng.normal(0, 0.01, n))


def split(
    n_fit: int, n: int = 400, layout: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    configs, rt = planted(n, layout=layout)
    return configs[:n_fit], rt[:n_fit], configs[n_fit:], rt[n_fit:]


@pytest.mark.parametrize("layout", [False, True])
def test_planted_signal_is_recovered_without_a_prior(layout: bool) -> None:
    c, r, tc, tr = split(100, layout=layout)
    model = adapt.fit(c, r, None)
    assert model.measurements == len(np.unique(c.reshape(100, -1), axis=0))
    assert kendall_tau(model.score(tc, None), tr) > 0.75


@pytest.mark.parametrize("layout", [False, True])
def test_planted_signal_is_recovered_with_a_noisy_prior(layout: bool) -> None:
    c, r, tc, tr = split(100, layout=layout)
    rng = np.random.default_rng(1)
    noisy = lambda rt: np.log(rt) + rng.normal(0, 0.1, len(rt))  # noqa: E731
    model = adapt.fit(c, r, noisy(r))
    assert 0 < model.prior_slope < adapt.PRIOR_SLOPE  # the data discount the prior
    assert kendall_tau(model.score(tc, noisy(tr)), tr) > 0.75


def test_an_informative_prior_helps_with_three_measurements() -> None:
    c, r, tc, tr = split(3)
    good = lambda rt: np.log(rt) + 0.01 * np.sin(np.arange(len(rt)))  # noqa: E731
    with_prior = kendall_tau(adapt.fit(c, r, good(r)).score(tc, good(tr)), tr)
    without = kendall_tau(adapt.fit(c, r, None).score(tc, None), tr)
    assert with_prior > 0.8
    assert with_prior > without + 0.2
    assert with_prior >= kendall_tau(good(tr), tr) - 0.1  # close to the prior alone


@pytest.mark.parametrize("kind", ["inverted", "noise"])
def test_a_misleading_prior_does_not_ruin_many_measurements(kind: str) -> None:
    c, r, tc, tr = split(200)
    rng = np.random.default_rng(2)
    bad = (
        (lambda rt: -np.log(rt))
        if kind == "inverted"
        else (lambda rt: rng.normal(size=len(rt)))
    )
    model = adapt.fit(c, r, bad(r))
    tau = kendall_tau(model.score(tc, bad(tr)), tr)
    assert tau > 0.7
    assert tau > kendall_tau(adapt.fit(c, r, None).score(tc, None), tr) - 0.05


def test_repeats_are_averaged_in_log_space() -> None:
    c, r, tc, _ = split(30)
    repeated = np.concatenate([c, c[:5]])
    runtimes = np.concatenate([r, r[:5] * 4.0])
    once = r.copy()
    once[:5] *= 2.0  # geometric mean of x and 4x
    a = adapt.fit(repeated, runtimes, None)
    b = adapt.fit(c, once, None)
    assert a.measurements == b.measurements == len(np.unique(c, axis=0))
    np.testing.assert_allclose(a.score(tc, None), b.score(tc, None), atol=1e-6)


@pytest.mark.parametrize("case", ["one_config", "equal_runtimes", "one_row"])
def test_degenerate_input_falls_back_to_the_prior(case: str) -> None:
    c, r, tc, _ = split(20)
    if case == "one_config":
        c, r = np.repeat(c[:1], 5, axis=0), r[:5]
    elif case == "equal_runtimes":
        r = np.full(len(r), 123.0)
    else:
        c, r = c[:1], r[:1]
    prior = np.linspace(0, 1, len(r))
    test_prior = np.random.default_rng(3).normal(size=len(tc))
    scores = adapt.fit(c, r, prior).score(tc, test_prior)
    assert np.isfinite(scores).all()
    np.testing.assert_array_equal(
        np.argsort(scores, kind="stable"), np.argsort(test_prior, kind="stable")
    )
    flat = adapt.fit(c, r, None).score(tc, None)
    assert np.isfinite(flat).all() and np.ptp(flat) == 0


def test_constant_columns_and_constant_prior_give_finite_scores() -> None:
    c, r, tc, tr = split(50)
    c[:, 10:] = 7.0  # most columns constant among the measured configs
    scores = adapt.fit(c, r, np.ones(len(r))).score(tc, np.ones(len(tc)))
    assert np.isfinite(scores).all()
    assert kendall_tau(scores, tr) > 0.7  # columns 3 and 7 still vary


def test_unseen_values_contribute_nothing() -> None:
    c, r, _, _ = split(50)
    model = adapt.fit(c, r, None)
    unseen = np.full((1, 24), 99.0)
    assert model.score(unseen, None)[0] == np.float32(model.offset)
    one_known = unseen.copy()
    one_known[0, 3] = 1.0
    f = np.flatnonzero((model.cols == 3) & (model.values == 1.0))
    assert model.score(one_known, None)[0] == pytest.approx(
        model.offset + model.weights[f].sum(), abs=1e-5
    )


def test_merged_ridge_equals_the_plain_ridge() -> None:
    c, r, tc, _ = split(60, layout=True)
    prior = np.log(r) + np.random.default_rng(4).normal(0, 0.2, len(r))
    flat = c.reshape(len(c), -1)
    pairs = [(j, v) for j in range(flat.shape[1]) for v in np.unique(flat[:, j])]
    pairs = [(j, v) for j, v in pairs if np.ptp(flat[:, j]) > 0]
    x = np.column_stack([flat[:, j] == v for j, v in pairs]).astype(np.float64)
    means = x.mean(0)
    zp = (prior - prior.mean()) / prior.std()
    z = adapt.regression_target(np.log(r)) - adapt.PRIOR_SLOPE * zp
    a = np.column_stack([x - means, zp])
    pen = np.append(np.full(len(pairs), adapt.RIDGE), adapt.PRIOR_STRENGTH)
    beta = np.linalg.solve(a.T @ a + np.diag(pen), a.T @ z)
    tflat = tc.reshape(len(tc), -1)
    tx = np.column_stack([tflat[:, j] == v for j, v in pairs]) - means
    test_prior = np.random.default_rng(5).normal(12, 0.3, len(tc))
    tzp = (test_prior - prior.mean()) / prior.std()
    want = tx @ beta[:-1] + (adapt.PRIOR_SLOPE + beta[-1]) * tzp
    got = adapt.fit(c, r, prior).score(tc, test_prior)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_fits_are_bit_for_bit_deterministic() -> None:
    c, r, tc, _ = split(80, layout=True)
    prior = np.log(r)[::-1].copy()
    a, b = adapt.fit(c, r, prior), adapt.fit(c, r, prior)
    assert a.offset == b.offset and a.prior_slope == b.prior_slope
    for field in ("cols", "values", "weights"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    p = np.arange(len(tc), dtype=np.float64)
    assert np.array_equal(a.score(tc, p), b.score(tc, p))


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c, r: adapt.fit(c[:, 0], r, None), "configs"),
        (lambda c, r: adapt.fit(c[:0], r[:0], None), "configs"),
        (lambda c, r: adapt.fit(c.astype(str), r, None), "configs"),
        (lambda c, r: adapt.fit(np.where(c > 2, np.nan, c), r, None), "configs"),
        (lambda c, r: adapt.fit(c, r[:-1], None), "runtimes_ns"),
        (lambda c, r: adapt.fit(c, -r, None), "runtimes_ns"),
        (lambda c, r: adapt.fit(c, r, np.full(len(r), np.inf)), "prior"),
        (lambda c, r: adapt.fit(c, r, r[:3]), "prior"),
        (lambda c, r: adapt.fit(c, r, None, ridge=0.0), "ridge"),
        (lambda c, r: adapt.fit(c, r, None, target="cubic"), "target"),
        (lambda c, r: adapt.fit(c, r, None).score(c[:, :5], None), "configs"),
        (lambda c, r: adapt.fit(c, r, None).score(c, r), "prior"),
        (lambda c, r: adapt.fit(c, r, r).score(c, None), "prior"),
        (lambda c, r: adapt.fit(c, r, r).score(c, r[:2]), "prior"),
    ],
)
def test_bad_input_raises_a_value_error_naming_it(call: object, field: str) -> None:
    c, r, _, _ = split(20)
    with pytest.raises(ValueError, match=f"^{field}: "):
        call(c, r)  # type: ignore[operator]
