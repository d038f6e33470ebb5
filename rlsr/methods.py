"""The method registry: every training method declared once (in the spirit of open-r1's rewards).

An entry (``MethodEntry``) states everything that differs between methods:

=================  ===============================================================================
name               the ``method.name`` of the recipes (``method=rlsr``)
columns            reward columns and the ``MethodSettings`` field holding each column's weight
rewards            ``f(correct, confidence, format_ok, settings) -> (n, len(columns))`` array,
                   unweighted, over one whole pooled batch (equations from ``rlsr.rewards``)
trainer            the trainer class ``rlsr.training`` builds (``RLSRTrainer`` for GRPO methods)
validate           ``f(settings)`` raising ``ConfigError`` naming the field of a bad value
needs_confidence   whether the reward reads the ``<confidence>`` tag
summary            one line for docs and error messages
=================  ===============================================================================

Columns and weights (weights from ``recipes/method/<name>.yaml``; 0.5 / 0.5 by default, as in
the authors' released configs; the paper text writes R_method + R_format):

=======  =====================================================================
rlsr     format_reward (w_f), lifted_aurc_reward (w_m)
rlcr     format_reward (w_f), correctness_reward (w_m), brier_reward (w_m)
rlvr     format_reward (w_f), correctness_reward (w_m)
=======  =====================================================================

Adding a method = one reward function + one ``register(MethodEntry(...))`` below (+ its
``recipes/method/<name>.yaml``); ``tests/test_methods.py`` checks what an entry must provide.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlsr import rewards as R
from rlsr.config import ConfigError, MethodSettings, closest_hint, is_number
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
    rewards: RewardFn
    trainer: type
    validate: Callable[[MethodSettings], None]
    needs_confidence: bool
    summary: str

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

    def rewards(self, correct, confidence, format_ok) -> np.ndarray:
        """Unweighted reward columns ``(n, n_columns)`` of one pooled batch (order of ``columns``).

        ``confidence`` uses NaN for a missing confidence. Rank-based terms are computed over the
        whole pool passed in; the caller passes every completion of the optimizer step.
        With ``settings.correct_requires_format`` (default) a completion that fails the format
        check counts as wrong: correct & format_ok, as RLCR's reference ``accuracy_reward``
        (damanimehul/RLCR ``reward_fns.py``), which the RLSR authors' code also calls.
        """
        correct = np.asarray(correct, dtype=bool)
        format_ok = np.asarray(format_ok, dtype=bool)
        if self.settings.correct_requires_format:
            correct = correct & format_ok
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
    if not entry.columns:
        raise ValueError(f"{where}: columns must list at least one (column, weight field) pair.")
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
    for part in ("rewards", "validate"):
        if not callable(getattr(entry, part)):
            raise ValueError(f"{where}: {part} must be a function; got {getattr(entry, part)!r}.")
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
    get_entry(settings.name).validate(settings)


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


def _no_lifted_aurc_options(m: MethodSettings) -> None:
    _check(
        m.max_coverage == 1.0 and m.weight_cap is None and m.correct_scale == 1.0,
        "method.max_coverage",
        f"max_coverage / weight_cap / correct_scale only apply to method=rlsr, not "
        f"{m.name!r}; remove those overrides.",
    )


# --------------------------------------------------------------------------- reward functions


def rlsr_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, lifted AURC over the pool] (RLSR paper Sec. 2.2, ``rlsr.rewards``)."""
    lifted = R.lifted_aurc_rewards(
        correct,
        confidence,
        correct_scale=s.correct_scale,
        weight_cap=s.weight_cap,
        max_coverage=s.max_coverage,
    )
    return np.stack([R.format_reward(format_ok), lifted], axis=1)


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
