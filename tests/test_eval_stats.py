"""The eval's statistics against values worked out by hand (and published tables)."""

from __future__ import annotations

import math

import pytest

from sdk.eval import binomial_two_sided
from sdk.eval import mcnemar_exact
from sdk.eval import paired_bootstrap
from sdk.eval import wilson_interval
from sdk.eval.stats import percentile


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [
        (0, 0, 1.0),  # no discordant pair: nothing to test
        (0, 5, 2 / 32),  # 2 * (1/2)^5
        (2, 10, 2 * (1 + 10 + 45) / 1024),  # 0.109375
        (5, 20, 2 * (1 + 20 + 190 + 1140 + 4845 + 15504) / 2**20),  # 0.0413894...
        (1, 3, 1.0),  # 2 * 4/8, capped
        (5, 10, 1.0),  # the most balanced split
    ],
)
def test_binomial_two_sided_is_exact(k: int, n: int, expected: float) -> None:
    assert binomial_two_sided(k, n) == expected


def test_binomial_stays_exact_for_large_samples() -> None:
    # 0 of 2000: 2 / 2^2000, far below what float pow underflows to; must not raise or be NaN.
    assert 0.0 <= binomial_two_sided(0, 2000) < 1e-300
    assert binomial_two_sided(1000, 2000) == 1.0


def test_mcnemar_counts_discordant_items_only() -> None:
    a = [True, True, False, False, True, False, True]
    b = [True, False, True, True, True, False, True]
    test = mcnemar_exact(a, b)
    assert (test.only_a, test.only_b) == (1, 2)
    assert test.p_value == 1.0  # 2 * (1 + 3) / 8, capped
    # Ten items only B got right, none only A: 2 / 1024.
    test = mcnemar_exact([False] * 10 + [True] * 5, [True] * 15)
    assert (test.only_a, test.only_b, test.p_value) == (0, 10, 2 / 1024)


def test_mcnemar_needs_paired_outcomes() -> None:
    with pytest.raises(ValueError, match="same items"):
        mcnemar_exact([True], [True, False])


@pytest.mark.parametrize(
    ("successes", "total", "low", "high"),
    [
        # Published Wilson 95% intervals (e.g. Newcombe 1998, table I).
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (81, 263, 0.2553, 0.3662),
        (10, 10, 0.7225, 1.0),
    ],
)
def test_wilson_interval_matches_published_values(
    successes: int, total: int, low: float, high: float
) -> None:
    interval = wilson_interval(successes, total)
    assert interval.estimate == successes / total
    assert interval.low == pytest.approx(low, abs=5e-5)
    assert interval.high == pytest.approx(high, abs=5e-5)


def test_wilson_interval_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    assert wilson_interval(0, 0).high == 1.0  # nothing counted: anything is possible


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 1.0) == 4.0
    assert percentile([0.0, 10.0], 0.25) == 2.5


def test_bootstrap_of_identical_arms_is_exactly_zero() -> None:
    outcomes = [True, False, True, True, False]
    result = paired_bootstrap(outcomes, outcomes, resamples=500)
    assert (result.difference.estimate, result.difference.low, result.difference.high) == (0, 0, 0)
    assert result.mcnemar.p_value == 1.0
    assert not result.significant


def test_bootstrap_when_b_wins_every_item() -> None:
    result = paired_bootstrap([False] * 12, [True] * 12, resamples=500)
    assert (result.difference.low, result.difference.estimate, result.difference.high) == (1, 1, 1)
    assert result.mcnemar.p_value == 2 / 2**12
    assert result.significant


def test_bootstrap_interval_matches_the_normal_approximation() -> None:
    # 50 items, B alone right on 10, A alone right on none: the mean difference is 0.2 and its
    # standard error sqrt(0.2 * 0.8 / 50) = 0.0566, so the 95% interval is about 0.09 .. 0.31.
    a = [False] * 50
    b = [True] * 10 + [False] * 40
    result = paired_bootstrap(a, b, resamples=20_000, seed=7)
    half = 1.96 * math.sqrt(0.2 * 0.8 / 50)
    assert result.difference.estimate == pytest.approx(0.2)
    assert result.difference.low == pytest.approx(0.2 - half, abs=0.025)
    assert result.difference.high == pytest.approx(0.2 + half, abs=0.025)


def test_bootstrap_is_reproducible_and_keeps_pairs() -> None:
    a = [True, False, True, False, True, True, False, True]
    b = [True, True, False, False, True, True, True, True]
    first = paired_bootstrap(a, b, seed=3, resamples=2000)
    assert paired_bootstrap(a, b, seed=3, resamples=2000) == first
    assert first.difference.contains(first.difference.estimate)
    # Items both arms got right or wrong move nothing: padding with them shrinks the estimate
    # but the discordant counts (and so McNemar) stay.
    padded = paired_bootstrap(a + [True] * 8, b + [True] * 8, seed=3, resamples=2000)
    assert padded.mcnemar == first.mcnemar
    assert padded.difference.estimate == pytest.approx(first.difference.estimate / 2)


def test_bootstrap_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        paired_bootstrap([True], [True], resamples=0)
    with pytest.raises(ValueError):
        paired_bootstrap([True], [True], level=1.0)
    with pytest.raises(ValueError):
        paired_bootstrap([True], [True, False])
    empty = paired_bootstrap([], [])
    assert empty.items == 0 and empty.mcnemar.p_value == 1.0
