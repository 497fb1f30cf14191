"""Pairing two {problem id: 0/1} mappings by problem id."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlexp.stats._common import (
    Alternative,
    TestMethod,
    _is_01,
)
from rlexp.stats._paired import PairedTestResult, paired_test

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


class PairingError(ValueError):
    """Two outcome mappings cannot be paired: different problem sets (without ``intersect``), or
    none in common. ``base_only`` and ``new_only`` list the problem ids of one side only."""

    __module__ = "rlexp.stats"  # tracebacks name the public path, not the private module

    def __init__(self, message: str, base_only: tuple[Hashable, ...], new_only: tuple[Hashable, ...],
                 common: int) -> None:
        super().__init__(message)
        self.base_only = base_only
        self.new_only = new_only
        self.common = common


@dataclass(frozen=True, eq=False)
class PairedOutcomes:
    """Outcomes of two models aligned by problem id (the result of :func:`pair`).

    Attributes
    ----------
    ids : tuple
        The paired problem ids, in the order of the baseline mapping.
    y_base, y_new : numpy.ndarray of int64
        The aligned 0/1 outcomes (read-only).
    dropped_base_only, dropped_new_only : tuple
        Problem ids left out by ``intersect=True``: in the baseline only, in the new mapping only.
    """

    ids: tuple[Hashable, ...]
    y_base: NDArray[np.int64]
    y_new: NDArray[np.int64]
    dropped_base_only: tuple[Hashable, ...] = ()
    dropped_new_only: tuple[Hashable, ...] = ()

    @property
    def n(self) -> int:
        """The number of paired problems."""
        return len(self.ids)

    @property
    def dropped(self) -> int:
        """How many problem ids ``intersect=True`` left out, both sides together."""
        return len(self.dropped_base_only) + len(self.dropped_new_only)

    def test(self, *, alternative: Alternative = "two-sided", method: TestMethod = "exact") -> PairedTestResult:
        """:func:`paired_test` on the aligned outcomes.

        Examples
        --------
        >>> pair({"p1": 1, "p2": 0, "p3": 1}, {"p3": 1, "p2": 1, "p1": 1}).test().c
        1
        """
        return paired_test(self.y_base, self.y_new, alternative=alternative, method=method)


def _mapping_outcomes(outcomes: Any, name: str) -> dict[Hashable, int]:
    if not isinstance(outcomes, Mapping):
        raise TypeError(f"{name} must be a mapping problem id -> 0/1, got {type(outcomes).__name__}")
    bad = [key for key, value in outcomes.items() if not _is_01(value)]
    if bad:
        raise ValueError(f"{name} must map every problem id to 0 or 1 (or False and True): {len(bad)} do not, "
                         f"the first is {name}[{bad[0]!r}] = {outcomes[bad[0]]!r}")
    return {key: int(value) for key, value in outcomes.items()}


def pair(outcomes_base: Mapping[Hashable, Any], outcomes_new: Mapping[Hashable, Any], *,
         intersect: bool = False) -> PairedOutcomes:
    """Align two models' outcomes by problem id.

    A paired comparison is only valid on the same problems: mappings with different key sets
    are refused unless ``intersect=True``, which keeps the common ids and reports the others
    in ``dropped_base_only`` / ``dropped_new_only``.

    Parameters
    ----------
    outcomes_base, outcomes_new : Mapping
        Problem id -> outcome (0/1 or False/True).
    intersect : bool, default False
        Pair the problems both mappings have instead of refusing different sets.

    Returns
    -------
    PairedOutcomes
        ``ids`` in the baseline's order, the aligned ``y_base`` and ``y_new`` arrays, and what
        was dropped.

    Raises
    ------
    PairingError
        (a ValueError) When the key sets differ and ``intersect`` is False, or no id is common.
    ValueError
        When an outcome is not 0/1.
    TypeError
        When an argument is not a mapping.

    Examples
    --------
    >>> p = pair({"p1": 1, "p2": 0, "p3": 1}, {"p3": 0, "p1": 1, "p2": True})
    >>> p.ids, p.y_base.tolist(), p.y_new.tolist()
    (('p1', 'p2', 'p3'), [1, 0, 1], [1, 1, 0])
    >>> pair({"p1": 1, "p2": 0}, {"p1": 1, "p3": 1})
    Traceback (most recent call last):
    ...
    rlexp.stats.PairingError: problem ids differ: 1 only in outcomes_base, 1 only in outcomes_new (e.g. 'p2'); pass intersect=True to pair the 1 common problem(s)
    >>> p = pair({"p1": 1, "p2": 0}, {"p1": 1, "p3": 1}, intersect=True)
    >>> p.ids, p.dropped_base_only, p.dropped_new_only
    (('p1',), ('p2',), ('p3',))
    """
    import numpy as np

    base = _mapping_outcomes(outcomes_base, "outcomes_base")
    new = _mapping_outcomes(outcomes_new, "outcomes_new")
    base_only = tuple(k for k in base if k not in new)
    new_only = tuple(k for k in new if k not in base)
    ids = tuple(k for k in base if k in new)
    if (base_only or new_only) and not intersect:
        example = (base_only or new_only)[0]
        raise PairingError(f"problem ids differ: {len(base_only)} only in outcomes_base, {len(new_only)} only in "
                           f"outcomes_new (e.g. {example!r}); pass intersect=True to pair the {len(ids)} common "
                           "problem(s)", base_only, new_only, len(ids))
    if not ids:
        raise PairingError("no problem id in common", base_only, new_only, 0)
    y_base = np.fromiter((base[k] for k in ids), dtype=np.int64, count=len(ids))
    y_new = np.fromiter((new[k] for k in ids), dtype=np.int64, count=len(ids))
    y_base.flags.writeable = False
    y_new.flags.writeable = False
    return PairedOutcomes(ids, y_base, y_new, base_only, new_only)
