"""Mean and 95 % confidence interval with Student's t (the spread of a cell over its seeds)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95 % critical values of Student's t for 1..30 degrees of freedom.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z95 = 1.959964


def t95(df: int) -> float:
    """The two-sided 95 % critical value of Student's t with `df` degrees of freedom (df ≥ 1); past
    the table, the Cornish-Fisher expansion around the normal quantile (error < 1e-3)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T95):
        return _T95[df - 1]
    z = _Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Interval:
    """Mean of `n` values and the 95 % t-interval around it (None with fewer than 2 values)."""

    n: int
    mean: float | None
    low: float | None
    high: float | None

    @property
    def half_width(self) -> float | None:
        return None if self.mean is None or self.high is None else self.high - self.mean


def mean_ci(values: Sequence[float]) -> Interval:
    """Mean ± t(0.975, n-1) · s / √n; one value has a mean and no interval, none has neither."""
    n = len(values)
    if n == 0:
        return Interval(0, None, None, None)
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(1, mean, None, None)
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = t95(n - 1) * math.sqrt(variance / n)
    return Interval(n, mean, mean - half, mean + half)
