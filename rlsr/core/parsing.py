"""Parse a policy completion into answer, confidence and a format verdict (never raises on a str).

The RLSR / RLCR response format (RLSR paper, Aligning Language Models with Selective Prediction,
arXiv 2607.03528, Sec. C.1):

    <think> … </think><answer> … </answer><analysis> … </analysis><confidence> 0.85 </confidence>

The rules are docs/parsing_verifiers.md's: **format_ok** iff every tag of the ``FormatSpec``
occurs once opening and once closing, in order, with only whitespace outside the blocks, a
non-empty answer and a confidence that parses. **Extraction** does not need format_ok: the
content of the LAST complete block, stripped (a closing tag closes the most recent open one; a
closer with nothing open is ignored). Everything is linear-time: one scan with a regex that is a
literal alternation of the tag names, and the confidence regex runs on at most
``MAX_CONFIDENCE_CHARS`` characters.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FormatSpec",
    "FULL_FORMAT",
    "ANSWER_CONFIDENCE_FORMAT",
    "OPTIONAL_CONFIDENCE_FORMAT",
    "parse_plain_response",
    "ParsedResponse",
    "MAX_CONFIDENCE_CHARS",
    "parse_response",
    "parse_confidence",
    "completion_text",
]

MAX_CONFIDENCE_CHARS = 64
"""A stripped confidence text longer than this is rejected (keeps float() off megabyte strings)."""

_TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")
# ASCII digits only (re.ASCII): '٠.٥' (Arabic-Indic) and other unicode digits are rejected.
# No sign, no exponent, no thousands separator; '85%' and '85 %' are accepted.
_CONFIDENCE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)[ \t]*(%?)\Z", re.ASCII)
_WHITESPACE = " \t\n\r\f\v"


@dataclass(frozen=True)
class FormatSpec:
    """Which tags a completion must contain, in order. ``optional_tags`` may be left out (when
    present they sit in their place of the order). ``prefix_opened_think``: the chat template
    already emitted ``<think>``, so a completion without one is read as if it began with it."""

    tags: tuple[str, ...]
    answer_tag: str = "answer"
    confidence_tag: str | None = "confidence"
    prefix_opened_think: bool = False
    optional_tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        tags = tuple(self.tags)
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "optional_tags", tuple(self.optional_tags))
        if not tags:
            raise ValueError("FormatSpec.tags must name at least one tag, e.g. ('answer',).")
        for tag in tags:
            if not isinstance(tag, str) or not _TAG_NAME.match(tag):
                raise ValueError(
                    f"FormatSpec.tags: {tag!r} is not a tag name; use letters, digits, '_' or '-'."
                )
        if len(set(tags)) != len(tags):
            raise ValueError(f"FormatSpec.tags must be distinct; got {tags}.")
        if self.answer_tag not in tags:
            raise ValueError(f"FormatSpec.answer_tag {self.answer_tag!r} is not in tags {tags}.")
        if self.confidence_tag is not None and self.confidence_tag not in tags:
            raise ValueError(
                f"FormatSpec.confidence_tag {self.confidence_tag!r} is not in tags {tags}; "
                "pass confidence_tag=None for a format without confidence."
            )
        for tag in self.optional_tags:
            if tag not in tags or tag == self.answer_tag:
                raise ValueError(
                    f"FormatSpec.optional_tags: {tag!r} must be one of {tags} other than the "
                    f"answer tag {self.answer_tag!r}."
                )
        if self.prefix_opened_think and tags[0] != "think":
            raise ValueError(
                "FormatSpec.prefix_opened_think=True needs 'think' as the first tag; "
                f"got tags {tags}."
            )


FULL_FORMAT = FormatSpec(("think", "answer", "analysis", "confidence"))
"""The paper's four-tag format (Sec. C.1)."""

ANSWER_CONFIDENCE_FORMAT = FormatSpec(("answer", "confidence"))
"""Answer and confidence only (no think / analysis)."""

OPTIONAL_CONFIDENCE_FORMAT = FormatSpec(
    ("think", "answer", "analysis", "confidence"),
    confidence_tag=None,
    optional_tags=("confidence",),
)
"""The four-tag format with the confidence block optional and not read: the format reward of
RLSR with the log-probability selector (``method.confidence=logprob``, paper Sec. D.4), whose
ranking does not use a verbalized confidence. The system prompt still asks for one."""


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """Result of ``parse_response``: ``answer`` / ``confidence`` (in [0, 1]) / ``confidence_text``
    of the last complete blocks (None when missing or empty), ``tags_found`` in spec order, and
    ``answer_start``, where ``answer`` begins in the text (the log-prob selector scores the
    tokens there, not a repetition in the analysis)."""

    answer: str | None
    confidence: float | None
    format_ok: bool
    tags_found: tuple[str, ...]
    confidence_text: str | None
    answer_start: int | None = field(default=None, compare=False)


def parse_confidence(text: str | None) -> float | None:
    """A verbalised confidence in [0, 1]: an ASCII decimal (``0.85``, ``.85``), a percentage
    (``85%``, or a plain number in (1, 100], RLCR's convention); None for anything else (signs,
    exponents, words, several numbers, > 100)."""
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if not stripped or len(stripped) > MAX_CONFIDENCE_CHARS:
        return None
    match = _CONFIDENCE.match(stripped)
    if match is None:
        return None
    value = float(match.group(1))
    if not math.isfinite(value):
        return None
    if match.group(2) == "%" or value > 1.0:
        if value > 100.0:
            return None
        value /= 100.0
    return value


@functools.cache
def _tag_pattern(tags: tuple[str, ...]) -> re.Pattern:
    """Regex for the spec's opening/closing tags: literal alternation, no backtracking."""
    return re.compile("<(/?)(" + "|".join(map(re.escape, tags)) + ")>")


def _scan(text: str, tags: tuple[str, ...]):
    """One pass over the spec's tags: (blocks, layout), the (content_start, content_end) of each
    tag's last complete block, and the first 2 * len(tags) + 1 tag tokens (start, end, closing,
    name)."""
    last_open: dict[str, int] = {}
    blocks: dict[str, tuple[int, int]] = {}
    layout: list[tuple[int, int, bool, str]] = []
    limit = 2 * len(tags) + 1
    for match in _tag_pattern(tags).finditer(text):
        closing, name = bool(match.group(1)), match.group(2)
        if len(layout) < limit:
            layout.append((match.start(), match.end(), closing, name))
        if closing:
            # pop: once closed, an opening tag cannot pair with a later stray closer.
            opened = last_open.pop(name, None)
            if opened is not None:
                blocks[name] = (opened, match.start())
        else:
            last_open[name] = match.end()
    return blocks, layout


def _layout_ok(
    text: str, tags: tuple[str, ...], layout: list, optional: tuple[str, ...] = ()
) -> bool:
    """Tokens are exactly <t1></t1><t2></t2>…, with only whitespace outside the tags; an optional
    tag that does not occur at all is left out of the expected sequence."""
    if optional:
        present = {name for _, _, _, name in layout}
        tags = tuple(t for t in tags if t not in optional or t in present)
    if len(layout) != 2 * len(tags):
        return False
    cursor = 0
    for position, (start, end, closing, name) in enumerate(layout):
        if name != tags[position // 2] or closing != bool(position % 2):
            return False
        if not closing and text[cursor:start].strip(_WHITESPACE):
            return False
        cursor = end
    return not text[cursor:].strip(_WHITESPACE)


def parse_response(text: str, spec: FormatSpec = FULL_FORMAT) -> ParsedResponse:
    """Parse one completion under ``spec`` (RLSR Sec. C.1 format, Sec. C.3 parser); TypeError
    only when ``text`` is not a str."""
    if not isinstance(text, str):
        raise TypeError(
            f"parse_response expects the completion text as str; got {type(text).__name__}. "
            "For TRL conversational completions pass completion[-1]['content']."
        )
    shift = 0
    if spec.prefix_opened_think and "<think>" not in text:
        text = "<think>" + text
        shift = len("<think>")

    blocks, layout = _scan(text, spec.tags)
    tags_found = tuple(tag for tag in spec.tags if tag in blocks)
    answer = answer_start = None
    if spec.answer_tag in blocks:
        start, end = blocks[spec.answer_tag]
        content = text[start:end]
        answer = content.strip() or None
        if answer is not None:
            answer_start = start + (len(content) - len(content.lstrip())) - shift
    confidence_text = confidence = None
    if spec.confidence_tag is not None and spec.confidence_tag in blocks:
        confidence_text = text[slice(*blocks[spec.confidence_tag])].strip()
        confidence = parse_confidence(confidence_text)

    format_ok = (
        answer is not None
        and (spec.confidence_tag is None or confidence is not None)
        and _layout_ok(text, spec.tags, layout, spec.optional_tags)
    )
    return ParsedResponse(
        answer=answer,
        confidence=confidence,
        format_ok=format_ok,
        tags_found=tags_found,
        confidence_text=confidence_text,
        answer_start=answer_start,
    )


def parse_plain_response(text: str) -> ParsedResponse:
    """Read a response without tags (SFT-Answer-Only, paper Sec. D.3): the answer is the first
    non-empty line (SFT targets are single-line answers; a model that continues past its
    end-of-turn is ignored after it). No confidence; ``format_ok``: an answer was found."""
    if not isinstance(text, str):
        raise TypeError(f"parse_plain_response expects str; got {type(text).__name__}.")
    answer = start = None
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped:
            answer, start = stripped, offset + (len(line) - len(line.lstrip()))
            break
        offset += len(line)
    return ParsedResponse(
        answer=answer,
        confidence=None,
        format_ok=answer is not None,
        tags_found=(),
        confidence_text=None,
        answer_start=start,
    )


def completion_text(completion: Any) -> str:
    """Text of a completion: a plain string, or the assistant message(s) of a conversational one."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts: list[str] = []
    for message in completion:
        if message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content", "")
        if isinstance(content, list):  # content blocks
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        parts.append(content or "")
    return "".join(parts)
