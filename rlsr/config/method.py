"""The ``method`` section: which method (``rlsr.methods`` holds each one's own checks), its reward
weights, where the confidence comes from, and how a model trained this way is evaluated."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsr.config.checks import check as _check
from rlsr.config.checks import is_number

# Where RLSR's pooled ranking reads each completion's confidence (method.confidence).
CONFIDENCE_SOURCES = ("verbalized", "logprob")


@dataclass
class MethodSettings:
    name: str = "rlsr"
    # Reward weights: the authors' released configs (sun-umn/RLSR) use 0.5 / 0.5; the paper text
    # writes R_total = R_method + R_format (1 / 1). docs/training.md, "Paper text vs released code".
    format_weight: float = 0.5
    method_weight: float = 0.5
    # A completion whose format check fails counts as wrong in the reward (RLCR's reference
    # accuracy_reward, which the RLSR authors' code also uses); false: the verifier alone decides.
    correct_requires_format: bool = True
    correct_scale: float = 1.0
    weight_cap: float | None = None
    max_coverage: float = 1.0
    label: str | None = None  # a variant's name in the default output_dir (None: name)
    # verbalized: the <confidence> tag; logprob: the answer's length-normalised log-probability
    # (rlsr.logprob; paper Sec. D.4, Tab. 7). Only methods that rank by confidence accept logprob.
    confidence: str = "verbalized"
    # `rlsr evaluate` flags a model trained this way needs (e.g. method=sft: plain answers and the
    # consistency scorer); slurm/sweep.py passes them to every evaluation of the run.
    evaluate_args: list[str] = field(default_factory=list)

    def validate(self) -> None:
        """Checks shared by every method; each method's own are in its ``rlsr.methods`` entry."""
        _check(
            isinstance(self.name, str) and self.name != "",
            "method.name",
            f"must name a method, e.g. method=rlsr; got {self.name!r}.",
        )
        for name in ("format_weight", "method_weight"):
            value = getattr(self, name)
            _check(
                is_number(value) and value >= 0,
                f"method.{name}",
                f"must be a number >= 0; got {value!r} (the authors' released configs: 0.5).",
            )
        _check(
            isinstance(self.correct_requires_format, bool),
            "method.correct_requires_format",
            f"must be true or false; got {self.correct_requires_format!r}.",
        )
        _check(
            self.confidence in CONFIDENCE_SOURCES,
            "method.confidence",
            f"got {self.confidence!r}; choose one of {CONFIDENCE_SOURCES}.",
        )
        _check(
            isinstance(self.evaluate_args, list | tuple)
            and all(isinstance(a, str) for a in self.evaluate_args),
            "method.evaluate_args",
            f"must be a list of `rlsr evaluate` flags, e.g. ['--scorers', 'logprob']; "
            f"got {self.evaluate_args!r}.",
        )
        _check(
            self.format_weight + self.method_weight > 0,
            "method.method_weight",
            "format_weight and method_weight are both 0, so every reward is 0; set method_weight=0.5.",
        )
