"""The ``method`` section: which method (``rlsr.methods`` holds each one's own checks), its reward
weights, where the confidence comes from, and how a model trained this way is evaluated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlsr.checks import ConfigError, is_number
from rlsr.checks import check as _check
from rlsr.eval_protocol import ProtocolError, check_mapping, evaluate_mapping_of

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
    # A reward method from outside rlsr: "package.module:NAME" of a rlsr.methods.MethodEntry
    # whose name is `name` (docs/methods.md); None: `name` is one of rlsr's methods.
    plugin: str | None = None
    # verbalized: the <confidence> tag; logprob: the answer's length-normalised log-probability
    # (rlsr.logprob; paper Sec. D.4, Tab. 7). Only methods that rank by confidence accept logprob.
    confidence: str = "verbalized"
    # How a model trained this way is evaluated: a mapping of evaluation protocol fields
    # (rlsr.eval_protocol.EvalProtocol, e.g. method=sft: {response_format: plain, scorers:
    # [consistency], ...}). The held-out evaluation uses them unless eval.<field> is set;
    # slurm/sweep.py and the toy pass them to `rlsr evaluate` as flags (to_flags).
    evaluate: dict[str, Any] = field(default_factory=dict)
    # Replaced by ``evaluate``; set, it is refused with the mapping to write instead.
    evaluate_args: list[str] | None = None

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
            not self.evaluate_args,
            "method.evaluate_args",
            "replaced by method.evaluate, a mapping of evaluation settings; write "
            f"{evaluate_mapping_of(self.evaluate_args)} instead (docs/evaluation.md).",
        )
        try:
            check_mapping(self.evaluate, "method.evaluate")
        except ProtocolError as err:
            raise ConfigError(err.field, err.message) from None
        _check(
            self.format_weight + self.method_weight > 0,
            "method.method_weight",
            "format_weight and method_weight are both 0, so every reward is 0; set method_weight=0.5.",
        )
