"""``rlsr serve``'s and ``rlsr serve-report``'s flags (what they do: ``rlsr.cli.serve_cli``)."""

from __future__ import annotations

import argparse

from rlsr.evaluation.run.outputs import SERVE_REPORT_FILE, add_output_dir
from rlsr.run.eval_protocol import DECODING_FIELDS, add_protocol_flags
from rlsr.run.run_layout import DEPLOYMENT_FILE
from rlsr.serving import DEFAULT_ABSTAIN_MESSAGE, DEFAULT_RULE

__all__ = ["register", "register_report", "API_KEY_ENV"]

API_KEY_ENV = "RLSR_API_KEY"
DEFAULT_MAX_QUEUED = 1024
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024  # 8 MiB: ~2M tokens of text, far past any context
# 1M characters: ~250k tokens of English text, past the context of the models rlsr trains; what a
# message may cost in rendering and tokenising before the engine can refuse it for its length.
DEFAULT_MAX_MESSAGE_CHARS = 1_000_000


def _add_bound(group, flag: str, default: int, help: str) -> None:
    """An operator's bound ``flag N``: an integer, 0 for none."""
    group.add_argument(flag, type=int, default=default, metavar="N",
                       help=f"{help} (default: %(default)s; 0: no bound)")  # fmt: skip


def register(subparsers) -> argparse.ArgumentParser:
    sv = subparsers.add_parser(
        "serve",
        help="OpenAI-compatible endpoint that answers at or above a certified threshold",
        usage=f"rlsr serve --model PATH [--adapter PATH] (--threshold {DEPLOYMENT_FILE} | --tau T) "
        "[--port P] [--upstream URL] [options]",
        description="Serves /v1/chat/completions, /v1/models and /health. Each question is "
        "rendered with the training system prompt and format; the completion is parsed (with "
        "the Sec. C.3 fallbacks); the answer is returned if its confidence >= tau, else the "
        "abstention message. Each choice carries an `rlsr` field with the confidence, tau, the "
        "decision and the raw completion.",
        epilog="example: rlsr serve --model Qwen/Qwen2.5-7B --adapter runs/medqa-rlsr "
        f"--threshold evals/medqa-rlsr/{DEPLOYMENT_FILE} --port 8000. Details: docs/serving.md.",
    )
    sv.add_argument("--model", required=True, metavar="PATH", help="base model (as evaluated)")
    sv.add_argument("--adapter", metavar="PATH", help="LoRA adapter folder or training run dir")
    which = sv.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--threshold", metavar="FILE", help=f"{DEPLOYMENT_FILE} written by rlsr deploy"
    )
    which.add_argument("--tau", type=float, metavar="T", help="a threshold set by hand")
    sv.add_argument(
        "--rule", default=DEFAULT_RULE, help="row of --threshold to serve (default: %(default)s)"
    )
    sv.add_argument(
        "--force",
        action="store_true",
        help="serve a threshold computed for another model or adapter, or with a system prompt "
        "or decoding flags that differ from its certified protocol",
    )
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    sv.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    sv.add_argument(
        "--upstream",
        metavar="URL",
        help="existing OpenAI-compatible server (vllm serve) instead of an in-process engine",
    )
    sv.add_argument(
        "--upstream-model",
        metavar="NAME",
        help="the upstream's name of the model (default: --model; with vllm serve "
        "--lora-modules NAME=PATH, that NAME)",
    )
    sv.add_argument(
        "--upstream-timeout", type=float, default=600.0, metavar="S", help="per call, seconds"
    )
    sv.add_argument(
        "--served-model-name", metavar="NAME", help="the `model` clients send (default: --model)"
    )
    sv.add_argument("--abstain-message", default=DEFAULT_ABSTAIN_MESSAGE, metavar="TEXT")
    sv.add_argument("--decision-log", metavar="FILE", help="append one JSON line per decision")
    sv.add_argument(
        "--system-prompt",
        help="training system prompt: simple, long or a task's (default: the one the threshold's "
        "samples used; another one is refused unless --force)",
    )
    g = sv.add_argument_group(
        "decoding (default: the protocol the threshold was certified under; a value that differs "
        "from it is refused unless --force)"
    )
    add_protocol_flags(g, DECODING_FIELDS, unset=True)  # rlsr evaluate's flags, declared once
    op = sv.add_argument_group('operator (docs/serving.md, "Operating it")')
    op.add_argument(
        "--api-key", action="append", default=[], metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health (repeatable; also "
        f"${API_KEY_ENV}, so the key stays out of the process list); never logged",
    )  # fmt: skip
    _add_bound(op, "--max-queued-requests", DEFAULT_MAX_QUEUED,
               "chat completions accepted at once (waiting or running); one more gets 429 with "
               "Retry-After")  # fmt: skip
    _add_bound(op, "--max-request-bytes", DEFAULT_MAX_REQUEST_BYTES,
               "a chat request body larger than N bytes gets 413 before it is parsed (from its "
               "Content-Length, or while a chunked body is read)")  # fmt: skip
    _add_bound(op, "--max-message-chars", DEFAULT_MAX_MESSAGE_CHARS,
               "a message longer than N characters gets 400 (message_too_long) before it is "
               "rendered or tokenised")  # fmt: skip
    op.add_argument(
        "--allowed-origins", action="append", metavar="ORIGIN",
        help="CORS: allow this origin (repeatable; '*' for any). Off by default",
    )  # fmt: skip
    op.add_argument("--allowed-methods", action="append", metavar="METHOD",
                    help="CORS: allowed methods (repeatable; default: GET, POST)")  # fmt: skip
    op.add_argument("--allowed-headers", action="append", metavar="HEADER",
                    help="CORS: allowed request headers (repeatable; default: "
                    "Authorization, Content-Type, X-Request-Id)")  # fmt: skip
    op.add_argument("--allow-credentials", action="store_true", help="CORS: allow credentials")
    v = sv.add_argument_group("in-process vLLM engine")
    v.add_argument("--dtype", default="auto")
    v.add_argument("--max-model-len", type=int)
    v.add_argument("--gpu-memory-utilization", type=float,
                   help="fraction of GPU memory (default 0.9); on vLLM's CPU backend, of all RAM "
                   "(default: a KV cache sized from free memory, docs/vllm_cpu.md)")  # fmt: skip
    v.add_argument("--tensor-parallel-size", type=int, default=1)
    v.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs / compile")
    v.add_argument("--trust-remote-code", action="store_true")
    return sv


def register_report(subparsers) -> argparse.ArgumentParser:
    rp = subparsers.add_parser(
        "serve-report",
        help="realised coverage of a decision log next to the threshold's validation coverage",
        usage=f"rlsr serve-report LOG --threshold {DEPLOYMENT_FILE} [--rule R] [--output-dir DIR]",
    )
    rp.add_argument("log", help="decision log written by rlsr serve --decision-log")
    rp.add_argument("--threshold", metavar="FILE", help=f"the {DEPLOYMENT_FILE} that was served")
    rp.add_argument("--rule", default=DEFAULT_RULE)
    rp.add_argument("--tau", type=float, help="only decisions at this tau (default: the rule's)")
    add_output_dir(rp, f"DIR/{SERVE_REPORT_FILE} and .md")
    return rp
