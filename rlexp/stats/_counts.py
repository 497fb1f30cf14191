"""The 2x2 paired table of two models scored 0/1 on the same problems."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlexp.stats._common import (
    _aligned,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass(frozen=True)
class PairedCounts:
    """The 2x2 paired table: n11 both right, b base-only right, c new-only right, n00 both wrong.

    Examples
    --------
    >>> t = PairedCounts(n11=1, b=1, c=2, n00=1)
    >>> t.n
    5
    """

    n11: int
    b: int
    c: int
    n00: int

    @property
    def n(self) -> int:
        return self.n11 + self.b + self.c + self.n00


def paired_counts(y_base: ArrayLike, y_new: ArrayLike) -> PairedCounts:
    """Count the 2x2 paired table of two aligned 0/1 outcome sequences.

    Parameters
    ----------
    y_base, y_new : array_like of 0/1
        Outcomes of the baseline and the new model on the same problems, in the same order.
        ``bool`` and the numbers 0 and 1 are accepted; anything else is a ValueError.

    Returns
    -------
    PairedCounts

    Raises
    ------
    ValueError
        On a value other than 0/1, sequences of different lengths, or empty input.

    Examples
    --------
    >>> paired_counts([1, 1, 0, 0, 1], [1, 0, 1, 0, 1])
    PairedCounts(n11=2, b=1, c=1, n00=1)
    >>> paired_counts([0.4, 2, 0], [1, 0, 5])
    Traceback (most recent call last):
    ...
    ValueError: y_base must contain only 0 and 1 (or False and True): 2 value(s) are not, the first is 0.4 at index 0
    """
    import numpy as np

    base, new = _aligned(y_base, y_new)
    both = int(np.count_nonzero(base & new))
    b = int(np.count_nonzero(base & (1 - new)))
    c = int(np.count_nonzero((1 - base) & new))
    return PairedCounts(both, b, c, len(base) - both - b - c)
