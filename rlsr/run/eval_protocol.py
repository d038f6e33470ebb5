"""The evaluation protocol, declared once: how an answer is generated, scored and summarised.

Each ``EvalProtocol`` field carries its default, the values it accepts and its help text; every
view derives from it: ``rlsr evaluate``'s flags (``add_protocol_flags``), the runner's
``EvalSettings`` (a subclass), the ``heldout.*`` keys (``protocol_keys``), ``method.evaluate``
(``check_mapping``), the first-source-wins rule of the held-out evaluation
(``protocol_from_sources``) and the flags Slurm and the toy pass to ``rlsr evaluate``
(``to_flags``). A run's inputs and outputs (datasets, model, output folder, judge) are not here.
A bad value raises ``ProtocolError(field, message)``; each view names the field its own way.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlsr.core.checks import closest_hint, is_int, is_number
from rlsr.core.prompts import NO_SYSTEM_PROMPT, system_prompt_names

__all__ = [
    "SCORERS",
    "TEACHER_FORCED_SCORERS",
    "RESPONSE_FORMATS",
    "ProtocolError",
    "EvalProtocol",
    "PROTOCOL_FIELDS",
    "SAMPLE_FIELDS",
    "DECODING_FIELDS",
    "check_scorers",
    "check_mapping",
    "protocol_from_sources",
    "to_flags",
    "flag_of",
    "add_protocol_flags",
    "protocol_from_args",
    "protocol_keys",
    "evaluate_mapping_of",
    "protocol_flags",
]

SCORERS = ("verbalized", "logprob", "consistency", "expected")
# The scorers that teacher-force the model's own text (``Backend.score``): an endpoint without
# prompt log-probs cannot run them.
TEACHER_FORCED_SCORERS = ("logprob", "expected")
RESPONSE_FORMATS = ("tags", "plain")


class ProtocolError(ValueError):
    """A protocol value is wrong: ``field`` names it, ``message`` says what and the fix."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        self.message = message
        super().__init__(f"{field_name}: {message}")


def _at_least(low: int, *, optional: bool = False):
    text = f">= {low} (an integer{' or null' if optional else ''})"
    return (lambda v: (optional and v is None) or (is_int(v) and v >= low)), text


def _number(test, text: str):
    return (lambda v: is_number(v) and test(v)), text


_BOOL = (lambda v: isinstance(v, bool), "true or false")


def _comma_list(text: str) -> tuple[str, ...]:
    """``--scorers a,b`` -> ``("a", "b")``."""
    return tuple(s.strip() for s in text.split(",") if s.strip())


def setting(default, help: str, *, valid, flag=None, decides_samples=True, decodes=False, **cli):
    """A protocol field. ``valid``: (predicate, what it accepts, or a function giving that text);
    ``help``: the ``rlsr evaluate --help`` text; ``flag`` when not ``--<name-with-dashes>``;
    ``decides_samples``: a rerun into the same output folder must agree on it (``SAMPLE_FIELDS``);
    ``decodes``: it decides a response's text given its prompt, so a served model must reuse the
    certified value (``DECODING_FIELDS``, recorded by ``rlsr deploy``, flags of ``rlsr serve``);
    ``cli``: more ``argparse.add_argument`` keywords."""
    metadata = {"help": help, "valid": valid, "flag": flag, "cli": cli, "decodes": decodes}
    return field(default=default, metadata={**metadata, "decides_samples": decides_samples})


def _token_budget(default: int, help: str):
    return setting(default, help, valid=_at_least(1), decodes=True, type=int, metavar="N")


@dataclass(frozen=True)
class EvalProtocol:
    """How ``rlsr evaluate`` and the held-out evaluation answer and score a question. Defaults:
    the paper's protocol (Sec. C.5: greedy, 4,096 new tokens, one response; Sec. C.3 fallbacks;
    verbalized confidence)."""

    max_new_tokens: int = _token_budget(4096, "response token budget")
    temperature: float = setting(
        0.0,
        "0 = greedy (paper); Tab. 5 seeds use 0.3",
        valid=_number(lambda v: v >= 0, ">= 0 (0: greedy)"),
        decodes=True,
        type=float,
    )
    top_p: float = setting(
        1.0,
        "nucleus sampling",
        valid=_number(lambda v: 0 < v <= 1, "in (0, 1]"),
        decodes=True,
        type=float,
        metavar="P",
    )
    seed: int = setting(0, "sampling and bootstrap seed", valid=(is_int, "an integer"), type=int)
    batch_size: int | None = setting(  # None: the backend's
        None,
        "prompts in flight: transformers pads N per generate call (default 8); vLLM keeps "
        "N requests on its engine and writes each sample as it finishes (default 256)",
        valid=_at_least(1, optional=True),
        decides_samples=False,  # how many are in flight, not what each answer is
        type=int,
        metavar="N",
    )
    fallbacks: bool = setting(
        True,
        "skip the Sec. C.3 fallbacks",
        valid=_BOOL,
        decodes=True,
        flag="--no-fallbacks",
        action="store_false",
    )
    fallback_max_new_tokens: int = _token_budget(
        64, "token budget of each Sec. C.3 fallback continuation"
    )
    # The first is the primary scorer; None: consistency for plain answers, else verbalized.
    scorers: tuple[str, ...] | None = setting(
        None,
        "comma list of verbalized,logprob,consistency,expected (the policy's expected "
        "verbalized confidence, rlsr.equations.logprob); the first is the primary scorer "
        "(summary line, report tables). Default: verbalized; consistency with "
        "--response-format plain",
        valid=(
            lambda v: (
                v is None
                or (
                    isinstance(v, list | tuple)
                    and len(v) > 0
                    and all(isinstance(s, str) for s in v)
                )
            ),
            f"a non-empty list of {', '.join(SCORERS)}",
        ),
        type=_comma_list,
    )
    # tags: <answer>/<confidence> (Sec. C.1); plain: the first non-empty line (Sec. D.3)
    response_format: str = setting(
        "tags",
        "tags: <answer>/<confidence> (paper Sec. C.1); plain: no tags, the answer is the "
        "first non-empty line, no fallbacks, no verbalized scorer (method=sft models)",
        valid=(lambda v: v in RESPONSE_FORMATS, f"one of {', '.join(RESPONSE_FORMATS)}"),
        choices=RESPONSE_FORMATS,
    )
    consistency_k: int = setting(  # paper Sec. D.3: K = 8 at T = 0.7
        8, "samples of the consistency scorer", valid=_at_least(1), type=int, metavar="K"
    )
    consistency_temperature: float = setting(
        0.7,
        "sampling temperature of the consistency scorer",
        valid=_number(lambda v: v > 0, "> 0 (K samples at temperature 0 would all agree)"),
        type=float,
        metavar="T",
    )
    # None: the caller's default (rlsr evaluate: the tasks' own; held-out: the training data's)
    system_prompt: str | None = setting(
        None,
        "simple, long, none (no system message: method=sft models) or a task's prompt name "
        "(docs/tasks.md); default: the training domain's prompt when --tasks is a group, else "
        "each task's own",
        valid=(
            lambda v: v is None or v in (*system_prompt_names(), NO_SYSTEM_PROMPT),
            lambda: (
                f"one of {[*system_prompt_names(), NO_SYSTEM_PROMPT]} or null (a task's own "
                "prompt name is known with --tasks-dir DIR, tasks_dir in training)"
            ),
        ),
    )
    dcs: bool = setting(
        False, "DCS with an IDK option on MCQ tasks", valid=_BOOL, action="store_true"
    )
    bootstrap: int = setting(
        1000,
        "bootstrap resamples for CIs (0 = off)",
        valid=_at_least(0),
        decides_samples=False,  # metrics.json is rebuilt from the samples at every run
        type=int,
        metavar="N",
    )
    keep_token_ids: bool = setting(
        False,
        "also store each response's generated token ids in its sample record "
        "(response_token_ids), to compare backends by ids rather than decoded text",
        valid=_BOOL,
        decides_samples=False,  # an extra column, not another answer
        action="store_true",
    )

    def __post_init__(self) -> None:
        """Check every field against its ``valid``; fill in the scorers (``check_scorers``)."""
        scorers = self.scorers  # a comma list (heldout.scorers=a,b) or a YAML list: a tuple
        if isinstance(scorers, str | list):
            scorers = _comma_list(scorers) if isinstance(scorers, str) else tuple(scorers)
            object.__setattr__(self, "scorers", scorers)
        for f in dataclasses.fields(EvalProtocol):
            value = getattr(self, f.name)
            accepts, text = f.metadata["valid"]
            if not accepts(value):
                text = text() if callable(text) else text
                raise ProtocolError(f.name, f"must be {text}; got {value!r}.")
        object.__setattr__(self, "scorers", check_scorers(self.scorers, self.response_format))

    def values(self) -> dict[str, Any]:
        """``{field: value}`` of the protocol's fields only (a subclass's own fields left out)."""
        return {name: getattr(self, name) for name in PROTOCOL_FIELDS}


_FIELDS = {f.name: f for f in dataclasses.fields(EvalProtocol)}
PROTOCOL_FIELDS: tuple[str, ...] = tuple(_FIELDS)
SAMPLE_FIELDS = tuple(n for n, f in _FIELDS.items() if f.metadata["decides_samples"])
DECODING_FIELDS = tuple(n for n, f in _FIELDS.items() if f.metadata["decodes"])


def check_scorers(names: Sequence[str] | None, response_format: str = "tags") -> tuple[str, ...]:
    """Scorer names checked, the first one the primary scorer; None: ``consistency`` for plain
    responses, else ``verbalized``. ``tags`` responses always report ``verbalized`` too (it costs
    nothing); ``plain`` ones carry no confidence, so ``verbalized`` is an error there."""
    if names is None:
        names = ("consistency",) if response_format == "plain" else ("verbalized",)
    names = tuple(dict.fromkeys(names))
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise ProtocolError("scorers", f"unknown scorer(s) {unknown}; choose from {SCORERS}.")
    if response_format == "plain":
        if "verbalized" in names or not names:
            raise ProtocolError(
                "scorers",
                "must not include verbalized with response_format plain: plain answers state no "
                "confidence; choose consistency (paper Sec. D.3) and/or logprob.",
            )
        return names
    return names if "verbalized" in names else (*names, "verbalized")


def check_mapping(values: Mapping | None, where: str) -> dict[str, Any]:
    """A mapping of protocol fields (``method.evaluate``) as a plain dict, every key a field and
    every value accepted; ``ProtocolError`` names ``where.<key>``."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ProtocolError(
            where, f"must be a mapping of evaluation settings, e.g. {{scorers: [logprob]}}; got "
            f"{values!r}."
        )  # fmt: skip
    out = dict(values)
    for key in out:
        if key not in _FIELDS:
            hint = closest_hint(str(key), PROTOCOL_FIELDS)
            raise ProtocolError(
                f"{where}.{key}",
                f"not an evaluation setting.{hint} Known: {', '.join(PROTOCOL_FIELDS)}.",
            )
    try:
        EvalProtocol(**out)
    except ProtocolError as err:
        raise ProtocolError(f"{where}.{err.field}", err.message) from None
    return out


def protocol_from_sources(sources: Iterable[tuple[str, Mapping[str, Any]]]) -> EvalProtocol:
    """The protocol whose each field comes from the first source (``(name, {field: value})``,
    most specific first) that sets it (not None), else its default. A bad value's
    ``ProtocolError`` is named after the source that set it (``heldout.top_p``)."""
    chosen: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, values in sources:
        for key, value in (values or {}).items():
            if key in _FIELDS and key not in chosen and value is not None:
                chosen[key], source[key] = value, name
    try:
        return EvalProtocol(**chosen)
    except ProtocolError as err:
        where = source.get(err.field)
        raise ProtocolError(f"{where}.{err.field}" if where else err.field, err.message) from None


def flag_of(name: str) -> str:
    """The ``rlsr evaluate`` flag of protocol field ``name`` (``--no-fallbacks`` for fallbacks)."""
    return _FIELDS[name].metadata["flag"] or "--" + name.replace("_", "-")


def to_flags(values: Mapping[str, Any] | None, where: str = "evaluate") -> list[str]:
    """``rlsr evaluate`` flags that set ``values`` (checked; None left out), in order:
    ``{scorers: [consistency], consistency_k: 8}`` -> ``["--scorers", "consistency",
    "--consistency-k", "8"]``; a switch only when it differs from the default."""
    flags: list[str] = []
    for key, value in check_mapping(values, where).items():
        f = _FIELDS[key]
        if value is None:
            continue
        if f.metadata["cli"].get("action") in ("store_true", "store_false"):
            if value != f.default:
                flags.append(flag_of(key))
            continue
        if isinstance(value, list | tuple):
            value = ",".join(value)
        flags += [flag_of(key), str(value)]
    return flags


def protocol_flags(protocol: EvalProtocol) -> list[str]:
    """``rlsr evaluate`` flags that reproduce ``protocol``: each field that differs from its
    default (``scorers``: from the default for its response format)."""
    defaults = EvalProtocol().values()
    defaults["scorers"] = check_scorers(None, protocol.response_format)
    return to_flags({k: v for k, v in protocol.values().items() if v != defaults[k]})


def add_protocol_flags(
    parser: argparse._ActionsContainer, names: Sequence[str], *, unset: bool = False
) -> None:
    """Register the flags of the protocol fields ``names`` with their declared default, type and
    help. ``unset``: every flag defaults to None, so a caller can tell a flag left out
    (``rlsr serve``: left out = the certified value)."""
    for name in names:
        f = _FIELDS[name]
        kwargs = {"dest": name, "help": f.metadata["help"], **f.metadata["cli"]}
        if unset:
            kwargs["default"] = None
        elif kwargs.get("action") not in ("store_true", "store_false"):
            kwargs["default"] = f.default
        parser.add_argument(flag_of(name), **kwargs)


def protocol_from_args(args: argparse.Namespace, cls: type[EvalProtocol] = EvalProtocol, **extra):
    """``cls`` from parsed ``rlsr evaluate`` arguments; ``ValueError`` naming the flag."""
    try:
        return cls(**{name: getattr(args, name) for name in PROTOCOL_FIELDS}, **extra)
    except ProtocolError as err:
        raise ValueError(f"{flag_of(err.field)} {err.message}") from None


def protocol_keys(cls):
    """Class decorator (before ``@dataclass``): every protocol field becomes a setting of ``cls``
    whose None means "not set here" (``heldout.*``)."""
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    for name, f in _FIELDS.items():
        if name in annotations:
            raise TypeError(f"{cls.__name__}.{name} is a protocol field; do not declare it again.")
        annotations[name] = "Any"
        setattr(cls, name, field(default=None, metadata={"help": f.metadata["help"]}))
    cls.__annotations__ = annotations
    return cls


def evaluate_mapping_of(flags) -> str:
    """The ``method.evaluate`` mapping, as YAML flow text, that replaces an old
    ``method.evaluate_args`` flag list (``[--scorers, logprob]`` -> ``{scorers: [logprob]}``)."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_protocol_flags(parser, PROTOCOL_FIELDS)
    for action in parser._actions:  # only what the flags set
        action.default = argparse.SUPPRESS
    try:
        values, unknown = parser.parse_known_args([str(a) for a in flags])
    except (argparse.ArgumentError, TypeError):
        return "method.evaluate={...} (its keys: " + ", ".join(PROTOCOL_FIELDS) + ")"
    parts = []
    for name, value in vars(values).items():
        if isinstance(value, tuple):
            value = "[" + ", ".join(value) + "]"
        elif isinstance(value, bool):
            value = str(value).lower()
        parts.append(f"{name}: {value}")
    text = "method.evaluate={" + ", ".join(parts) + "}"
    return text + (f" (not evaluation settings: {unknown})" if unknown else "")
