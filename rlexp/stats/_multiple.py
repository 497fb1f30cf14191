"""Adjusted p-values for a family of tests (Bonferroni, Holm, Benjamini-Hochberg, Benjamini-Yekutieli)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlexp.stats._common import (
    _ADJUST_METHODS,
    AdjustMethod,
    _check_choice,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray


def adjust_pvalues(pvalues: ArrayLike, method: AdjustMethod = "holm", *, axis: int = -1) -> NDArray[np.float64]:
    """Adjusted p-values for a family of tests.

    Parameters
    ----------
    pvalues : array_like of float in [0, 1]
        The family's p-values (along ``axis``; other axes are independent families).
    method : {'holm', 'bonferroni', 'bh', 'by'}, default 'holm'
        ``'bonferroni'``: ``min(1, m p)``. ``'holm'``: Holm's step-down (controls the
        family-wise error rate, uniformly more powerful than Bonferroni). ``'bh'``:
        Benjamini-Hochberg step-up (false discovery rate, independent or positively dependent
        tests). ``'by'``: Benjamini-Yekutieli (false discovery rate under any dependence).
        statsmodels' names ``'fdr_bh'`` and ``'fdr_by'`` are accepted too.
    axis : int, default -1

    Returns
    -------
    numpy.ndarray
        Adjusted p-values, the shape of ``pvalues``. Reject hypothesis i at level alpha when
        ``adjusted[i] <= alpha``. Equal to statsmodels' ``multipletests(p, method=...)[1]``.

    Examples
    --------
    >>> adjust_pvalues([0.01, 0.04, 0.03])
    array([0.03, 0.06, 0.06])
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="bonferroni")
    array([0.03, 0.12, 0.09])
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="bh")
    array([0.03, 0.04, 0.04])
    """
    import numpy as np

    key = _check_choice(method, "method", tuple(_ADJUST_METHODS))
    kind = _ADJUST_METHODS[key]
    p = np.asarray(pvalues, dtype=float)
    if p.ndim == 0:
        raise ValueError("pvalues must be a sequence (one p-value per test), got a scalar")
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("pvalues must all be in [0, 1] (no NaN)")
    p = np.moveaxis(p, axis, -1)
    m = p.shape[-1]
    if m == 0:
        return np.moveaxis(p.copy(), -1, axis)
    if kind == "bonferroni":
        return np.moveaxis(np.minimum(1.0, p * m), -1, axis)
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    rank = np.arange(1, m + 1)
    if kind == "holm":  # step-down: max over j <= i of (m - j + 1) p_(j)
        adjusted = np.maximum.accumulate(ranked * (m - rank + 1), axis=-1)
    else:  # step-up: min over j >= i of m / j * p_(j) (times sum 1/k for BY)
        scale = m / rank * (np.sum(1.0 / rank) if kind == "by" else 1.0)
        adjusted = np.minimum.accumulate((ranked * scale)[..., ::-1], axis=-1)[..., ::-1]
    adjusted = np.minimum(1.0, adjusted)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return np.moveaxis(out, -1, axis)
