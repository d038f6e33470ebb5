"""Tests for rlsr.core.parsing: format rule, confidence grammar, last-block rule, robustness on
pathological megabyte inputs (their parse time: benchmarks/bench_parsing.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsr.core.parsing import (
    ANSWER_CONFIDENCE_FORMAT,
    FULL_FORMAT,
    FormatSpec,
    ParsedResponse,
    parse_confidence,
    parse_response,
)


def _last_block(text: str, tag: str) -> str | None:
    """Content (unstripped) of the last complete ``<tag>…</tag>`` block, or None: the last
    opening tag with a closing tag before the next opening (each character searched at most
    twice)."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    end = len(text)
    while True:
        start = text.rfind(opening, 0, end)
        if start < 0:
            return None
        close = text.find(closing, start + len(opening), end)
        if close >= 0:
            return text[start + len(opening) : close]
        end = start


def extract_tag(text: str, tag: str) -> str | None:
    """The test's oracle for the last-block rule, by str.rfind (parse_response scans once with a
    regex): stripped content of the last complete ``<tag>…</tag>`` block; None if absent or
    empty."""
    if not isinstance(text, str):
        return None
    content = _last_block(text, tag)
    if content is None:
        return None
    content = content.strip()
    return content or None


GOOD = (
    "<think>Paris is the capital.</think><answer>Paris</answer>"
    "<analysis>Could be Lyon, unlikely.</analysis><confidence>0.85</confidence>"
)


# --- confidence grammar ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.85", 0.85),
        (".85", 0.85),
        ("1", 1.0),
        ("0", 0.0),
        ("1.0", 1.0),
        ("0.0", 0.0),
        ("85%", 0.85),
        ("85 %", 0.85),
        ("0.5%", 0.005),
        ("100%", 1.0),
        ("85", 0.85),  # (1, 100] -> percentage (RLCR evaluation convention)
        ("100", 1.0),
        ("1.5", 0.015),
        ("  0.3\n", 0.3),
        ("1.", 1.0),
    ],
)
def test_parse_confidence_accepts(text, expected):
    assert parse_confidence(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "-0.1",
        "+0.5",
        "100.01",
        "101%",
        "150",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e-1",
        "high",
        "0.8 or 0.9",
        "0.5 0.6",
        "0.5/1",
        "0,85",
        "٠.٥",  # Arabic-Indic digits: ASCII only
        "０.５",  # fullwidth digits
        "²",
        "0." + "9" * 100,  # longer than MAX_CONFIDENCE_CHARS
        "%",
        ".",
        "85%%",
        None,
    ],
)
def test_parse_confidence_rejects(text):
    assert parse_confidence(text) is None


@given(st.floats(min_value=0.0, max_value=1.0))
@settings(max_examples=200, deadline=None)
def test_parse_confidence_roundtrips_probabilities(value):
    text = f"{value:.6f}"
    assert parse_confidence(text) == pytest.approx(float(text))


@given(st.text(max_size=80))
@settings(max_examples=300, deadline=None)
def test_parse_confidence_total_and_in_range(text):
    value = parse_confidence(text)
    assert value is None or (0.0 <= value <= 1.0 and math.isfinite(value))


# --- format rule -----------------------------------------------------------------------------------


def test_well_formed_full_format():
    parsed = parse_response(GOOD)
    assert parsed == ParsedResponse(
        answer="Paris",
        confidence=0.85,
        format_ok=True,
        tags_found=("think", "answer", "analysis", "confidence"),
        confidence_text="0.85",
    )


def test_whitespace_around_and_between_tags_is_allowed():
    text = "\n  <think>x</think>\n\n<answer> Paris </answer> \t<analysis>a</analysis>\n<confidence> 85% </confidence>\n "
    parsed = parse_response(text)
    assert parsed.format_ok
    assert parsed.answer == "Paris"
    assert parsed.confidence == pytest.approx(0.85)


@pytest.mark.parametrize(
    "text",
    [
        "Sure! " + GOOD,  # text before the first tag
        GOOD + " Hope this helps.",  # text after the last tag
        GOOD.replace("</think><answer>", "</think> so <answer>"),  # text between tags
        GOOD.replace("<think>Paris is the capital.</think>", ""),  # missing tag
        GOOD.replace("<answer>Paris</answer>", "<answer>  </answer>"),  # empty answer
        GOOD.replace("0.85", "very sure"),  # unparseable confidence
        GOOD.replace("0.85", ""),  # empty confidence
        # wrong order: analysis before answer
        "<think>t</think><analysis>a</analysis><answer>Paris</answer><confidence>0.8</confidence>",
        GOOD + "<answer>Lyon</answer>",  # a repeated tag
        GOOD.replace("</confidence>", ""),  # unclosed last tag
        GOOD.replace("<think>Paris", "<think><answer>Paris"),  # extra opening inside think
        "<THINK>t</THINK><answer>P</answer><analysis>a</analysis><confidence>0.8</confidence>",
    ],
)
def test_malformed_layouts_fail_format(text):
    assert not parse_response(text).format_ok


def test_answer_confidence_format():
    parsed = parse_response(
        " <answer>42</answer>\n<confidence>1</confidence> ", ANSWER_CONFIDENCE_FORMAT
    )
    assert parsed.format_ok and parsed.answer == "42" and parsed.confidence == 1.0
    assert parsed.tags_found == ("answer", "confidence")
    # The full format rejects a completion without think/analysis but still extracts.
    full = parse_response("<answer>42</answer><confidence>1</confidence>")
    assert not full.format_ok and full.answer == "42" and full.confidence == 1.0
    assert full.tags_found == ("answer", "confidence")


def test_prefix_opened_think():
    spec = FormatSpec(FULL_FORMAT.tags, prefix_opened_think=True)
    body = "reasoning</think><answer>P</answer><analysis>a</analysis><confidence>0.4</confidence>"
    assert not parse_response(body).format_ok  # without the option: '</think>' has no opening
    parsed = parse_response(body, spec)
    assert parsed.format_ok and parsed.tags_found[0] == "think" and parsed.confidence == 0.4
    # A completion that does repeat <think> is also accepted under the option.
    assert parse_response(GOOD, spec).format_ok
    # Text before the virtual <think> is think content; text before a real <think> is not.
    assert not parse_response("junk" + GOOD, spec).format_ok


def test_format_spec_validation():
    with pytest.raises(ValueError, match="tags"):
        FormatSpec(())
    with pytest.raises(ValueError, match="distinct"):
        FormatSpec(("answer", "answer"))
    with pytest.raises(ValueError, match="answer_tag"):
        FormatSpec(("think",), confidence_tag=None)
    with pytest.raises(ValueError, match="confidence_tag"):
        FormatSpec(("answer",))
    with pytest.raises(ValueError, match="prefix_opened_think"):
        FormatSpec(("answer", "confidence"), prefix_opened_think=True)
    with pytest.raises(ValueError, match="tag name"):
        FormatSpec(("ans wer", "answer", "confidence"))
    answer_only = FormatSpec(("answer",), confidence_tag=None)
    parsed = parse_response("<answer>x</answer>", answer_only)
    assert parsed.format_ok and parsed.confidence is None and parsed.confidence_text is None


def test_non_str_is_a_type_error():
    with pytest.raises(TypeError, match="content"):
        parse_response([{"role": "assistant", "content": GOOD}])  # type: ignore[arg-type]


# --- several blocks: the last complete block wins --------------------------------------------------


def test_last_complete_block_wins():
    text = (
        "<answer>Lyon</answer><confidence>0.2</confidence>"
        "<answer>Paris</answer><confidence>0.9</confidence>"
    )
    parsed = parse_response(text, ANSWER_CONFIDENCE_FORMAT)
    assert parsed.answer == "Paris" and parsed.confidence == 0.9
    assert not parsed.format_ok  # repeated tags are a format violation


def test_unclosed_final_block_is_ignored():
    text = "<answer>Lyon</answer><answer>Paris <confidence>0.3</confidence><confidence>0.7"
    parsed = parse_response(text, ANSWER_CONFIDENCE_FORMAT)
    assert parsed.answer == "Lyon"  # "<answer>Paris …" never closes
    assert parsed.confidence == 0.3


def test_nested_opening_uses_innermost():
    assert extract_tag("<answer>a<answer>b</answer>", "answer") == "b"
    assert extract_tag("<answer></answer>", "answer") is None
    assert extract_tag("</answer><answer>", "answer") is None
    assert extract_tag("no tags", "answer") is None


def test_confidence_inside_answer_is_extracted_but_format_fails():
    text = "<think>t</think><answer>P<confidence>0.5</confidence></answer><analysis>a</analysis>"
    parsed = parse_response(text)
    assert parsed.confidence == 0.5 and not parsed.format_ok


# --- robustness: never raises, consistent invariants -----------------------------------------------

_PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<analysis>",
        "</analysis>",
        "<confidence>",
        "</confidence>",
        "<",
        ">",
        "</",
        "0.5",
        "85%",
        "٠.٥",
        "1e400",
        "nan",
        " ",
        "\n",
        "Paris",
        "\x00",
        "\ud800",
        "🙂",
    ]
)
_ADVERSARIAL = st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=40).map("".join)


def _check_invariants(parsed: ParsedResponse, spec: FormatSpec) -> None:
    assert isinstance(parsed.format_ok, bool)
    assert parsed.confidence is None or 0.0 <= parsed.confidence <= 1.0
    assert parsed.answer is None or (parsed.answer and parsed.answer == parsed.answer.strip())
    assert set(parsed.tags_found) <= set(spec.tags)
    if parsed.format_ok:
        assert parsed.answer is not None and parsed.confidence is not None
        assert parsed.tags_found == spec.tags


@pytest.mark.parametrize("spec", [FULL_FORMAT, ANSWER_CONFIDENCE_FORMAT])
@given(text=st.one_of(st.text(max_size=200), _ADVERSARIAL))
@settings(max_examples=300, deadline=None)
def test_never_raises_on_random_and_adversarial_text(spec, text):
    _check_invariants(parse_response(text, spec), spec)


@given(
    think=st.text(max_size=20),
    answer=st.text(max_size=20),
    analysis=st.text(max_size=20),
    conf=st.floats(min_value=0, max_value=1),
    gaps=st.lists(st.sampled_from(["", " ", "\n", "\t \n"]), min_size=5, max_size=5),
)
@settings(max_examples=300, deadline=None)
def test_generated_well_formed_responses(think, answer, analysis, conf, gaps):
    tags = ("<", ">")
    contents = [think, answer, analysis]
    text = (
        f"{gaps[0]}<think>{think}</think>{gaps[1]}<answer>{answer}</answer>{gaps[2]}"
        f"<analysis>{analysis}</analysis>{gaps[3]}<confidence>{conf:.4f}</confidence>{gaps[4]}"
    )
    parsed = parse_response(text)
    has_tag_chars = any(t in c for c in contents for t in tags)
    if not has_tag_chars and answer.strip():
        assert parsed.format_ok
        assert parsed.answer == answer.strip()
        assert parsed.confidence == pytest.approx(round(conf, 4))
    _check_invariants(parsed, FULL_FORMAT)


# --- pathological megabyte inputs ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "<answer>" * 100_000,
        "</answer>" * 100_000,
        "<answer></answer>" * 60_000,
        "<confidence>" + "9" * 10**6,
        "<confidence>" + "9" * 10**6 + "</confidence>",
        "<confidence>0." + "1" * 10**6 + "</confidence>",
        "<think>" + " " * 10**6 + "</think>",
        "<" * 10**6,
        "<think></think>" + "<answer>x</answer>" + " " * 10**6 + "<analysis></analysis>",
        "٠" * 10**6,
    ],
    ids=lambda t: repr(t[:20]),
)
@pytest.mark.timeout(120)  # a hang guard: a backtracking parse runs for hours on these
def test_megabyte_pathological_inputs_are_parsed(text):
    """Megabyte inputs built to make a backtracking regex or a quadratic scan blow up (repeated
    open tags, a million digits, unicode digits) parse to a result that satisfies every
    invariant. How fast they parse is measured in benchmarks/bench_parsing.py (~10 ms each)."""
    for spec in (FULL_FORMAT, ANSWER_CONFIDENCE_FORMAT):
        _check_invariants(parse_response(text, spec), spec)


@given(text=_ADVERSARIAL)
@settings(max_examples=300, deadline=None)
def test_scan_agrees_with_rfind_extraction(text):
    # parse_response extracts in one regex pass; extract_tag uses str.rfind. Same rule, two codes.
    parsed = parse_response(text, FULL_FORMAT)
    assert parsed.answer == extract_tag(text, "answer")
    assert (parsed.confidence_text or None) == extract_tag(text, "confidence")
    assert parsed.confidence == parse_confidence(extract_tag(text, "confidence") or "")
    for tag in FULL_FORMAT.tags:
        first_open = text.find(f"<{tag}>")
        complete = first_open >= 0 and text.rfind(f"</{tag}>") >= first_open + len(tag) + 2
        assert (tag in parsed.tags_found) == complete


@pytest.mark.parametrize(
    ("text", "answer", "confidence"),
    [
        # A doubled or stray closer does not pair with the already-closed opening (which would
        # make the answer 'x</answer>' and the confidence '0.8</confidence>', unparseable).
        ("<answer>x</answer></answer><confidence>0.8</confidence>", "x", 0.8),
        ("<answer><answer>x</answer></answer><confidence>0.8</confidence>", "x", 0.8),
        ("<answer>x</answer>junk</answer><confidence>0.8</confidence></confidence>", "x", 0.8),
        ("<answer>a</answer><answer>b</answer></answer><confidence>.3</confidence>", "b", 0.3),
        ("<answer>a</answer><answer>b<confidence>0.1</confidence>", "a", 0.1),
    ],
)
def test_stray_closing_tags_never_leak_into_the_content(text, answer, confidence):
    parsed = parse_response(text, ANSWER_CONFIDENCE_FORMAT)
    assert (parsed.answer, parsed.confidence) == (answer, confidence)
    assert not parsed.format_ok
    assert extract_tag(text, "answer") == answer
