"""Statistics over seeds: mean, sample standard deviation and a Student-t interval of the mean.

Every table of the project reports seeds this way: ``mean ± sd`` with the *sample* standard
deviation (``ddof=1``) and the two-sided 95 % t-interval of the mean, ``mean ± t(0.975, n - 1) *
sd / sqrt(n)``, with the quantile from :func:`scipy.stats.t.ppf` (no interval below 2 seeds).
Non-finite values (a seed that logged nothing) are left out and reduce ``n``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
LABEL = "mean ± sample sd (ddof 1) over seeds; 95 % Student-t interval of the mean (scipy)"


@dataclass(frozen=True)
class SeedSummary:
    """``n`` finite values: their ``mean``, sample ``sd`` and the 95 % t-interval ``[lo, hi]``
    (``sd``, ``lo``, ``hi`` are NaN below 2 values; everything is NaN for none)."""

    n: int
    mean: float
    sd: float
    lo: float
    hi: float

    def fmt(self, digits: int = 3) -> str:
        """``mean ± sd`` (``mean`` alone for one value, ``n/a`` for none)."""
        if self.n == 0:
            return "n/a"
        if self.n == 1:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f}"

    def fmt_ci(self, digits: int = 2) -> str:
        """``[lo, hi]`` (``n/a`` below 2 values)."""
        return "n/a" if self.n < 2 else f"[{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def finite(values: Iterable[float]) -> np.ndarray:
    """The finite values as a float64 array."""
    arr = np.asarray(list(values), np.float64)
    return arr[np.isfinite(arr)]


def summarize_seeds(values: Iterable[float]) -> SeedSummary:
    """Mean, sample sd and the 95 % t-interval of the mean of the finite ``values``."""
    arr = finite(values)
    if arr.size == 0:
        return SeedSummary(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(arr.mean())
    if arr.size == 1:
        return SeedSummary(1, mean, math.nan, math.nan, math.nan)
    sd = float(arr.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df=arr.size - 1)) * sd / math.sqrt(arr.size)
    return SeedSummary(int(arr.size), mean, sd, mean - half, mean + half)
