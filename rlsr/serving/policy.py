"""The selective policy of ``rlsr serve``: answer iff the score reaches tau (pure functions).

The score is the verbalized confidence after the Sec. C.3 fallbacks, a missing one counted as 0.0
as the evaluation does (``rlsr.evaluation.run.summary.scorer_arrays``), so serving's coverage is
comparable with the validation coverage tau was chosen on; under ``plain+temperature`` (RLSR
Sec. C.6.5) it is first rescaled, s_T = sigmoid(logit(s) / T), the scale tau was chosen on.

One deliberate difference: a completion with no extractable answer is never "answered" (the client
would get an empty answer). The evaluation counts it selected and wrong when its score reaches
tau; abstaining only removes wrong answers, so the promised selective accuracy cannot fall.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from rlsr.core.prompts import system_prompt_names
from rlsr.evaluation.deploy.decisions import ABSTAINED, ANSWERED
from rlsr.metrics.calibration import apply_temperature
from rlsr.run.eval_protocol import DECODING_FIELDS, EvalProtocol
from rlsr.serving import DEFAULT_ABSTAIN_MESSAGE

__all__ = [
    "DEFAULT_ABSTAIN_MESSAGE",
    "ServeSettings",
    "selection_score",
    "decide",
    "request_hash",
]


def selection_score(confidence: float | None, temperature: float | None = None) -> float:
    """s = confidence (None -> 0.0); with a fitted temperature T, s_T = sigmoid(logit(s) / T)."""
    score = 0.0 if confidence is None else float(confidence)
    if temperature is not None:
        score = float(apply_temperature([score], temperature)[0])
    return score


def decide(score: float, tau: float, answer: str | None) -> str:
    """``ANSWERED`` iff an answer was extracted and ``score >= tau``, else ``ABSTAINED``."""
    if answer is None or math.isnan(score):
        return ABSTAINED
    return ANSWERED if score >= tau else ABSTAINED


def request_hash(question: str) -> str:
    """sha256 (hex) of the question text: repeated questions are visible in the decision log
    without storing what was asked."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()


# The protocol's declared defaults, read once (no second copy of 4096 / 0.0 / 1.0 / 64 here)
_DECLARED = EvalProtocol()
# ServeSettings' name of a decoding field where it differs from the protocol's: decoding's
# temperature is `sampling_temperature` beside the rule's `calibration_temperature`
SERVE_NAMES = {"temperature": "sampling_temperature"}


def decoding_settings(protocol: EvalProtocol) -> dict:
    """``ServeSettings`` keywords of every decoding field of ``protocol`` (``DECODING_FIELDS``: a
    field declared later arrives here too, and fails ServeSettings instead of being ignored)."""
    return {SERVE_NAMES.get(name, name): getattr(protocol, name) for name in DECODING_FIELDS}


@dataclass(frozen=True)
class ServeSettings:
    """Everything a request's answer depends on besides the engine: ``tau`` and
    ``calibration_temperature`` (``plain+temperature``'s T, else None) decide; ``system_prompt``
    and decoding must be those tau was chosen under, or it means something else."""

    tau: float
    model_name: str
    system_prompt: str
    abstain_message: str = DEFAULT_ABSTAIN_MESSAGE
    calibration_temperature: float | None = None
    rule: str | None = None  # None: --tau given by hand
    # decoding (``decoding_settings``), defaults the protocol's declared ones
    max_new_tokens: int = _DECLARED.max_new_tokens
    sampling_temperature: float = _DECLARED.temperature
    top_p: float = _DECLARED.top_p
    fallbacks: bool = _DECLARED.fallbacks
    fallback_max_new_tokens: int = _DECLARED.fallback_max_new_tokens

    def __post_init__(self) -> None:
        if not isinstance(self.tau, int | float) or math.isnan(self.tau):
            raise ValueError(f"tau must be a number; got {self.tau!r}.")
        if self.system_prompt not in system_prompt_names():
            raise ValueError(
                f"system prompt {self.system_prompt!r}: choose one of {system_prompt_names()} (a "
                "task's own prompt is known once its task is loaded: --tasks-dir DIR)."
            )
        t = self.calibration_temperature
        if t is not None and not (t > 0 and math.isfinite(t)):
            raise ValueError(f"calibration temperature must be a finite number > 0; got {t!r}.")
        if self.max_new_tokens < 1 or self.fallback_max_new_tokens < 1:
            raise ValueError("max_new_tokens and fallback_max_new_tokens must be >= 1.")
