"""``train.py``'s command line: plain ``key=value`` overrides made Hydra set-or-add, and one line
for a Hydra / OmegaConf composition error."""

from __future__ import annotations

import re
from collections.abc import Sequence

_PLAIN_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*(?:\.[A-Za-z_][\w\-]*)*)=")


def force_add_overrides(argv: Sequence[str], groups: Sequence[str]) -> list[str]:
    """Rewrite plain ``key=value`` overrides to Hydra's ``++key=value`` (set or add).

    Hydra rejects a key that the composed tree lacks with a multi-line struct error and no
    suggestion, so ``grpo.top_p=0.95`` (a real GRPOConfig field the recipes do not list) would fail
    and ``grpo.learnig_rate=1`` would not say ``learning_rate``. With ``++`` every key reaches
    ``from_dict``/``validate``, which accept GRPOConfig fields and reject typos with the closest
    known name. Left alone: config-group choices (a bare name in ``groups``, e.g. ``method=rlcr``),
    ``hydra.*``, prefixed overrides (``+``, ``++``, ``~``) and flags.
    """
    out: list[str] = []
    for arg in argv:
        match = _PLAIN_OVERRIDE.match(arg)
        key = match["key"] if match else None
        if key is None or key in groups or key.split(".")[0] == "hydra":
            out.append(arg)
        else:
            out.append("++" + arg)
    return out


def describe_hydra_error(err: BaseException) -> str:
    """One line for a Hydra/OmegaConf composition error (unknown recipe, bad override syntax)."""
    missing = getattr(err, "missing_cfg_file", None)
    if missing and "/" in str(missing):
        group, choice = str(missing).rsplit("/", 1)
        options = list(getattr(err, "options", None) or [])
        hint = f"; choose one of {', '.join(options)}" if options else ""
        example = f" (e.g. {group}={options[0]})" if options else ""
        return f"{group}: no config {choice!r} in recipes/{group}/{hint}{example}."
    override = getattr(err, "override", None)
    if override is not None and getattr(err, "message", None):  # OverrideParseException
        detail = " ".join(str(err.message).split())
        return (
            f"{str(override).lstrip('+')}: cannot parse this override ({detail}); "
            "quote values that hold brackets, commas or spaces, e.g. 'key=\"a,b\"'."
        )
    full_key = getattr(err, "full_key", None)
    if type(err).__name__ == "MissingMandatoryValue" and full_key:
        return f"{full_key}: required but not set; pass {full_key}=<value> on the command line."
    parts = [str(err)]
    if err.__cause__ is not None:
        parts.append(str(err.__cause__))
    text = " ".join(" ".join(parts).split())
    return f"{full_key}: {text}" if full_key and not text.startswith(str(full_key)) else text
