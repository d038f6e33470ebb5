"""The reward methods: each one a reward function plus one registry entry (as open-r1's rewards).

An entry (``MethodEntry``) holds what a method needs and nothing else:

========  ========================================================================================
name      the ``method.name`` of the recipes (``method=rlsr``)
columns   the reward columns' names, in order (TRL logs ``rewards/<name>/mean``)
reward    ``f(correct, confidence, format_ok, settings) -> (n, len(columns))`` array, unweighted,
          over one whole pooled batch (equations from ``rlsr.equations.rewards``); the function's docstring
          is the method's one-line description
weights   per column, the ``MethodSettings`` field holding its weight (``format_weight``, ...)
validate  ``f(settings, grpo)`` raising ``ConfigError`` naming the field of a bad value
          (``settings``: ``MethodSettings``; ``grpo``: the trainer section, for a method whose
          reward only means what it says under some trainer settings)
========  ========================================================================================

Columns and weights (weights from ``recipes/method/<name>.yaml``; 0.5 / 0.5 by default, as in
the authors' released configs; the paper text writes R_method + R_format):

=============  ============================================================================
rlsr           format_reward (w_f), lifted_aurc_reward (w_m)
rlcr           format_reward (w_f), correctness_reward (w_m), brier_reward (w_m)
rlvr           format_reward (w_f), correctness_reward (w_m)
rlsr_marginal  format_reward (w_f), marginal_aurc_reward (w_m): ours, not the paper's
=============  ============================================================================

Adding a method = one reward function + one ``register(MethodEntry(...))`` below (+ its
``recipes/method/<name>.yaml``), or, outside the package, the same two in a module of your own
named by ``method.plugin: package.module:NAME`` (``load_method``; docs/methods.md).
``tests/test_methods.py`` checks what an entry must provide.

``method=sft`` (SFT-Answer-Only, paper Sec. D.3) trains on fixed answers, not on a reward: it is
no registry entry. ``args_section`` sends it to its own trainer (``rlsr.method.sft_trainer``, from the
``sft`` section); ``check_method`` runs its checks. This module imports no trainer.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from rlsr.config import CONFIDENCE_SOURCES, MethodSettings, TrainSettings
from rlsr.core.checks import ConfigError, closest_hint, is_number
from rlsr.core.checks import check as _check
from rlsr.core.parsing import FULL_FORMAT, OPTIONAL_CONFIDENCE_FORMAT, FormatSpec
from rlsr.core.plugins import load_named
from rlsr.equations import rewards as R

__all__ = [
    "MethodEntry",
    "Method",
    "REGISTRY",
    "SFT",
    "register",
    "check_entry",
    "load_method",
    "method_names",
    "get_entry",
    "resolve",
    "args_section",
    "validate_method",
    "check_method",
    "check_plain_reward",
    "reward_columns",
    "compute_reward_columns",
]

RewardFn = Callable[[np.ndarray, np.ndarray, np.ndarray, MethodSettings], np.ndarray]
ValidateFn = Callable[[MethodSettings, Mapping], None]
_WEIGHT_FIELDS = {f.name for f in dataclasses.fields(MethodSettings)}
# method=sft: the supervised baseline (module docstring), trained from the `sft` section.
SFT = "sft"


@dataclass(frozen=True)
class MethodEntry:
    """One reward method (see the module docstring for each field)."""

    name: str
    columns: tuple[str, ...]
    reward: RewardFn
    weights: tuple[str, ...]
    validate: ValidateFn


@dataclass(frozen=True)
class Method:
    """A registry entry bound to its settings: what ``RLSRTrainer`` receives as ``method``, and
    calls on each pool (``method(pool)``)."""

    entry: MethodEntry
    settings: MethodSettings

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def columns(self) -> list[tuple[str, float]]:
        """``[(column name, reward weight), ...]``; each weight read from ``settings``."""
        weights = [float(getattr(self.settings, w)) for w in self.entry.weights]
        return list(zip(self.entry.columns, weights, strict=True))

    @property
    def confidence_source(self) -> str:
        """``verbalized`` (the ``<confidence>`` tag) or ``logprob`` (``rlsr.equations.logprob``)."""
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
        correct = self.credited_correct(correct, format_ok)
        format_ok = np.asarray(format_ok, dtype=bool)
        confidence = np.asarray(confidence, dtype=np.float64)
        out = np.asarray(self.entry.reward(correct, confidence, format_ok, self.settings))
        if out.shape != (correct.shape[0], len(self.entry.columns)):
            raise ValueError(
                f"method {self.name!r}: its reward function returned shape {out.shape}; expected "
                f"{(correct.shape[0], len(self.entry.columns))} (one column per declared column)."
            )
        return out

    def __call__(self, pool) -> np.ndarray:
        """The reward columns of ``pool`` (``rlsr.method.pool.Pool``: the whole optimizer step's)."""
        return self.rewards(pool.correct, pool.confidence, pool.format_ok)


REGISTRY: dict[str, MethodEntry] = {}


def _takes(function: Callable, n: int) -> bool:
    """Whether ``function`` can be called with ``n`` positional arguments (True when Python
    cannot tell, e.g. for some built-ins)."""
    try:
        inspect.signature(function).bind(*([None] * n))
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def check_entry(entry: MethodEntry) -> MethodEntry:
    """``ValueError`` naming the part of ``entry`` that is missing or wrong; else ``entry``."""
    where = f"method entry {getattr(entry, 'name', entry)!r}"
    if not isinstance(entry, MethodEntry):
        raise TypeError(f"{where}: register a MethodEntry; got {type(entry).__name__}.")
    if not isinstance(entry.name, str) or not entry.name.isidentifier():
        raise ValueError(f"{where}: name must be an identifier such as 'rlsr'.")
    if entry.name == SFT:
        raise ValueError(f"{where}: {SFT!r} is the supervised baseline (rlsr.method.sft_trainer).")
    columns, weights = entry.columns, entry.weights
    if (
        not isinstance(columns, tuple)
        or not columns
        or not all(isinstance(c, str) for c in columns)
    ):
        raise ValueError(f"{where}: columns must be a tuple of at least one column name.")
    if len(set(columns)) != len(columns):
        raise ValueError(f"{where}: column names must be distinct.")
    if not isinstance(weights, tuple) or len(weights) != len(columns):
        raise ValueError(
            f"{where}: weights must be a tuple of one MethodSettings field per column "
            f"({len(columns)}); got {weights!r}."
        )
    for column, weight in zip(columns, weights, strict=True):
        if weight not in _WEIGHT_FIELDS:
            raise ValueError(
                f"{where}: weight field {weight!r} of column {column!r} is not a MethodSettings "
                f"field ({sorted(_WEIGHT_FIELDS)}); add it to rlsr.config.MethodSettings."
            )
    for part, args in (("reward", "correct, confidence, format_ok, settings"),
                       ("validate", "settings, grpo")):  # fmt: skip
        value = getattr(entry, part)
        if not callable(value):
            raise ValueError(f"{where}: {part} must be a function; got {value!r}.")
        if not _takes(value, args.count(",") + 1):
            raise ValueError(
                f"{where}: {part} {getattr(value, '__name__', value)}{inspect.signature(value)} "
                f"cannot be called as {part}({args})."
            )
    return entry


def register(entry: MethodEntry) -> MethodEntry:
    """Add ``entry`` to the registry after checking that it provides every part."""
    check_entry(entry)
    if entry.name in REGISTRY:
        raise ValueError(
            f"method entry {entry.name!r}: a method of that name is already registered."
        )
    REGISTRY[entry.name] = entry
    return entry


def load_method(spec: str) -> MethodEntry:
    """The ``MethodEntry`` that ``method.plugin`` names (``"package.module:NAME"``, imported as a
    verifier plugin is: ``rlsr.core.plugins.load_named``), checked as ``register`` checks one.
    ``ConfigError`` on ``method.plugin`` naming the module and what is wrong."""
    try:
        entry = load_named(spec, kind="method plugin", example="my_method:METHOD",
                           thing="MethodEntry",
                           accept=lambda value: isinstance(value, MethodEntry))  # fmt: skip
        check_entry(entry)
    except (ValueError, TypeError) as err:
        raise ConfigError("method.plugin", f"{err} (docs/methods.md)") from None
    if entry.name in REGISTRY or entry.name == SFT:
        raise ConfigError(
            "method.plugin",
            f"{spec!r} declares name {entry.name!r}, a built-in method of rlsr; give the entry a "
            "name of its own.",
        )
    return entry


def method_names() -> tuple[str, ...]:
    """The built-in methods: the registry's and ``sft``."""
    return (*REGISTRY, SFT)


def get_entry(name: str, plugin: str | None = None) -> MethodEntry:
    """The entry of method ``name``: ``plugin``'s (``method.plugin``; its ``name`` must be
    ``name``), else the registered one; ``ConfigError`` naming the field otherwise."""
    if plugin is not None:
        entry = load_method(plugin)
        if entry.name != name:
            raise ConfigError(
                "method.name",
                f"method.plugin {plugin!r} declares the method {entry.name!r}, not {name!r}; set "
                f"method.name={entry.name}.",
            )
        return entry
    entry = REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ConfigError(
            "method.name",
            f"unknown method {name!r}; choose one of {method_names()} (e.g. method=rlsr)."
            f"{closest_hint(str(name), method_names())}",
        )
    return entry


def args_section(settings: MethodSettings) -> str:
    """The section holding the method's trainer arguments: ``sft`` for the supervised
    baseline (its own trainer, ``rlsr.method.sft_trainer``), ``grpo`` for every reward method."""
    return "sft" if settings.name == SFT else "grpo"


def resolve(settings: MethodSettings) -> Method:
    """The entry of ``settings.name`` (``settings.plugin``'s when set) bound to ``settings``."""
    if args_section(settings) == "sft":
        raise ValueError(f"method {SFT!r} is supervised; it has no reward columns.")
    return Method(get_entry(settings.name, settings.plugin), settings)


def validate_method(settings: MethodSettings, grpo: Mapping | None = None) -> None:
    """Run the method's own checks (the shared weight checks are in ``rlsr.config``):
    ``sft``'s, else its entry's ``validate(settings, grpo)``; ``grpo``: the trainer section
    (None: TRL's defaults)."""
    if args_section(settings) == "sft":
        check_plain_reward(settings, {})
        return
    resolve(settings).entry.validate(settings, {} if grpo is None else grpo)


def check_method(cfg: TrainSettings) -> Method | None:
    """Every check that depends on which method ``cfg`` trains, in one place: the method's own
    (``validate_method``) and a section the method does not read. The section checks every
    method shares are ``rlsr.config``'s. Reads ``cfg`` only (the pool log of a method without a
    reward pool is the run plan's to turn off: ``rlsr.method.run_plan``). Returns the entry bound to
    ``cfg.method``; None for ``sft``, which has no reward method."""
    validate_method(cfg.method, cfg.grpo)
    if args_section(cfg.method) == "sft":
        return None
    if cfg.sft:  # a GRPO method: `sft` would be ignored
        raise ConfigError(
            f"sft.{next(iter(cfg.sft))}",
            f"the sft section is read by method=sft only; method={cfg.method.name} takes its "
            "trainer settings from grpo.*.",
        )
    return resolve(cfg.method)


def reward_columns(settings: MethodSettings) -> list[tuple[str, float]]:
    """``[(column name, reward weight), ...]`` of the method ``settings.name``."""
    return resolve(settings).columns


def compute_reward_columns(settings: MethodSettings, correct, confidence, format_ok) -> np.ndarray:
    """Unweighted reward columns of one pooled batch for the method ``settings.name``."""
    return resolve(settings).rewards(correct, confidence, format_ok)


# --------------------------------------------------------------------------- config checks


def _verbalized_confidence(m: MethodSettings) -> None:
    _check(
        m.confidence == CONFIDENCE_SOURCES[0],
        "method.confidence",
        f"method {m.name!r} takes {[CONFIDENCE_SOURCES[0]]}, not {m.confidence!r}; the "
        "log-probability selector ranks RLSR's pool (method=rlsr method.confidence=logprob).",
    )


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


def _check_rlsr(m: MethodSettings, grpo: Mapping) -> None:
    """The lifted-AURC options; either confidence source ranks the pool (paper Sec. D.4)."""
    _validate_lifted_aurc(m)


def _check_marginal(m: MethodSettings, grpo: Mapping) -> None:
    """The lifted-AURC options, the verbalized confidence, and a GRPO scaling under which
    marginal credit still orders completions by p: TRL's per-group std normalisation
    (scale_rewards=group) divides each prompt's rewards by that group's own std, which rescales
    the incentive differently per prompt and breaks the order (docs/methods.md, "What each
    reward teaches"). ``batch`` (one std for the whole batch) and ``none`` keep it."""
    _verbalized_confidence(m)
    _validate_lifted_aurc(m)
    value = grpo.get("scale_rewards", "group")
    _check(
        value in ("none", "batch", False),
        "grpo.scale_rewards",
        f"method=rlsr-marginal needs 'none' (as recipes/config.yaml) or 'batch'; got {value!r}. "
        "Per-group std normalisation rescales each prompt's marginal credits by that group's "
        "own spread, so the best response no longer orders completions by their chance of "
        "being right (docs/methods.md, 'What each reward teaches').",
    )


def check_plain_reward(m: MethodSettings, grpo: Mapping) -> None:
    """The checks of a method that does not rank the pool by lifted AURC (rlcr, rlvr, sft, and a
    plugin's natural ``validate``): the verbalized confidence, and the lifted-AURC options left
    at their defaults."""
    _verbalized_confidence(m)
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
    """[format, lifted AURC ranked over the whole pooled batch] (RLSR paper Sec. 2.2,
    ``rlsr.equations.rewards``)."""
    return _format_and_ranked(R.lifted_aurc_rewards, correct, confidence, format_ok, s)


def rlsr_marginal_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, each completion's marginal credit for the pooled lifted AURC] (ours, not the
    paper's; ``rlsr.equations.rewards``; recipes/method/rlsr-marginal.yaml)."""
    return _format_and_ranked(R.marginal_aurc_rewards, correct, confidence, format_ok, s)


def rlcr_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, correctness, Brier score of the confidence] (RLCR baseline, Damani et al.;
    ``rlsr.equations.rewards``)."""
    return np.stack(
        [
            R.format_reward(format_ok),
            R.correctness_reward(correct),
            R.brier_reward(correct, confidence, format_ok),
        ],
        axis=1,
    )


def rlvr_rewards(correct, confidence, format_ok, s: MethodSettings) -> np.ndarray:
    """[format, correctness] (RLVR baseline)."""
    return np.stack([R.format_reward(format_ok), R.correctness_reward(correct)], axis=1)


# --------------------------------------------------------------------------- the methods

FORMAT_AND_METHOD = ("format_weight", "method_weight")

register(
    MethodEntry(
        name="rlsr",
        columns=("format_reward", "lifted_aurc_reward"),
        reward=rlsr_rewards,
        weights=FORMAT_AND_METHOD,
        validate=_check_rlsr,
    )
)
register(
    MethodEntry(
        name="rlsr_marginal",
        columns=("format_reward", "marginal_aurc_reward"),
        reward=rlsr_marginal_rewards,
        weights=FORMAT_AND_METHOD,
        validate=_check_marginal,
    )
)
register(
    MethodEntry(
        name="rlcr",
        columns=("format_reward", "correctness_reward", "brier_reward"),
        reward=rlcr_rewards,
        weights=("format_weight", "method_weight", "method_weight"),
        validate=check_plain_reward,
    )
)
register(
    MethodEntry(
        name="rlvr",
        columns=("format_reward", "correctness_reward"),
        reward=rlvr_rewards,
        weights=FORMAT_AND_METHOD,
        validate=check_plain_reward,
    )
)
