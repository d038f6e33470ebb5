"""Input validation shared by the metrics: lists or arrays become 1-D float64 / bool arrays, and
a bad input fails with a ValueError that names the argument and the fix, not later as a NaN.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "scores_array",
    "probabilities_array",
    "bool_array",
    "check_same_length",
    "check_fraction",
]


def _float_1d(values, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be a sequence of numbers; could not convert it ({exc})."
        ) from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per sample); got shape {arr.shape}.")
    return arr


def _refuse_first(arr: np.ndarray, bad: np.ndarray, rule: str, fix: str) -> None:
    """Raise ``ValueError("<rule>; sample i is <value>. <fix>")`` at the first ``bad`` sample."""
    where = np.flatnonzero(bad)
    if where.size:
        raise ValueError(f"{rule}; sample {where[0]} is {arr[where[0]]!r}. {fix}")


def scores_array(values, name: str = "confidence", *, allow_empty: bool = False) -> np.ndarray:
    """1-D float64 array of finite ranking scores (any real value; only the order matters)."""
    arr = _float_1d(values, name)
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty; metrics need at least one sample.")
    _refuse_first(
        arr,
        ~np.isfinite(arr),
        f"{name} must be finite",
        "Map missing confidences first (rlsr.equations.rewards.confidence_for_ranking ranks them "
        "as 0.0) or drop those samples.",
    )
    return arr


def probabilities_array(values, name: str = "confidence") -> np.ndarray:
    """Like ``scores_array`` but every value must lie in [0, 1] (probabilities, confidences)."""
    arr = scores_array(values, name)
    _refuse_first(
        arr,
        (arr < 0.0) | (arr > 1.0),
        f"{name} must lie in [0, 1]",
        "Rescale scores to probabilities first (e.g. rlsr.metrics.selective.temperature_scale).",
    )
    return arr


def bool_array(values, name: str = "correct") -> np.ndarray:
    """1-D bool array from booleans or 0/1 numbers; anything else (NaN, 0.5, 2) raises."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per sample); got shape {arr.shape}.")
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold booleans or 0/1; got dtype {arr.dtype}.")
    _refuse_first(
        arr,
        (arr != 0) & (arr != 1),
        f"{name} must hold booleans or 0/1",
        "Verify each sample first (rlsr.verifiers) and drop unverifiable ones.",
    )
    return arr.astype(bool)


def check_same_length(**arrays: np.ndarray) -> int:
    """Raise unless all arrays have the same length; return that length."""
    lengths = {name: arr.shape[0] for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"inputs must have one value per sample, but {listed}.")
    return next(iter(lengths.values()))


def check_fraction(value: float, name: str, *, open_left: bool = True) -> float:
    """A float in (0, 1] (or [0, 1] with ``open_left=False``); raises naming ``name``."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number in (0, 1]; got {value!r}.") from exc
    low_ok = v > 0.0 if open_left else v >= 0.0
    if math.isnan(v) or not low_ok or v > 1.0:
        interval = "(0, 1]" if open_left else "[0, 1]"
        raise ValueError(f"{name} must be in {interval}; got {value!r}.")
    return v
