"""`rlsr evaluate`'s generation budget against the model's context (rlsr.evaluation.run.budget):
one rule and one fix on every backend and dataset kind, decided before any weights load.

The arithmetic is checked against brute force on small numbers; the CLI cases run the real CLI
on the shipped tiny models (2,048 positions) and the bundled `tiny` dataset with the model
loader replaced by a failure, so a case that gets past the check fails loudly instead of loading
weights. The endpoint cases run against tests/endpoint_standin.py (an OpenAI-compatible test
double) serving the shipped alias `tiny-warm` by that name.
"""

from __future__ import annotations

import json
import re

import pytest
from endpoint_standin import StandIn

from examples.toy.tokenizer import build_toy_tokenizer
from rlsr.cli import evaluate_cli, main
from rlsr.config import resolve_model_path
from rlsr.core.tokenization import load_tokenizer, model_context_length
from rlsr.data.loading import load_examples
from rlsr.evaluation.run import budget as budget_module
from rlsr.evaluation.run.budget import (
    GenerationBudget,
    ModelContext,
    budget_fix,
    budget_refusal,
    evaluation_context,
    token_bound,
)
from rlsr.generation.backends import encode_prompts, render_chat

pytestmark = pytest.mark.timeout(300)

FIX = re.compile(r"pass --max-new-tokens <= (\d+)")


class ModelLoaded(Exception):
    """Raised by the stand-in model loader: the run got past every check."""


@pytest.fixture
def no_weights(monkeypatch):
    def refuse(*args, **kwargs):
        raise ModelLoaded

    monkeypatch.setattr(evaluate_cli, "make_backend", refuse)


def _error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("rlsr: error: "), lines
    return lines[-1]


# --- the arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize("raise_flag", [None, "--max-model-len"])
def test_the_suggested_budget_is_the_largest_that_fits_and_the_context_only_where_it_can(
    raise_flag,
):
    """For every small context, prompt, budget and reserve: a refusal happens exactly when the
    total exceeds the context; its `--max-new-tokens <= M` is the largest budget that passes
    (M + 1 is refused again); a longer context is suggested only when a raise flag exists and the
    model's positions hold what the request needs, and that length then passes. Catches an
    off-by-one in M, a fix that does not fit, and `raise --max-model-len` past the positions."""
    positions = 24
    for tokens in (8, 12, 24):
        context = ModelContext(tokens, "ctx", "src", positions, raise_flag)
        for longest in range(0, 14):
            for budget in range(1, 30, 3):
                for reserve in (0, 1, 5):
                    message = budget_refusal(context, longest, budget, reserve)
                    assert (message is None) == (longest + budget + reserve <= tokens)
                    if message is None:
                        continue
                    assert f"= {longest + budget + reserve} tokens, more than ctx (src)" in message
                    found = FIX.search(message)
                    longer_ok = raise_flag is not None and tokens < positions
                    need = longest + budget + reserve
                    if tokens - longest - reserve >= 1:  # a lower budget in this context
                        m = int(found.group(1))
                        assert budget_refusal(context, longest, m, reserve) is None
                        assert budget_refusal(context, longest, m + 1, reserve) is not None
                    elif longer_ok and need > positions > longest + reserve:  # both at once
                        both = f"raise --max-model-len to {positions} (the model's positions) and"
                        assert both in message
                        whole = ModelContext(positions, "ctx", "src", positions, raise_flag)
                        m = int(found.group(1))
                        assert budget_refusal(whole, longest, m, reserve) is None
                        assert budget_refusal(whole, longest, m + 1, reserve) is not None
                    else:
                        assert found is None
                    can_raise = longer_ok and need <= positions
                    assert (f"raise --max-model-len to >= {need}" in message) == can_raise
                    if can_raise:
                        longer = ModelContext(need, "ctx", "src", positions, raise_flag)
                        assert budget_refusal(longer, longest, budget, reserve) is None


def test_a_prompt_that_fills_the_context_alone_asks_for_a_longer_context():
    """No budget fits a prompt as long as the context: the fix says so instead of a
    `--max-new-tokens <= 0`."""
    fix = budget_fix(ModelContext(100, "ctx", "src", 100), longest=100, budget=10, reserve=0)
    assert fix == "use a model with a longer context (the prompt alone fills this one)"


def test_without_a_tokenizer_only_a_budget_with_no_room_left_is_refused():
    """An endpoint whose prompts cannot be counted here: a budget that leaves no room for any
    prompt is still refused, a smaller one is left to the server."""
    context = ModelContext(2048, "the server's context of 2048 tokens", "src")
    assert budget_refusal(context, None, 1000, 1) is None
    message = budget_refusal(context, None, 4096, 1, "tiny")
    assert message.startswith("tiny: --max-new-tokens 4096 + 1 for a log-prob position leaves no")


def test_the_byte_bound_holds_and_spares_the_tokenizer_where_it_suffices(monkeypatch):
    """`token_bound` (UTF-8 bytes + 1) is at least the real token count for the shipped tiny
    tokenizer (BPE) and the toy's (word-level) on the bundled dataset's prompts and on text of
    multi-byte characters; a dataset that fits by the bound is not tokenised, one that does not
    is counted exactly. Catches a bound below the truth (a real overflow let through)."""
    tiny = load_tokenizer(resolve_model_path("tiny-warm"))
    prompts = list(load_examples("tiny", limit=50)["prompt"])
    odd = [[{"role": "user", "content": "Zürich, 東京, ﬁve, 🙂 ㍻ " * 20}]]
    for tokenizer in (tiny, build_toy_tokenizer()):
        texts = [render_chat(tokenizer, m) for m in prompts + odd]
        for text, ids in zip(texts, encode_prompts(tokenizer, texts), strict=True):
            assert len(ids) <= token_bound(text)
    roomy = GenerationBudget(ModelContext(100_000, "c", "s"), 100, 1, tiny)
    monkeypatch.setattr(budget_module, "encode_prompts", lambda *a: pytest.fail("tokenised"))
    roomy.check({"tiny": prompts})
    monkeypatch.undo()
    tight = GenerationBudget(ModelContext(300, "c", "s"), 100, 1, tiny)
    longest = max(len(ids) for ids in encode_prompts(tiny, [render_chat(tiny, m) for m in prompts]))
    assert tight.longest({"tiny": prompts}) == (longest, "tiny")


def test_each_backend_reads_its_context_from_its_source():
    """transformers: the model's positions; vLLM: --max-model-len when given (raisable up to the
    positions), else the positions; an endpoint: the server's max_model_len, else the model's
    positions; nothing known: no check."""
    positions = (2048, "max_position_embeddings in M/config.json")
    hf = evaluation_context("transformers", "tiny-warm", positions, max_model_len=512)
    assert (hf.tokens, hf.raise_flag) == (2048, None)
    assert hf.describe() == (
        "tiny-warm's context of 2048 positions (max_position_embeddings in M/config.json)"
    )
    assert evaluation_context("vllm", "m", positions) == hf.__class__(
        2048, "m's context of 2048 positions", positions[1], 2048
    )
    engine = evaluation_context("vllm", "m", positions, max_model_len=512)
    assert (engine.tokens, engine.source, engine.raise_flag) == (512, "--max-model-len",
                                                                 "--max-model-len")  # fmt: skip
    served = evaluation_context("openai-chat", "m", positions, served_max_model_len=4096)
    assert (served.tokens, served.positions) == (4096, 2048)
    assert evaluation_context("openai-completions", "m", positions).tokens == 2048
    assert evaluation_context("openai-completions", "gpt-x", None) is None


def test_a_rope_stretched_model_has_no_known_context(tmp_path):
    """Linear/dynamic RoPE scaling stretches the positions past max_position_embeddings (vLLM
    multiplies by the factor), so the config's number is not the context and nothing is
    refused on it; YaRN and llama3 configs already name the stretched length."""
    config = {"max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert model_context_length(tmp_path) == (4096, f"max_position_embeddings in "
                                                    f"{tmp_path / 'config.json'}")  # fmt: skip
    for rope, known in (({"rope_type": "linear", "factor": 4.0}, False),
                        ({"type": "dynamic", "factor": 2.0}, False),
                        ({"rope_type": "yarn", "factor": 4.0}, True),
                        ({"rope_type": "default", "rope_theta": 1e4}, True)):  # fmt: skip
        (tmp_path / "config.json").write_text(json.dumps({**config, "rope_scaling": rope}))
        assert (model_context_length(tmp_path) is not None) == known, rope


# --- the CLI, every backend -------------------------------------------------------------------

TINY = ["evaluate", "--model", "tiny-warm", "--tasks", "tiny", "--no-progress"]


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_the_default_budget_is_refused_with_the_budget_that_works(
    backend, no_weights, tmp_path, capsys
):
    """The paper's 4,096 new tokens on a 2,048-position model, built-in dataset: refused before
    weights on both local backends with the largest --max-new-tokens that fits, never `raise
    --max-model-len` (impossible past the model's positions); that budget then passes the check
    (the stand-in loader is reached) and one more token does not."""
    out = tmp_path / "ev"
    argv = [*TINY, "--backend", backend, "--output-dir", str(out)]
    assert main(argv) == 2
    line = _error(capsys)
    assert line.startswith("rlsr: error: tiny: --max-new-tokens 4096 + the longest prompt (")
    assert "more than tiny-warm's context of 2048 positions (max_position_embeddings in" in line
    assert "max-model-len" not in line and not out.exists()
    fits = int(FIX.search(line).group(1))
    assert main([*argv, "--max-new-tokens", str(fits + 1)]) == 2
    assert f"pass --max-new-tokens <= {fits}." in _error(capsys)
    with pytest.raises(ModelLoaded):
        main([*argv, "--max-new-tokens", str(fits)])


def test_vllm_suggests_a_longer_max_model_len_only_up_to_the_positions(
    no_weights, tmp_path, capsys
):
    """--max-model-len below the model's positions: both fixes, each of which passes; a
    budget past the positions: the lower budget alone."""
    argv = [*TINY, "--backend", "vllm", "--max-model-len", "512", "--output-dir", str(tmp_path)]
    assert main([*argv, "--max-new-tokens", "600"]) == 2
    line = _error(capsys)
    need = int(re.search(r"= (\d+) tokens, more than the vLLM engine's context of 512", line)[1])
    assert f"or raise --max-model-len to >= {need} (the model has 2048 positions)." in line
    fits = int(FIX.search(line).group(1))
    for fix in (["--max-new-tokens", str(fits)], ["--max-new-tokens", "600", "--max-model-len",
                                                  str(need)]):  # fmt: skip
        with pytest.raises(ModelLoaded):
            main([*argv, *fix])
    assert main([*argv, "--max-new-tokens", "4096"]) == 2
    assert "max-model-len to" not in _error(capsys)


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat"])
@pytest.mark.parametrize("server", ["vllm", "openai"])
def test_an_endpoint_serving_a_shipped_alias_is_checked_the_same_way(
    api, server, no_weights, tmp_path, capsys
):
    """`--model tiny-warm` against an endpoint that serves it by that name: the local tokenizer
    comes from the alias's folder (no `--tokenizer`), the budget is refused against the
    server's max_model_len (a vLLM server says it: the stand-in says 4096) or, where the server
    does not say, the model's own positions; the same longest prompt as the local backends."""
    tokenizer = load_tokenizer(resolve_model_path("tiny-warm"))
    with StandIn(tokenizer, kind=server, model="tiny-warm") as endpoint:
        argv = [*TINY, "--backend", api, "--base-url", endpoint.url, "--output-dir",
                str(tmp_path / "ev")]  # fmt: skip
        assert main(argv) == 2
        assert endpoint.statuses == {}  # refused before any generation request
    line = _error(capsys)
    context = ("the server's context of 4096 tokens (its max_model_len, GET /v1/models)"
               if server == "vllm" else "tiny-warm's context of 2048 positions")  # fmt: skip
    assert f"more than {context}" in line and FIX.search(line), line
    longest = int(re.search(r"the longest prompt \((\d+) tokens\)", line)[1])
    assert main([*TINY, "--output-dir", str(tmp_path / "local")]) == 2
    assert f"the longest prompt ({longest} tokens)" in _error(capsys)


def test_completions_with_a_shipped_alias_sends_the_served_name(tmp_path):
    """The alias resolves for the tokenizer only: every request names the model as the user
    typed it (the server knows it by that name), and the run completes."""
    tokenizer = load_tokenizer(resolve_model_path("tiny-warm"))
    with StandIn(tokenizer, model="tiny-warm") as endpoint:
        argv = [*TINY, "--backend", "openai-completions", "--base-url", endpoint.url,
                "--output-dir", str(tmp_path / "ev"), "--limit", "2", "--max-new-tokens", "8",
                "--fallback-max-new-tokens", "4", "--bootstrap", "0"]  # fmt: skip
        assert main(argv) == 0
    assert endpoint.bodies and {b["model"] for b in endpoint.bodies} == {"tiny-warm"}
