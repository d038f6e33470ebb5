"""Word-level tokenizer of the toy task: every digit, tag, confidence and name is one token.

Saved with ``save_pretrained`` and reloaded with ``load_toy_tokenizer`` as a
``PreTrainedTokenizerFast``. Do NOT reload it with ``AutoTokenizer.from_pretrained`` on a folder
that also holds the Qwen2 ``config.json``: transformers 5 then rebuilds a byte-level Qwen2
tokenizer and garbles the word-level vocabulary. ``tokenizer_config.json``
records ``"rlsr_load_as": "PreTrainedTokenizerFast"``, which ``rlsr.core.tokenization.load_tokenizer``
honours.

Text is split on whitespace and then into tags, ``0.0``..``1.0`` confidences, digits, names and
single punctuation marks; decoding fuses tokens without spaces, so a completion decodes to
``<think></think><answer>6</answer><analysis></analysis><confidence>0.7</confidence>``, the
tag format of ``rlsr.core.parsing.FULL_FORMAT``. The chat template renders the user message and an
assistant message followed by ``<eos>`` (system prompts are ignored: the toy model cannot read
English).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from examples.toy.task import DIGITS, NAMES
from rlsr.core.tokenization import TOKENIZER_MARKER_KEY

__all__ = [
    "TAGS",
    "CONFIDENCE_TOKENS",
    "build_toy_tokenizer",
    "load_toy_tokenizer",
    "TOY_CHAT_TEMPLATE",
]

SPECIALS = ("<pad>", "<unk>", "<eos>")
TAGS = tuple(
    f"<{slash}{tag}>"
    for tag in ("think", "answer", "analysis", "confidence")
    for slash in ("", "/")
)
CONFIDENCE_TOKENS = tuple(f"{k / 10:.1f}" for k in range(11))  # 0.0 .. 1.0
WORDS = ("facts", "q")
PUNCTUATION = (":", ";", "=")
# Order matters: tags, then confidences before single digits, then words/names, then any char.
_SPLIT = r"</?[a-z]+>|[01]\.\d|\d|[a-z]+|\S"

# Renders the user turn without the "PROBLEM:" wrapper that rlsr.data puts around every problem
# (rlsr.data.formatting.USER_PROMPT_TEMPLATE) and an assistant turn (SFT targets, method=sft) as
# its text plus <eos>; system turns are dropped and the generation prompt adds nothing.
TOY_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ message['content'] | replace('PROBLEM:', '') | trim }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] | trim }}{{ eos_token }}"
    "{% endif %}{% endfor %}"
)


def vocabulary() -> list[str]:
    """Token strings in id order (specials first, so ``<pad>`` = 0)."""
    return [*SPECIALS, *TAGS, *CONFIDENCE_TOKENS, *DIGITS, *WORDS, *PUNCTUATION, *NAMES]


def build_toy_tokenizer() -> PreTrainedTokenizerFast:
    """The toy word-level tokenizer as a ``PreTrainedTokenizerFast`` (no training needed)."""
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(vocabulary()))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
        ]
    )
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<eos>",
        bos_token=None,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = TOY_CHAT_TEMPLATE
    # Saved into tokenizer_config.json; rlsr.core.tokenization.load_tokenizer reads it (module doc).
    tok.init_kwargs[TOKENIZER_MARKER_KEY] = "PreTrainedTokenizerFast"
    return tok


def load_toy_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Reload a saved toy tokenizer explicitly as ``PreTrainedTokenizerFast`` (see module doc)."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise ValueError(
            f"{path} holds no tokenizer.json; build one with examples.toy.warmup (the toy model folder)."
        )
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    tok.padding_side = "left"
    if tok.chat_template is None:
        tok.chat_template = TOY_CHAT_TEMPLATE
    return tok
