"""SFT-Answer-Only (RLSR paper Sec. D.3, Tab. 6): TRL's ``SFTTrainer`` on (question, answer) pairs.

The paper fine-tunes the base model "on (question, answer) pairs from HotPotQA without
chain-of-thought or confidence output because there is no groundtruth chain-of-thought and
confidence", then ranks its answers post hoc by self-consistency (K = 8, T = 0.7).

``sft_examples`` turns contract rows into TRL's conversational prompt-completion format: the
prompt as loaded (``recipes/method/sft.yaml`` sets ``data.system_prompt=none``: no tag
instructions) and the gold ``answer`` as the assistant turn. TRL computes the loss on the
completion tokens only, end-of-turn token included, so the model learns to answer and stop.
"""

from __future__ import annotations

from trl import SFTTrainer

from rlsr.method.run_checkpoints import RunCheckpoints

__all__ = ["SFTAnswerTrainer", "sft_examples"]


class SFTAnswerTrainer(RunCheckpoints, SFTTrainer):
    """TRL's SFTTrainer with rlsr's output layout (``RunCheckpoints``)."""


def sft_examples(dataset):
    """The training set for SFT: per row ``{"prompt": messages, "completion": [assistant: gold
    answer]}``, other columns dropped."""
    return dataset.map(
        lambda row: {
            "prompt": list(row["prompt"]),
            "completion": [{"role": "assistant", "content": str(row["answer"])}],
        },
        remove_columns=dataset.column_names,
    )
