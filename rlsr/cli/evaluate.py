"""``rlsr evaluate``'s flags (what it does: ``rlsr.cli.evaluate_cli``; what the flags
resolve to: ``rlsr.cli.evaluate_setup``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlsr.evaluation.run.outputs import add_training_rows_flag
from rlsr.generation import ENDPOINT_BACKENDS
from rlsr.run.eval_protocol import add_protocol_flags
from rlsr.run.run_layout import (
    AUDIT_FILE,
    CHECKPOINT_PREFIX,
    DEPLOYMENT_FILE,
    METRICS_FILE,
    PLOT_FILE,
    RUN_FILE,
    SAMPLES_FILE,
)
from rlsr.verifiers.llm_judge import (
    JUDGE_MAX_ANSWER_CHARS,
    JUDGE_MAX_RETRIES,
    JUDGE_TIMEOUT_S,
)

__all__ = ["register", "add_task_data_flags", "name_value_pairs"]


def name_value_pairs(items: list[str], flag: str) -> dict[str, str]:
    """``{NAME: VALUE}`` of a repeatable ``NAME=VALUE`` flag (``--data-path``, ``--verifier``,
    ``--columns``); a malformed item is a one-line error naming ``flag``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE.")
        out[key] = value
    return out


def add_task_data_flags(parser) -> None:
    """Where the tasks' rows come from and which are read: ``rlsr evaluate``'s and ``rlsr lm-eval
    tasks``' ``--data-dir``, ``--data-path``, ``--columns``, ``--split``, ``--verifier``,
    ``--limit``."""
    parser.add_argument(
        "--data-dir", help="folder with <dataset>/ copies (else $RLSR_DATA_DIR, then hub)"
    )
    parser.add_argument(
        "--data-path",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="read the rows of task NAME from PATH (file or folder); repeatable",
    )
    parser.add_argument(
        "--columns",
        action="extend",
        nargs="+",
        default=[],
        metavar="FIELD=COLUMN",
        help="read contract FIELD (problem, answer, id, ...) from COLUMN of every dataset",
    )
    parser.add_argument(
        "--split", metavar="NAME", help="dataset split (default: each task's evaluation split)"
    )
    parser.add_argument(
        "--verifier",
        action="append",
        default=[],
        metavar="NAME=VERIFIER",
        help="override a task's verifier (e.g. trivia=exact_match); repeatable",
    )
    parser.add_argument("--limit", type=int, metavar="N", help="first N questions per task")


class _DefaultsShown(argparse.HelpFormatter):
    """Appends ``(default: X)`` to options whose default is a real value (not None/False/[])."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS) or "%(default)" in text:
            return text
        if action.option_strings and action.nargs != 0:
            text += " (default: %(default)s)"
        return text


def register(subparsers) -> argparse.ArgumentParser:
    ev = subparsers.add_parser(
        "evaluate",
        help="generate, verify and score a model (+ LoRA adapter) on tasks",
        usage="rlsr evaluate --model PATH [--adapter RUN] --tasks NAMES --output-dir DIR [options]"
        "\n       rlsr evaluate --from-samples FILE --tasks NAME --output-dir DIR [options]",
        description="Paper protocol by default (Sec. C.5): greedy, 4,096 new tokens, the training "
        f"system prompt, one response per question. Writes DIR/<dataset>/{SAMPLES_FILE}, "
        f"{METRICS_FILE}, {PLOT_FILE}; resumes an interrupted run.",
        epilog="example: rlsr evaluate --model Qwen/Qwen2.5-7B --adapter runs/hotpot-rlsr "
        "--tasks hotpot-ood --output-dir evals/rlsr-seed0 --backend vllm. "
        "Details: docs/evaluation.md.",
        formatter_class=_DefaultsShown,
    )
    ev.add_argument(
        "--model",
        metavar="PATH",
        help="base model folder or hub id (`tiny-missing-warm`: the model of "
        "recipe=tiny); required unless --from-samples",
    )
    ev.add_argument(
        "--from-samples",
        metavar="FILE",
        help="score these responses instead of generating: lm-eval --log_samples "
        "output or a JSONL of question, response, gold[, id] (one task; "
        "docs/evaluation.md)",
    )
    ev.add_argument(
        "--adapter",
        metavar="RUN",
        help=f"LoRA adapter folder, {CHECKPOINT_PREFIX}N, or training output dir",
    )
    ev.add_argument(
        "--tasks",
        required=True,
        metavar="NAMES",
        help="comma list of task names or a group (hotpot-id ...); `rlsr tasks` lists them",
    )
    ev.add_argument(
        "--output-dir",
        required=True,
        metavar="DIR",
        help="results; rerun the same command to resume (another configuration is refused)",
    )
    ev.add_argument(
        "--overwrite",
        action="store_true",
        help="start over: move DIR's old results aside to DIR.old-<time> when the run starts",
    )
    ev.add_argument(
        "--backend",
        choices=("transformers", "vllm", *ENDPOINT_BACKENDS),
        default="transformers",
        help="openai-completions / openai-chat: a model behind an OpenAI-compatible "
        "endpoint (--base-url; --model is then the served model id)",
    )
    add_task_data_flags(ev)
    add_protocol_flags(
        ev,
        [
            "system_prompt",
            "response_format",
            "batch_size",
            "max_new_tokens",
            "temperature",
            "top_p",
            "seed",
            "fallback_max_new_tokens",
            "fallbacks",
            "scorers",
            "consistency_k",
            "consistency_temperature",
            "dcs",
            "bootstrap",
        ],
    )
    ev.add_argument(
        "--protocol-variant",
        metavar="NAME",
        help="the recipe's named protocol variant these flags come from "
        f"(heldout.variants: paper, toy), recorded in {RUN_FILE}; a label, it "
        "changes no setting",
    )
    ev.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")
    ev.add_argument(
        "--trust-remote-code", action="store_true", help="run the model repo's own code (off)"
    )
    ev.add_argument("--no-progress", action="store_true", help="no progress bars (log files)")
    add_protocol_flags(ev, ["keep_token_ids"])

    g = ev.add_argument_group("vLLM")
    g.add_argument("--tensor-parallel-size", type=int, default=1)
    g.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="only 1: vLLM's offline engine refuses data parallelism in one process; "
        "shard with one process per GPU (slurm/evaluate.slurm's array)",
    )
    g.add_argument(
        "--merge-adapter",
        action="store_true",
        help="merge LoRA into the weights instead of LoRARequest",
    )
    g.add_argument("--max-model-len", type=int)
    g.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="fraction of GPU memory (default 0.9); on vLLM's CPU backend, of all RAM "
        "(default: a KV cache sized from free memory, docs/vllm_cpu.md)",
    )
    g.add_argument(
        "--enforce-eager",
        action="store_true",
        help="no torch.compile/CUDA graphs: slower decoding, engine starts in seconds (CPU tests)",
    )

    e = ev.add_argument_group(
        "OpenAI-compatible endpoint (--backend openai-completions | openai-chat)"
    )
    e.add_argument(
        "--base-url",
        metavar="URL",
        help="API root, e.g. http://localhost:8000/v1 (vllm serve, rlsr serve) or "
        "https://api.openai.com/v1",
    )
    e.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the API key (never given on the command "
        "line, never written); unset: no key sent",
    )
    e.add_argument("--concurrency", type=int, default=16, metavar="N", help="requests in flight")
    e.add_argument(
        "--request-timeout", type=float, default=600.0, metavar="S", help="seconds per request"
    )
    e.add_argument(
        "--max-retries",
        type=int,
        default=8,
        metavar="N",
        help="retries of a request on 429/5xx/timeouts/malformed answers (backoff, Retry-After)",
    )
    e.add_argument(
        "--retry-backoff",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds before the first retry, doubled after each (capped at 60 s); a "
        "server's Retry-After is waited out instead",
    )
    e.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="openai-completions: tokenizer + chat template that render the prompt "
        "(default: --model, which is then a local folder or hub id as vllm serve was "
        "given)",
    )
    e.add_argument(
        "--audit-deployment",
        metavar="DEPLOYMENT_JSON",
        help="the endpoint is `rlsr serve`: compare its answer rate and risk among "
        f"answered with what this {DEPLOYMENT_FILE} certified (writes "
        f"DIR/{AUDIT_FILE}, {Path(AUDIT_FILE).with_suffix('.md')})",
    )

    j = ev.add_argument_group("LLM judge (Sec. C.2)")
    j.add_argument("--judge-model", default=None, help="default meta-llama/Llama-3.1-8B-Instruct")
    j.add_argument(
        "--judge-backend",
        choices=("transformers", "vllm", "openai"),
        default=None,
        help="default: openai when --judge-base-url is set, else --backend",
    )
    j.add_argument("--judge-base-url", help="OpenAI-compatible server, e.g. http://host:8000/v1")
    j.add_argument("--judge-batch-size", type=int, default=16)
    j.add_argument(
        "--judge-timeout",
        type=float,
        default=JUDGE_TIMEOUT_S,
        metavar="S",
        help="seconds per judge request",
    )
    j.add_argument(
        "--judge-max-retries",
        type=int,
        default=JUDGE_MAX_RETRIES,
        metavar="N",
        help="retries (exponential backoff) of a failed judge request before the run stops",
    )
    j.add_argument(
        "--judge-max-answer-chars",
        type=int,
        default=JUDGE_MAX_ANSWER_CHARS,
        metavar="N",
        help="a predicted answer is cut to N characters before it is quoted to the judge",
    )

    d = ev.add_argument_group("risk-controlled deployment (Sec. 4.2)")
    d.add_argument(
        "--deployment-target", type=float, help="target accuracy; evaluates validation+test splits"
    )
    d.add_argument(
        "--deployment-task",
        default="medqa",
        metavar="NAME",
        help="the task whose splits the deployment evaluates",
    )
    d.add_argument("--deployment-splits", default="validation,test")
    d.add_argument("--deployment-delta", type=float, default=0.1)
    add_training_rows_flag(d)
    return ev
