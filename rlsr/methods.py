"""The method registry: every training method declared once (in the spirit of open-r1's rewards).

An entry (``MethodEntry``) states everything that differs between methods:

==================  ==============================================================================
name                the ``method.name`` of the recipes (``method=rlsr``)
columns             reward columns and the ``MethodSettings`` field holding each column's weight
                    (empty for a supervised method)
rewards             ``f(correct, confidence, format_ok, settings) -> (n, len(columns))`` array,
                    unweighted, over one whole pooled batch (equations from ``rlsr.rewards``);
                    None for a supervised method
trainer             the trainer class ``rlsr.training`` builds (``RLSRTrainer`` for the GRPO
                    methods, which receives the bound method, verifier and pool hook;
                    ``SFTAnswerTrainer`` for sft)
validate            ``f(settings)`` raising ``ConfigError`` naming the field of a bad value
needs_confidence    whether the reward reads the confidence
summary             one line for docs and error messages
args_class          the trainer's config class (``GRPOConfig`` / ``SFTConfig``) ...
args_section        ... and the config section holding its fields (``grpo`` / ``sft``)
train_examples      ``f(dataset) -> dataset``: the loaded rows (``rlsr.data`` contract) turned
                    into what the trainer trains on; None = the rows as loaded (GRPO prompts)
confidence_sources  values ``method.confidence`` may take (``logprob``: the answer's
                    length-normalised log-probability ranks the pool, paper Sec. D.4)
validate_trainer    ``f(settings, trainer_section)`` raising ``ConfigError`` for trainer settings
                    under which the method's reward stops meaning what it says (None: no check)
==================  ==============================================================================

Columns and weights (weights from ``recipes/method/<name>.yaml``; 0.5 / 0.5 by default, as in
the authors' released configs; the paper text writes R_method + R_format):

=======  =====================================================================
rlsr     format_reward (w_f), lifted_aurc_reward (w_m)
rlcr     format_reward (w_f), correctness_reward (w_m), brier_reward (w_m)
rlvr     format_reward (w_f), correctness_reward (w_m)
rlsr_marginal  format_reward (w_f), marginal_aurc_reward (w_m): ours, not the paper's
sft      none: supervised fine-tuning on (question, answer) pairs (paper Sec. D.3)
=======  =====================================================================

Adding a method = one reward function + one ``register(MethodEntry(...))`` below (+ its
``recipes/method/<name>.yaml``); ``tests/test_methods.py`` checks what an entry must provide.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from trl import GRPOConfig, SFTConfig

from rlsr import rewards as R
from rlsr.config import (
    CONFIDENCE_SOURCES,
    ConfigError,
    MethodSettings,
    TrainSettings,
    closest_hint,
    is_number,
)
from rlsr.parsing import FULL_FORMAT, OPTIONAL_CONFIDENCE_FORMAT, FormatSpec
from rlsr.sft_trainer import SFTAnswerTrainer, sft_examples
from rlsr.trainer import RLSRTrainer

__all__ = [
    "MethodEntry",
    "Method",
    "REGISTRY",
    "register",
    "method_names",
    "get_entry",
    "resolve",
    "validate_method",
    "check_method",
    "reward_columns",
    "compute_reward_columns",
]

RewardFn = Callable[[np.ndarray, np.ndarray, np.ndarray, MethodSettings], np.ndarray]
_WEIGHT_FIELDS = {f.name for f in dataclasses.fields(MethodSettings)}


@dataclass(frozen=True)
class MethodEntry:
    """One training method (see the module docstring for each field)."""

    name: str
    columns: tuple[tuple[str, str], ...]
    rewards: RewardFn | None
    trainer: type
    validate: Callable[[MethodSettings], None]
    needs_confidence: bool
    summary: str
    args_class: type = GRPOConfig
    args_section: str = "grpo"
    train_examples: Callable | None = None
    confidence_sources: tuple[str, ...] = ("verbalized",)
    validate_trainer: Callable[[MethodSettings, dict], None] | None = None

    @property
    def rewarded(self) -> bool:
        """True for a reward-driven (GRPO) method, False for a supervised one."""
        return bool(self.columns)

    def weighted_columns(self, settings: MethodSettings) -> list[tuple[str, float]]:
        """``[(column name, reward weight), ...]``; each weight read from ``settings``."""
        return [(column, float(getattr(settings, weight))) for column, weight in self.columns]


@dataclass(frozen=True)
class Method:
    """A registry entry bound to its settings: what ``RLSRTrainer`` receives as ``method``."""

    entry: MethodEntry
    settings: MethodSettings

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def columns(self) -> list[tuple[str, float]]:
        return self.entry.weighted_columns(self.settings)

    @property
    def confidence_source(self) -> str:
        """``verbalized`` (the ``<confidence>`` tag) or ``logprob`` (``rlsr.logprob``)."""
        return self.settings.confidence

    @property
    def parse_spec(self) -> FormatSpec:
        """Format the format reward checks: the paper's four tags; with the log-prob selector the
        confidence block is optional and not read (``OPTIONAL_CONFIDENCE_FORMAT``)."""
        return OPTIONAL_CONFIDENCE_FORMAT if self.confidence_source == "logprob" else FULL_FORMAT

    def credited_correct(self, correct, format_ok) -> np.ndarray:
        """The correctness the reward credits: the verifier's verdict, and with
        ``settings.correct_requires_format`` (default) only where the format check passed
        (``correct & format_ok``). The pool files record it beside the raw verdict."""
        correct = np.asarray(correct, dtype=bool)
        if self.settings.correct_requires_format:
            return correct & np.asarray(format_ok, dtype=bool)
        return correct

    def rewards(self, correct, confidence, format_ok) -> np.ndarray:
        """Unweighted reward columns ``(n, n_columns)`` of one pooled batch (order of ``columns``).

        ``confidence`` uses NaN for a missing confidence. Rank-based terms are computed over the
        whole pool passed in; the caller passes every completion of the optimizer step.
        With ``settings.correct_requires_format`` (default) a completion that fails the format
        check counts as wrong: correct & format_ok, as RLCR's reference ``accuracy_reward``
        (damanimehul/RLCR ``reward_fns.py``), which the RLSR authors' code also calls.
        """
        if self.entry.rewards is None:
            raise ValueError(f"method {self.name!r} is supervised; it has no reward columns.")
        correct = self.credited_correct(correct, format_ok)
        format_ok = np.asarray(format_ok, dtype=bool)
        confidence = np.asarray(confidence, dtype=np.float64)
        out = np.asarray(self.entry.rewards(correct, confidence, format_ok, self.settings))
        if out.shape != (correct.shape[0], len(self.entry.columns)):
            raise ValueError(
                f"method {self.name!r}: its reward function returned shape {out.shape}; expected "
                f"{(correct.shape[0], len(self.entry.columns))} (one column per declared column)."
            )
        return out


REGISTRY: dict[str, MethodEntry] = {}


def register(entry: MethodEntry) -> MethodEntry:
    """Add ``entry`` to the registry after checking that it provides every part."""
    where = f"method entry {getattr(entry, 'name', entry)!r}"
    if not isinstance(entry, MethodEntry):
        raise TypeError(f"{where}: register a MethodEntry; got {type(entry).__name__}.")
    if not isinstance(entry.name, str) or not entry.name.isidentifier():
        raise ValueError(f"{where}: name must be an identifier such as 'rlsr'.")
    if entry.name in REGISTRY:
        raise ValueError(f"{where}: a method of that name is already registered.")
    if (entry.rewards is None) != (not entry.columns):
        raise ValueError(
            f"{where}: a reward-driven method lists its columns and a rewards function; a "
            "supervised one neither (columns=(), rewards=None)."
        )
    for pair in entry.columns:
        if not (
            isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            raise ValueError(
                f"{where}: columns entries are (column name, weight field); got {pair!r}."
            )
        if pair[1] not in _WEIGHT_FIELDS:
            raise ValueError(
                f"{where}: weight field {pair[1]!r} of column {pair[0]!r} is not a MethodSettings "
                f"field ({sorted(_WEIGHT_FIELDS)}); add it to rlsr.config.MethodSettings."
            )
    if len({c for c, _ in entry.columns}) != len(entry.columns):
        raise ValueError(f"{where}: column names must be distinct.")
    for part in ("rewards", "validate", "train_examples", "validate_trainer"):
        value = getattr(entry, part)
        if not callable(value) and not (part != "validate" and value is None):
            raise ValueError(f"{where}: {part} must be a function; got {value!r}.")
    if entry.args_section not in ("grpo", "sft") or not isinstance(entry.args_class, type):
        raise ValueError(
            f"{where}: args_section must be 'grpo' or 'sft' (a section of rlsr.config) and "
            f"args_class its trainer config class; got {entry.args_section!r}, {entry.args_class!r}."
        )
    if not entry.confidence_sources or not set(entry.confidence_sources) <= set(CONFIDENCE_SOURCES):
        raise ValueError(
            f"{where}: confidence_sources must be a non-empty subset of {CONFIDENCE_SOURCES}."
        )
    if not isinstance(entry.trainer, type):
        raise ValueError(f"{where}: trainer must be a trainer class; got {entry.trainer!r}.")
    if not isinstance(entry.needs_confidence, bool):
        raise ValueError(f"{where}: needs_confidence must be True or False.")
    if not isinstance(entry.summary, str) or not entry.summary:
        raise ValueError(f"{where}: summary must be a one-line description.")
    REGISTRY[entry.name] = entry
    return entry


def method_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get_entry(name: str) -> MethodEntry:
    """The registered entry called ``name``; ``ConfigError`` on ``method.name`` otherwise."""
    entry = REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ConfigError(
            "method.name",
            f"unknown method {name!r}; choose one of {method_names()} (e.g. method=rlsr)."
            f"{closest_hint(str(name), REGISTRY)}",
        )
    return entry


def resolve(settings: MethodSettings) -> Method:
    """The registry entry of ``settings.name`` bound to ``settings``."""
    return Method(get_entry(settings.name), settings)


def validate_method(settings: MethodSettings) -> None:
    """Run the entry's own config checks (the shared weight checks are in ``rlsr.config``)."""
    entry = get_entry(settings.name)
    if settings.confidence not in entry.confidence_sources:
        raise ConfigError(
            "method.confidence",
            f"method {entry.name!r} takes {list(entry.confidence_sources)}, not "
            f"{settings.confidence!r}; the log-probability selector ranks RLSR's pool "
            "(method=rlsr method.confidence=logprob).",
        )
    entry.validate(settings)


def check_method(cfg: TrainSettings) -> Method:
    """Every check that depends on which method ``cfg`` trains, in one place: the entry's own
    (``validate_method``), its trainer section's (``validate_trainer``), a section the method does
    not read, and the pool log (a method without a reward pool has nothing to write: said, then
    turned off). The section checks every method shares are ``rlsr.config``'s. Returns the
    entry bound to ``cfg.method``."""
    validate_method(cfg.method)
    entry = get_entry(cfg.method.name)
    section = entry.args_section
    if entry.validate_trainer is not None:
        entry.validate_trainer(cfg.method, getattr(cfg, section))
    if section == "grpo" and cfg.sft:  # a GRPO method: `sft` would be ignored
        raise ConfigError(
            f"sft.{next(iter(cfg.sft))}",
            f"the sft section is read by method=sft only; method={cfg.method.name} takes its "
            f"trainer settings from {section}.*.",
        )
    if not entry.rewarded and cfg.pool_log.every:
        # recipe=tiny turns the pool log on for every method; one trained on fixed answers
        # (method=sft) has no reward pool, so the setting does not apply to it: said, then off.
        print(
            f"[rlsr] pool_log.every={cfg.pool_log.every} does not apply to "
            f"method={cfg.method.name}: it trains on fixed answers and has no reward pool to "
            "write; no pools/ files.",
            flush=True,
        )
        cfg.pool_log.every = 0
    return Method(entry, cfg.method)


def reward_columns(settings: MethodSettings) -> list[tuple[str, float]]:
    """``[(column name, reward weight), ...]`` of the method ``settings.name``."""
    return resolve(settings).columns


def compute_reward_columns(settings: MethodSettings, correct, confidence, format_ok) -> np.ndarray:
    """Unweighted reward columns of one pooled batch for the method ``settings.name``."""
    return resolve(settings).rewards(correct, confidence, format_ok)


# --------------------------------------------------------------------------- config checks


def _check(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ConfigError(field_name, message)


def _validate_lifted_aurc(m: MethodSettings) -> None:
    _check(
        is_number(m.correct_scale) and m.correct_scale >= 0,
        "method.correct_scale",
        f"must be >= 0; got {m.correct_scale!r} (paper: 1.0).",
    )
    _check(
        m.weight_cap is None or (is_number(m.weight_cap) and m.weight_cap > 0),
        "method.weight_cap",
        f"must be > 0 or null (no cap); got {m.weight_cap!r}.",
    )
    _check(
        is_number(m.max_coverage) and 0.0 < m.max_coverage <= 1.0,
        "method.max_coverage",
        f"must be in (0, 1]; got {m.max_coverage!r} (1.0 = full AURC; 0.5 = partial AURC "
        "over the most confident half).",
    )


def _proper_under_grpo_scaling(m: MethodSettings, grpo: dict) -> None:
    """Marginal credit orders completions by p only if every completion's reward is compared on
    one scale: TRL's per-group std normalisation (scale_rewards=group) divides each prompt's
    rewards by that group's own std, which rescales the incentive differently per prompt and
    breaks the order (docs/training.md, "What each reward teaches"). ``batch`` (one std for the
    whole batch) and ``none`` keep it."""
    value = grpo.get("scale_rewards", "group")
    _check(
        value in ("none", "batch", False),
        "grpo.scale_rewards",
        f"method=rlsr-marginal needs 'none' (as recipes/config.yaml) or 'batch'; got {value!r}. "
        "Per-group std normalisation rescales each prompt's marginal credits by that group's "
        "own spread, so the best response no longer orders completions by their chance of "
        "being right (docs/training.md, 'What each reward teaches').",
    )


def _no_lifted_aurc_options(m: MethodSettings) -> None:
    _check(
        m.max_coverage == 1.0 and m.weight_cap is None and m.correct_scale == 1.0,
        "method.max_coverage",
        f"max_coverage / weight_cap / correct_scale only apply to method=rlsr, not "
        f"{m.name!r}; remove those overrides.",
    )


# --------------------------------------------------------------------------- reward functions


def _format_and_ranked(ranked, correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, ``ranked`` over the pool with the settings' lambda, cap and coverage]."""
    column = ranked(
        correct,
        confidence,
        correct_scale=s.correct_scale,
        weight_cap=s.weight_cap,
        max_coverage=s.max_coverage,
    )
    return np.stack([R.format_reward(format_ok), column], axis=1)


def rlsr_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, lifted AURC over the pool] (RLSR paper Sec. 2.2, ``rlsr.rewards``)."""
    return _format_and_ranked(R.lifted_aurc_rewards, correct, confidence, format_ok, s)


def rlsr_marginal_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, marginal credit for the pooled lifted AURC] (ours; ``rlsr.rewards``)."""
    return _format_and_ranked(R.marginal_aurc_rewards, correct, confidence, format_ok, s)


def rlcr_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, correctness, Brier] (RLCR, Damani et al.; ``rlsr.rewards``)."""
    return np.stack(
        [
            R.format_reward(format_ok),
            R.correctness_reward(correct),
            R.brier_reward(correct, confidence, format_ok),
        ],
        axis=1,
    )


def rlvr_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, correctness] (RLVR)."""
    return np.stack([R.format_reward(format_ok), R.correctness_reward(correct)], axis=1)


# --------------------------------------------------------------------------- the methods

register(
    MethodEntry(
        name="rlsr",
        columns=(("format_reward", "format_weight"), ("lifted_aurc_reward", "method_weight")),
        rewards=rlsr_rewards,
        trainer=RLSRTrainer,
        validate=_validate_lifted_aurc,
        needs_confidence=True,
        summary="format + lifted AURC ranked over the whole pooled batch (paper Sec. 2.2)",
        confidence_sources=CONFIDENCE_SOURCES,
    )
)
register(
    MethodEntry(
        name="rlsr_marginal",
        columns=(("format_reward", "format_weight"), ("marginal_aurc_reward", "method_weight")),
        rewards=rlsr_marginal_rewards,
        trainer=RLSRTrainer,
        validate=_validate_lifted_aurc,
        needs_confidence=True,
        summary="format + each completion's marginal credit for the pooled lifted AURC (ours, "
        "not the paper's; recipes/method/rlsr-marginal.yaml)",
        validate_trainer=_proper_under_grpo_scaling,
    )
)
register(
    MethodEntry(
        name="rlcr",
        columns=(
            ("format_reward", "format_weight"),
            ("correctness_reward", "method_weight"),
            ("brier_reward", "method_weight"),
        ),
        rewards=rlcr_rewards,
        trainer=RLSRTrainer,
        validate=_no_lifted_aurc_options,
        needs_confidence=True,
        summary="format + correctness + Brier score of the confidence (RLCR baseline)",
    )
)
register(
    MethodEntry(
        name="rlvr",
        columns=(("format_reward", "format_weight"), ("correctness_reward", "method_weight")),
        rewards=rlvr_rewards,
        trainer=RLSRTrainer,
        validate=_no_lifted_aurc_options,
        needs_confidence=False,
        summary="format + correctness (RLVR baseline)",
    )
)
register(
    MethodEntry(
        name="sft",
        columns=(),
        rewards=None,
        trainer=SFTAnswerTrainer,
        validate=_no_lifted_aurc_options,
        needs_confidence=False,
        summary="SFT-Answer-Only: supervised fine-tuning on (question, answer) pairs, no chain of "
        "thought, no confidence (paper Sec. D.3); evaluate with the consistency scorer",
        args_class=SFTConfig,
        args_section="sft",
        train_examples=sft_examples,
    )
)
