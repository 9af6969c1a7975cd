"""Seed statistics (``stoixlite.results.stats``) against numpy and textbook t quantiles."""

import math

import numpy as np
import pytest

from stoixlite.results.stats import summarize_seeds


def test_sample_sd_and_t_interval():
    values = [0.2, 0.5, 0.9]
    s = summarize_seeds(values)
    assert s.n == 3
    assert s.mean == pytest.approx(np.mean(values))
    assert s.sd == pytest.approx(np.std(values, ddof=1))  # sample, not population
    half = 4.302653 * np.std(values, ddof=1) / math.sqrt(3)  # t(0.975, 2)
    assert (s.lo, s.hi) == pytest.approx((s.mean - half, s.mean + half), rel=1e-6)


def test_many_seeds_use_t_not_normal():
    values = np.linspace(0, 1, 12)  # 11 degrees of freedom: t(0.975, 11) = 2.200985, not 1.96
    s = summarize_seeds(values)
    half = 2.200985 * np.std(values, ddof=1) / math.sqrt(12)
    assert s.hi - s.mean == pytest.approx(half, rel=1e-6)


def test_non_finite_left_out_and_small_n():
    s = summarize_seeds([0.5, math.nan, math.inf])
    assert s.n == 1 and s.mean == 0.5 and math.isnan(s.sd) and s.fmt_ci() == "n/a"
    assert s.fmt() == "0.500"
    empty = summarize_seeds([])
    assert empty.n == 0 and empty.fmt() == "n/a"
