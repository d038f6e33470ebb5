"""Calibration and separation metrics, and temperature scaling (re-exported by ``rlsr.metrics.selective``).

ECE and Brier measure calibration (confidence = probability of being right); AUROC and the
confidence gap measure separation of right from wrong by confidence; temperature scaling is
the post-hoc recalibration of RLSR Sec. C.6.5, a monotone map that changes ECE but not any
ranking metric (AURC, Acc@c).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit

from rlsr.core.metric_inputs import bool_array, check_same_length, probabilities_array, scores_array
from rlsr.core.ranking import tie_averaged_weights

__all__ = [
    "ece",
    "equal_mass_ece",
    "max_calibration_error",
    "rms_calibration_error",
    "ReliabilityBins",
    "reliability_bins",
    "brier",
    "auroc",
    "confidence_gap",
    "TemperatureScaler",
    "apply_temperature",
    "temperature_scale",
]

BINNINGS = ("equal_width", "equal_mass")


def _prob_inputs(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    conf = probabilities_array(confidence, "confidence")
    ok = bool_array(correct, "correct")
    check_same_length(confidence=conf, correct=ok)
    return conf, ok


def _bin_index(conf: np.ndarray, n_bins: int, binning: str) -> tuple[np.ndarray, np.ndarray]:
    """(bin of each sample 0..n_bins-1, inner edges), left-inclusive: edge[b] <= conf < edge[b+1].

    The edges are the float64 values of ``linspace`` (as in RLCR's evaluation), not exact
    decimals: ``linspace(0, 1, 11)[3] == 0.30000000000000004``, so a confidence of exactly 0.3
    (likewise 0.6, 0.7) falls in the bin below. Kept on purpose to reproduce the paper's numbers.
    """
    if binning == "equal_width":
        inner = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    elif binning == "equal_mass":
        # Inner edges at the quantiles; tied confidences always share a bin, so the result does
        # not depend on sample order (bins collapse when many samples tie, which is fine).
        inner = np.quantile(conf, np.arange(1, n_bins) / n_bins)
    else:
        raise ValueError(f"binning must be one of {BINNINGS}; got {binning!r}.")
    # Outer edges are -inf / +inf (docs/metrics.md), so digitize over the inner edges gives 0..n_bins-1
    # and confidence 1.0 lands in the top bin.
    return np.digitize(conf, inner, right=False), inner


class ReliabilityBins(NamedTuple):
    """Per-bin sums behind ECE, MCE, RMS calibration error and the reliability diagram.

    ``edges`` has n_bins + 1 entries, the outer two -inf / +inf; bin b holds the samples with
    edges[b] <= confidence < edges[b + 1]. Empty bins have count 0 and NaN means.
    """

    edges: np.ndarray
    count: np.ndarray  # samples per bin (int)
    confidence_sum: np.ndarray  # sum of the confidences in the bin
    correct_sum: np.ndarray  # number of correct samples in the bin

    @property
    def n(self) -> int:
        return int(self.count.sum())

    @property
    def mean_confidence(self) -> np.ndarray:
        """conf_B = mean confidence of bin B (NaN when empty)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.confidence_sum / self.count, np.nan)

    @property
    def accuracy(self) -> np.ndarray:
        """acc_B = fraction of bin B answered correctly (NaN when empty)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.correct_sum / self.count, np.nan)

    def ece(self) -> float:
        """sum_B |B|/n * |acc_B - conf_B|, computed as sum_B |correct_B - confidence sum_B| / n
        (empty bins give 0 - 0)."""
        return float(np.abs(self.correct_sum - self.confidence_sum).sum() / self.n)

    def _filled_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """(|B| * (acc_B - conf_B), |B|) of the non-empty bins."""
        filled = self.count > 0
        return self.correct_sum[filled] - self.confidence_sum[filled], self.count[filled]

    def mce(self) -> float:
        """max over non-empty bins of |acc_B - conf_B|."""
        gap, count = self._filled_gaps()
        return float(np.max(np.abs(gap) / count))

    def rms(self) -> float:
        """sqrt(sum_B |B|/n * (acc_B - conf_B)^2)."""
        gap, count = self._filled_gaps()
        return float(math.sqrt(np.sum(gap * gap / count) / self.n))


def _check_bins(n_bins) -> int:
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    return int(n_bins)


def _bins(conf: np.ndarray, ok: np.ndarray, n_bins, binning: str) -> ReliabilityBins:
    n_bins = _check_bins(n_bins)
    bins, inner = _bin_index(conf, n_bins, binning)
    return ReliabilityBins(
        edges=np.concatenate(([-np.inf], inner, [np.inf])),
        count=np.bincount(bins, minlength=n_bins),
        confidence_sum=np.bincount(bins, weights=conf, minlength=n_bins),
        correct_sum=np.bincount(bins, weights=ok.astype(np.float64), minlength=n_bins),
    )


def reliability_bins(
    confidence, correct, n_bins: int = 10, *, binning: str = "equal_width"
) -> ReliabilityBins:
    """The bins of ``ece`` (same edges, same left-closed rule): per bin B the count |B|, the
    mean confidence conf_B and the accuracy acc_B; what a reliability diagram draws
    (Guo et al. 2017, "On Calibration of Modern Neural Networks", arXiv:1706.04599, Sec. 2).
    ``ece``, ``max_calibration_error`` and ``rms_calibration_error`` are its ``.ece()``,
    ``.mce()`` and ``.rms()``, so several of them from one binning cost one binning."""
    conf, ok = _prob_inputs(confidence, correct)
    return _bins(conf, ok, n_bins, binning)


def ece(confidence, correct, n_bins: int = 10, *, binning: str = "equal_width") -> float:
    """Expected calibration error: sum_B |B|/n * |acc_B - conf_B| (RLSR Sec. C.5.2; docs/metrics.md).

    ``binning="equal_width"`` (default) is the RLCR evaluation's binning that the paper follows:
    edges ``linspace(0, 1, n_bins + 1)`` with the outer edges replaced by -inf / +inf,
    left-inclusive (``np.digitize``), so 0.1 falls in the second bin and 1.0 in the last. As in
    RLCR, the edges are float64 ``linspace`` values, so 0.3, 0.6 and 0.7 fall in the bin *below*
    (0.3 < linspace(0, 1, 11)[3] = 0.30000000000000004); see ``_bin_index``.
    ``binning="equal_mass"`` (adaptive ECE) puts the inner edges at the 1/n_bins quantiles of the
    confidences (tied values share a bin). Empty bins contribute nothing.
    """
    conf, ok = _prob_inputs(confidence, correct)
    return _bins(conf, ok, n_bins, binning).ece()


def _prob_inputs_or_empty(confidence, correct) -> tuple[np.ndarray, np.ndarray] | None:
    """Checked inputs, or None for zero samples (the metric is then NaN, not an error)."""
    conf = scores_array(confidence, "confidence", allow_empty=True)
    ok = bool_array(correct, "correct")
    if check_same_length(confidence=conf, correct=ok) == 0:
        return None
    return probabilities_array(conf, "confidence"), ok


def equal_mass_ece(confidence, correct, n_bins: int = 10) -> float:
    """Equal-mass (adaptive) ECE: ``ece(..., binning="equal_mass")``, NaN for zero samples.

    sum_B |B|/n * |acc_B - conf_B| with the inner edges at the k/n_bins quantiles of the
    confidences (numpy's linear interpolation), bins left-closed, so tied confidences always share
    a bin (Nixon et al. 2019, "Measuring Calibration in Deep Learning", arXiv:1904.01685, Sec. 4,
    who split the sorted samples into equal counts instead, ties included).
    """
    inputs = _prob_inputs_or_empty(confidence, correct)
    if inputs is None:
        return math.nan
    return ece(*inputs, n_bins, binning="equal_mass")


def max_calibration_error(
    confidence, correct, n_bins: int = 10, *, binning: str = "equal_width"
) -> float:
    """MCE = max over non-empty bins B of |acc_B - conf_B| (Naeini et al. 2015, "Obtaining Well
    Calibrated Probabilities Using Bayesian Binning", AAAI, Sec. 3), with ``ece``'s bins.
    NaN for zero samples."""
    inputs = _prob_inputs_or_empty(confidence, correct)
    if inputs is None:
        return math.nan
    return _bins(*inputs, n_bins, binning).mce()


def rms_calibration_error(
    confidence, correct, n_bins: int = 10, *, binning: str = "equal_width"
) -> float:
    """RMS calibration error = sqrt(sum_B |B|/n * (acc_B - conf_B)^2), with ``ece``'s bins (the
    l2 binned calibration error of Kumar et al. 2019, "Verified Uncertainty Calibration",
    arXiv:1909.10155, Sec. 2, without its debiasing; Hendrycks et al. 2019, arXiv:1812.04606).
    Lies between ECE and MCE. NaN for zero samples."""
    inputs = _prob_inputs_or_empty(confidence, correct)
    if inputs is None:
        return math.nan
    return _bins(*inputs, n_bins, binning).rms()


def brier(confidence, correct) -> float:
    """Brier score: mean (confidence - correct)^2 (lower is better; Brier 1950).

    RLCR's calibration reward (RLSR Sec. 2.1, ``rlsr.equations.rewards.brier_reward``) is 1 - this per sample.
    """
    conf, ok = _prob_inputs(confidence, correct)
    return float(np.mean((conf - ok) ** 2))


def auroc(confidence, correct) -> float:
    """AUROC of confidence for separating correct (positive) from wrong samples (as RLCR's
    evaluation, sklearn ``roc_curve`` + ``auc``, which gives ties the same half credit).

    Mann-Whitney form with ties: P(c_correct > c_wrong) + 0.5 * P(c_correct = c_wrong), computed
    from tie-averaged ascending ranks: (R_pos - n_pos (n_pos + 1) / 2) / (n_pos * n_neg).
    Returns NaN when all samples are correct or all are wrong (one class empty: undefined).
    """
    conf = scores_array(confidence, "confidence")
    ok = bool_array(correct, "correct")
    n = check_same_length(confidence=conf, correct=ok)
    n_pos = int(np.count_nonzero(ok))
    n_neg = n - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    # Descending position p has ascending rank n - p + 1; tie groups get the mean rank.
    ranks = tie_averaged_weights(conf, np.arange(n, 0, -1, dtype=np.float64))
    u = ranks[ok].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (float(n_pos) * n_neg))


def confidence_gap(confidence, correct) -> float:
    """Delta c = E[c | correct] - E[c | incorrect] (RLSR Sec. 4.1, Tab. 2). NaN if a class is empty."""
    conf = scores_array(confidence, "confidence")
    ok = bool_array(correct, "correct")
    check_same_length(confidence=conf, correct=ok)
    if ok.all() or not ok.any():
        return math.nan
    return float(conf[ok].mean() - conf[~ok].mean())


# --------------------------------------------------------------------------- temperature scaling

LOGIT_CLIP = 1e-12
"""Confidences are clipped to [LOGIT_CLIP, 1 - LOGIT_CLIP] before the logit so 0 and 1 stay finite."""


def _logit(conf: np.ndarray) -> np.ndarray:
    p = np.clip(conf, LOGIT_CLIP, 1.0 - LOGIT_CLIP)
    return np.log(p) - np.log1p(-p)


def apply_temperature(confidence, temperature: float) -> np.ndarray:
    """s_T = sigmoid(logit(s) / T) (RLSR Sec. C.6.5): strictly increasing in s for any T > 0.

    Confidences within 1e-12 of 0 or 1 are clipped first (so a verbalised 1.0 can be scaled),
    which ties them with the clip value; otherwise every order and tie is preserved (in float64,
    with T < 1, outputs within ~1e-16 of 1.0 can round to the same value).
    """
    conf = probabilities_array(confidence, "confidence")
    if not (temperature > 0.0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature!r}.")
    z = _logit(conf) / temperature
    return expit(z)


@dataclass(frozen=True)
class TemperatureScaler:
    """A fitted temperature; call it on confidences to recalibrate them."""

    temperature: float
    nll_before: float  # mean negative log-likelihood of the fit data at T = 1
    nll_after: float  # ... at the fitted T

    def __call__(self, confidence) -> np.ndarray:
        return apply_temperature(confidence, self.temperature)


class _NLLTerms:
    """Mean NLL of sigmoid(z / T) as a function of T, with samples grouped by distinct logit.

    The NLL depends on the data only through (distinct z, #correct, #wrong), so verbalised
    confidences (a few dozen distinct values) make every optimiser step nearly free.
    """

    def __init__(self, z: np.ndarray, ok: np.ndarray) -> None:
        self.n = z.shape[0]
        values, inverse = np.unique(z, return_inverse=True)
        if 2 * values.size <= self.n:
            n_pos = np.bincount(inverse, weights=ok.astype(np.float64), minlength=values.size)
            n_neg = np.bincount(inverse, minlength=values.size) - n_pos
            self.z_pos, self.w_pos = values[n_pos > 0], n_pos[n_pos > 0]
            self.z_neg, self.w_neg = values[n_neg > 0], n_neg[n_neg > 0]
        else:
            self.z_pos, self.w_pos = z[ok], None
            self.z_neg, self.w_neg = z[~ok], None

    def __call__(self, temperature: float) -> float:
        # -log sigmoid(z/T) for correct samples, -log(1 - sigmoid(z/T)) for wrong ones.
        loss_pos = np.logaddexp(0.0, -self.z_pos / temperature)
        loss_neg = np.logaddexp(0.0, self.z_neg / temperature)
        total = (loss_pos.sum() if self.w_pos is None else loss_pos @ self.w_pos) + (
            loss_neg.sum() if self.w_neg is None else loss_neg @ self.w_neg
        )
        return float(total / self.n)


def temperature_scale(
    confidence, correct, *, bounds: tuple[float, float] = (0.01, 100.0)
) -> TemperatureScaler:
    """Fit T by minimising the mean NLL of sigmoid(logit(s)/T) on (confidence, correct).

    Post-hoc calibration of RLSR Sec. C.6.5 (Guo et al. 2017), fit on validation data and applied
    to test data with the returned callable. Bounded 1-D search over log T in ``bounds``.
    Monotone, so AURC, Acc@c and AUROC are unchanged; ECE usually changes.
    """
    conf, ok = _prob_inputs(confidence, correct)
    low, high = bounds
    if not (0.0 < low < high < math.inf):
        raise ValueError(f"bounds must satisfy 0 < low < high < inf; got {bounds!r}.")
    nll = _NLLTerms(_logit(conf), ok)
    result = minimize_scalar(
        lambda log_t: nll(math.exp(log_t)),
        bounds=(math.log(low), math.log(high)),
        method="bounded",
        options={"xatol": 1e-5},
    )
    temperature = float(math.exp(result.x))
    return TemperatureScaler(
        temperature=temperature,
        nll_before=nll(1.0),
        nll_after=nll(temperature),
    )
