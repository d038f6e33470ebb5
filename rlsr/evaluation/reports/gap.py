"""Confidence separation between correct and incorrect answers: paper Tab. 2 and Fig. 3.

* ``align_runs``: joins several methods' samples by question, the pair ``(dataset folder, id)``;
  a method with several runs (seeds) has one sample per question and run.
* ``controlled_confidence_gap``: Tab. 2 (Sec. 4.1), Δc on the questions every sample of every
  method answers correctly (resp. incorrectly), so accuracy differences cannot produce the gap.
* ``gaussian_kde``: the densities of Fig. 3 (Sec. C.7), with an absolute bandwidth (0.15).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlsr.core.metric_inputs import scores_array

__all__ = [
    "PAPER_KDE_BANDWIDTH",
    "QuestionKey",
    "AlignedRuns",
    "ControlledGap",
    "align_runs",
    "controlled_confidence_gap",
    "gaussian_kde",
    "kde_grid",
]

PAPER_KDE_BANDWIDTH = 0.15
"""Sec. C.7: "kernel density estimation with a bandwidth of 0.15" (kernel std, confidence units)."""

QuestionKey = tuple[str, str]  # (dataset folder name, question id)


@dataclass(frozen=True)
class AlignedRuns:
    """Samples of several methods on the questions that every run of every method answered:
    ``confidence[m]``, ``correct[m]`` of shape ``(runs of m, len(keys))``; ``n_dropped``: the
    questions present in some run but not in all, left out."""

    keys: list[QuestionKey]
    confidence: dict[str, np.ndarray]
    correct: dict[str, np.ndarray]
    n_dropped: int


def align_runs(
    runs: Mapping[str, Sequence[Mapping[QuestionKey, tuple[float, bool]]]],
) -> AlignedRuns:
    """Join ``runs[method][run][(dataset, id)] = (confidence, correct)`` by question, keeping
    the questions of every run (sorted by key) and counting the others dropped."""
    if not runs:
        raise ValueError("no methods given; the controlled gap compares at least one method.")
    all_runs = [(m, r) for m, rs in runs.items() for r in rs]
    for method, rs in runs.items():
        if len(rs) == 0:
            raise ValueError(f"method {method!r} has no runs with samples.")
    shared = set.intersection(*(set(r) for _, r in all_runs))
    seen = set.union(*(set(r) for _, r in all_runs))
    keys = sorted(shared)
    conf: dict[str, np.ndarray] = {}
    ok: dict[str, np.ndarray] = {}
    for method, rs in runs.items():
        conf[method] = np.array([[float(r[k][0]) for k in keys] for r in rs], dtype=np.float64)
        ok[method] = np.array([[bool(r[k][1]) for k in keys] for r in rs], dtype=bool)
    return AlignedRuns(keys, conf, ok, len(seen) - len(shared))


@dataclass(frozen=True)
class ControlledGap:
    """Tab. 2 of one set of methods. Per-method values are in the input's method order."""

    methods: list[str]
    n_correct: int  # |S+|: questions every sample of every method answers correctly
    n_incorrect: int  # |S-|: questions every sample of every method answers incorrectly
    n_questions: int  # all aligned questions (S+, S- and the mixed rest)
    mean_correct: np.ndarray  # E_m[c | correct] on S+ (NaN if S+ is empty)
    mean_incorrect: np.ndarray  # E_m[c | incorrect] on S- (NaN if S- is empty)

    @property
    def gap(self) -> np.ndarray:
        """Δc_m = E_m[c | correct] − E_m[c | incorrect] (NaN when either subset is empty)."""
        return self.mean_correct - self.mean_incorrect


def _matrix(values, name: str, dtype) -> np.ndarray:
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(
            f"{name} must be 2-D (runs x questions) with at least one run; got shape {arr.shape}."
        )
    return arr


def controlled_confidence_gap(
    confidence: Mapping[str, np.ndarray], correct: Mapping[str, np.ndarray]
) -> ControlledGap:
    """Controlled confidence gap (RLSR Sec. 4.1, Tab. 2): accuracy held fixed across methods.

    Inputs per method m: arrays ``c[m]``, ``y[m]`` of shape (R_m runs, Q questions), column q
    being the same question for every method (``align_runs``); a 1-D array is one run. With

        S+ = {q : y[m][r, q] = 1 for every method m and run r}
        S- = {q : y[m][r, q] = 0 for every method m and run r}

    (a question some sample answers correctly and another incorrectly is in neither),

        E_m[c | correct]   = (1/|S+|) Σ_{q∈S+} (1/R_m) Σ_r c[m][r, q]
        E_m[c | incorrect] = (1/|S-|) Σ_{q∈S-} (1/R_m) Σ_r c[m][r, q]
        Δc_m = E_m[c | correct] − E_m[c | incorrect].

    Every question of S± has R_m samples of m, so this is also the plain mean over m's samples
    on S±. All methods share S+ and S-: a method cannot raise its Δc by being more accurate.
    With one method and one run it reduces to ``rlsr.metrics.selective.confidence_gap``.
    """
    methods = list(confidence)
    conf = {m: _matrix(confidence[m], f"confidence[{m!r}]", np.float64) for m in methods}
    ok = {}
    for m in methods:
        raw = _matrix(correct[m], f"correct[{m!r}]", np.float64)
        if not np.isin(raw, (0.0, 1.0)).all():
            raise ValueError(f"correct[{m!r}] must hold booleans or 0/1.")
        ok[m] = raw.astype(bool)
        if conf[m].shape != ok[m].shape:
            raise ValueError(
                f"confidence[{m!r}] and correct[{m!r}] differ in shape: {conf[m].shape} vs "
                f"{ok[m].shape}."
            )
        if not np.isfinite(conf[m]).all():
            raise ValueError(
                f"confidence[{m!r}] must be finite; map missing confidences to 0.0 first "
                "(rlsr.evaluation.run.summary.scorer_arrays does)."
            )
    n_q = {ok[m].shape[1] for m in methods}
    if len(n_q) != 1:
        raise ValueError(f"every method needs the same questions (columns); got counts {n_q}.")
    all_right = np.logical_and.reduce([ok[m].all(axis=0) for m in methods])
    all_wrong = np.logical_and.reduce([(~ok[m]).all(axis=0) for m in methods])

    def mean_on(mask: np.ndarray, m: str) -> float:
        return float(conf[m][:, mask].mean()) if mask.any() else math.nan

    return ControlledGap(
        methods=methods,
        n_correct=int(all_right.sum()),
        n_incorrect=int(all_wrong.sum()),
        n_questions=n_q.pop(),
        mean_correct=np.array([mean_on(all_right, m) for m in methods]),
        mean_incorrect=np.array([mean_on(all_wrong, m) for m in methods]),
    )


def kde_grid(bandwidth: float = PAPER_KDE_BANDWIDTH, points: int = 601) -> np.ndarray:
    """Evaluation grid for confidences in [0, 1]: [−3h, 1 + 3h], holding ≥ 99.7 % of each
    kernel's mass."""
    return np.linspace(-3.0 * bandwidth, 1.0 + 3.0 * bandwidth, points)


def gaussian_kde(values, grid, bandwidth: float = PAPER_KDE_BANDWIDTH) -> np.ndarray:
    """Gaussian kernel density estimate with an absolute bandwidth (RLSR Sec. C.7, Fig. 3):

        f(x) = 1/(n h) Σ_i φ((x − c_i) / h),   φ(u) = exp(−u²/2) / √(2π),   h = ``bandwidth``.

    ``h`` is the kernel's standard deviation in confidence units, the meaning of "bandwidth" in
    sklearn's ``KernelDensity(bandwidth=h)``. SciPy's ``gaussian_kde(bw_method=b)`` instead
    scales the data's standard deviation (kernel std = b · std(c, ddof=1)), so the paper's
    density is ``gaussian_kde(c, bw_method=h / std(c, ddof=1))`` there, not ``bw_method=0.15``.
    No boundary correction: f integrates to 1 over the real line, and mass spills past 0 and 1
    (half a kernel for a confidence of exactly 1.0). The paper's text does not say otherwise.
    """
    c = scores_array(values, "values")
    x = np.asarray(grid, dtype=np.float64)
    if not (isinstance(bandwidth, (int, float)) and math.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a number > 0; got {bandwidth!r} (paper: 0.15).")
    out = np.zeros(x.shape, dtype=np.float64)
    norm = 1.0 / (c.size * bandwidth * math.sqrt(2.0 * math.pi))
    for start in range(0, c.size, 4096):  # bounded memory: (grid x 4096) per chunk
        u = (x[..., None] - c[start : start + 4096]) / bandwidth
        out += np.exp(-0.5 * u * u).sum(axis=-1)
    return out * norm
