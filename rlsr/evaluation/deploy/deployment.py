"""Risk-controlled deployment (RLSR paper Sec. 4.2, Tab. 3, Sec. C.6): pick tau on the
validation split so that {confidence >= tau} reaches the target accuracy, then report validation
and test coverage / accuracy at that tau, for

* ``plain``: the paper's rule, tau = min{t : acc_val({s >= t}) >= target} (Sec. C.6.3);
* ``clopper_pearson``: accept tau only while the (1 - delta) Clopper-Pearson upper bound on the
  selective error is <= 1 - target (``rlsr.metrics.selective.select_threshold``);
* ``plain+temperature``: Sec. C.6.5's baseline, confidences rescaled by a temperature fitted on
  validation (``rlsr.metrics.selective.temperature_scale``), then the plain rule.

A rule that reaches no threshold (the paper's dagger rows) reports the validation accuracy at the
highest threshold. ``deployment.json`` holds the rows, each with what its tau guarantees, and
the provenance ``rlsr serve`` checks (docs/serving.md).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import yaml

from rlsr.config import resolve_model_path
from rlsr.core.prompts import system_prompt_name
from rlsr.data import REGISTRY, task_records
from rlsr.evaluation.run.outputs import TRAINING_ROWS_FLAG
from rlsr.evaluation.run.provenance import adapter_fingerprint
from rlsr.evaluation.run.samples_io import json_safe, read_finished_samples
from rlsr.evaluation.run.summary import confidence_defined, rate_warning, scorer_arrays
from rlsr.metrics import selective as M
from rlsr.run.eval_protocol import DECODING_FIELDS, PROTOCOL_FIELDS, SCORERS
from rlsr.run.run_layout import DEPLOYMENT_FILE, METRICS_FILE, RUN_FILE, SAMPLES_FILE

__all__ = [
    "RULES",
    "DEPLOYMENT_SCHEMA_VERSION",
    "deployment_rows",
    "deployment_markdown",
    "deployment_method_name",
    "INFEASIBLE_LEGEND",
    "guarantee",
    "deployment_record",
    "split_job_name",
    "model_identity",
    "find_run_record",
    "evaluation_decoding",
    "evaluation_protocol",
    "deployment_provenance",
    "deployment_from_samples",
    "write_deployment",
    "TRAIN_CONFIG_FILE",
    "training_record",
    "training_rows_mark",
    "training_rows_problem",
    "split_identity",
    "split_problems",
]

RULES = ("plain", "clopper_pearson", "plain+temperature")
DEPLOYMENT_SCHEMA_VERSION = 2  # 1: {"method", "rows"}; 2: + "provenance", row "guarantee"
TRAIN_CONFIG_FILE = "config.yaml"  # train.py's resolved config, in the run's output_dir


def _row(rule, val_conf, val_ok, test_conf, test_ok, target, delta, temperature=None) -> dict:
    method = "plain" if rule.startswith("plain") else "clopper_pearson"
    sel = M.select_threshold(val_conf, val_ok, target, method=method, delta=delta)
    row = {
        "rule": rule,
        "target": target,
        "feasible": bool(sel.feasible),
        "temperature": temperature,
    }
    if sel.feasible:
        test = M.apply_threshold(test_conf, test_ok, sel.threshold)
        row.update(
            tau=sel.threshold, val_coverage=sel.coverage, val_accuracy=sel.accuracy,
            val_selected=sel.n_selected, test_coverage=test.coverage, test_accuracy=test.accuracy,
            test_selected=test.n_selected,
            risk_upper_bound=None if math.isnan(sel.risk_upper_bound) else sel.risk_upper_bound,
        )  # fmt: skip
    else:
        top = float(np.max(val_conf))
        val = M.apply_threshold(val_conf, val_ok, top)
        row.update(
            tau=top, val_coverage=None, val_accuracy=val.accuracy, val_selected=None,
            test_coverage=None, test_accuracy=None, test_selected=None, risk_upper_bound=None,
        )  # fmt: skip
    return row


def deployment_rows(
    val_confidence: Sequence[float],
    val_correct: Sequence[bool],
    test_confidence: Sequence[float],
    test_correct: Sequence[bool],
    target: float,
    *,
    delta: float = 0.1,
) -> list[dict]:
    """Tab. 3 rows (one model): the paper's rule, the guarded rule and the temperature baseline."""
    vc, vo = np.asarray(val_confidence, float), np.asarray(val_correct, bool)
    tc, to = np.asarray(test_confidence, float), np.asarray(test_correct, bool)
    rows = [
        _row("plain", vc, vo, tc, to, target, delta),
        _row("clopper_pearson", vc, vo, tc, to, target, delta),
    ]
    scaler = M.temperature_scale(vc, vo)
    rows.append(
        _row("plain+temperature", scaler(vc), vo, scaler(tc), to, target, delta, scaler.temperature)
    )
    return rows


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


# Printed under every deployment table that has a dagger row.
INFEASIBLE_LEGEND = (
    "† the rule reached no threshold: no τ gave the target accuracy on the validation split. "
    "The row shows instead τ = the highest validation confidence and, under Val. Acc., the "
    "accuracy of the answers at that confidence; serving it would abstain on every question."
)


def deployment_method_name(provenance: Mapping) -> str:
    """The Method of a deployment table: the name of the evaluation folder whose ``run.json``
    describes the validation samples (as ``rlsr report`` names runs), else ``"model"``."""
    record = provenance.get("run_record")
    return Path(record).parent.name if record else "model"


def deployment_markdown(rows_by_method: dict[str, list[dict]], *, note: str | None = None) -> str:
    """Markdown in the layout of paper Tab. 3, ``INFEASIBLE_LEGEND`` under it for a dagger row,
    ``note`` (``training_rows_mark``) above it."""
    lines = [f"**{note}**", ""] if note else []
    lines += [
        "| Method | Rule | τ | Val. Cov. | Val. Acc. | Test Cov. | Test Acc. |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for method, rows in rows_by_method.items():
        for r in rows:
            name = method + ("" if r["feasible"] else "†")
            lines.append(
                f"| {name} | {r['rule']} | {r['tau']:.3g} | {_pct(r['val_coverage'])} | "
                f"{_pct(r['val_accuracy'])} | {_pct(r['test_coverage'])} | {_pct(r['test_accuracy'])} |"
            )
    if any(not r["feasible"] for rows in rows_by_method.values() for r in rows):
        lines += ["", INFEASIBLE_LEGEND]
    return "\n".join(lines) + "\n"


def guarantee(row: Mapping, *, source: str, n_validation: int, delta: float | None = None) -> str:
    """One sentence: what serving ``row``'s tau promises, for ``source`` (e.g. "medqa@validation"):
    for ``clopper_pearson``, selective accuracy >= target on new i.i.d. questions with probability
    >= 1 - delta; for the plain rules only what was observed on validation; infeasible: nothing."""
    target = _pct(row["target"])
    if not row["feasible"]:
        return (
            f"No threshold reached {target} accuracy on {source} (n = {n_validation}) under the "
            f"{row['rule']} rule: serving it would abstain on every question."
        )
    observed = (
        f"on {source} (n = {n_validation}) answers at confidence >= tau = {row['tau']:.4g} "
        f"covered {_pct(row['val_coverage'])} of the questions at "
        f"{_pct(row['val_accuracy'])} accuracy"
    )
    if row["rule"] == "clopper_pearson":
        level = "1 - delta" if delta is None else _pct(1 - delta)
        return (
            f"With probability at least {level} over the draw of the validation questions, "
            f"answered questions from the same distribution are at least {target} accurate "
            f"(one-sided Clopper-Pearson bound {_pct(row['risk_upper_bound'])} on the selective "
            f"error, fixed-sequence testing); {observed}."
        )
    scaled = (
        f" (confidences rescaled by temperature T = {row['temperature']:.4g} first)"
        if row.get("temperature") is not None
        else ""
    )
    return (
        f"Observed only: {observed}{scaled}. The {row['rule']} rule picks the threshold whose "
        f"observed accuracy just reaches {target}, so it guarantees nothing on new questions "
        "(expect to fall short of the target about half the time)."
    )


def split_job_name(name: str) -> tuple[str, str | None]:
    """``"medqa@validation"`` -> ``("medqa", "validation")``; ``"tiny"`` -> ``("tiny", None)``."""
    dataset, sep, split = name.partition("@")
    return dataset, (split if sep else None)


def deployment_record(method: str, rows: Sequence[dict], provenance: Mapping) -> dict:
    """``deployment.json``: the rows, each with its ``guarantee``, and the ``provenance``."""
    source = provenance.get("validation_source") or "the validation split"
    n_val = int(provenance.get("n_validation") or 0)
    delta = provenance.get("delta")
    mark = training_rows_mark(provenance)
    out_rows = [
        {**row, "guarantee": (f"{mark} " if mark else "")
         + guarantee(row, source=source, n_validation=n_val, delta=delta)}
        for row in rows
    ]  # fmt: skip
    return {
        "schema_version": DEPLOYMENT_SCHEMA_VERSION,
        "method": method,
        "provenance": dict(provenance),
        "rows": out_rows,
    }


def model_identity(name_or_path: str) -> str:
    """How a base model is named in provenance records and compared: a shipped alias resolved
    to its folder (``rlsr.config.resolve_model_path``), a local folder by its absolute resolved
    path, anything else (a hub id) by its text without a trailing slash."""
    text = resolve_model_path(str(name_or_path).strip())
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path.resolve())
    return text.rstrip("/") or text


def find_run_record(samples_path: str | os.PathLike) -> tuple[Path, dict] | None:
    """(path, content) of the ``run.json`` of the evaluation that wrote ``samples_path`` (the file
    or its folder), in the folder or its parent; None if there is none."""
    p = Path(samples_path)
    folder = p if p.is_dir() else p.parent
    for candidate in (folder / RUN_FILE, folder.parent / RUN_FILE):
        if candidate.is_file():
            return candidate, json.loads(candidate.read_text())
    return None


def evaluation_protocol(samples_path: str | os.PathLike) -> dict | None:
    """The ``EvalProtocol`` fields in the ``metrics.json`` beside the samples; None without."""
    p = Path(samples_path)
    metrics = (p if p.is_dir() else p.parent) / METRICS_FILE
    if not metrics.is_file():
        return None
    settings = json.loads(metrics.read_text()).get("settings") or {}
    return {k: settings[k] for k in PROTOCOL_FIELDS if k in settings} or None


def evaluation_decoding(samples_path: str | os.PathLike) -> dict | None:
    """The ``DECODING_FIELDS`` of ``evaluation_protocol``."""
    protocol = evaluation_protocol(samples_path) or {}
    return {k: protocol[k] for k in DECODING_FIELDS if k in protocol} or None


def _adapter_record(run: dict | None, adapter: str | None) -> dict | None:
    if adapter is not None:
        return adapter_fingerprint(adapter)
    if not run or not run.get("adapter"):
        return None
    if run.get("adapter_sha256"):  # recorded by `rlsr evaluate` at evaluation time
        return {"path": run["adapter"], "sha256": run["adapter_sha256"],
                "files": run.get("adapter_files")}  # fmt: skip
    path = Path(run["adapter"])
    if not path.is_dir():
        raise ValueError(
            f"the evaluation used adapter {path}, which is gone, so its fingerprint cannot be "
            "recorded; pass --adapter PATH (the same adapter) to rlsr deploy."
        )
    return adapter_fingerprint(path)


def _source(records: list[dict]) -> str:
    """``dataset@split`` of evaluation records (a registry dataset's default split named)."""
    name = str(records[0].get("dataset") or "") if records else ""
    dataset, split = split_job_name(name)
    if split is None and dataset in REGISTRY:
        return f"{dataset}@{REGISTRY[dataset].split}"
    return name


def _task_record(run: dict | None, records: list[dict]) -> dict | None:
    """``{"name", "file", "sha256"}`` of the user task the validation samples came from (its
    ``run.json`` record, else as registered here); None for a built-in."""
    name = str(records[0].get("dataset") or "") if records else ""
    dataset = split_job_name(name)[0]
    recorded = ((run or {}).get("tasks") or {}).get(dataset) or task_records([dataset]).get(dataset)
    return None if recorded is None else {"name": dataset, **recorded}


def training_record(adapter: str | os.PathLike) -> dict | None:
    """``{"dataset", "split", "config"}``: what the LoRA ``adapter`` was trained on, from
    train.py's ``TRAIN_CONFIG_FILE`` in the adapter folder or (``checkpoint-N``) its parent;
    the split is ``data.split``, else the dataset's train split. None without a config."""
    root = Path(adapter)
    for folder in (root, root.parent):
        path = folder / TRAIN_CONFIG_FILE
        if not path.is_file():
            continue
        config = yaml.safe_load(path.read_text()) or {}
        data = config.get("data") or {}
        dataset = data.get("task")
        if not dataset:
            return None
        spec = REGISTRY.get(str(dataset))
        split = data.get("split") or (spec.train_split if spec and spec.train_split else "train")
        return {"dataset": str(dataset), "split": str(split), "config": str(path.resolve())}
    return None


def _trained_on(source: str | None, trained: Mapping | None) -> bool:
    dataset, split = split_job_name(source or "")
    return bool(trained) and (dataset, split) == (trained["dataset"], trained["split"])


def _training_splits(provenance: Mapping) -> list[str]:
    """Which of "validation" / "test" come from rows the adapter trained on."""
    flags = (("validation", "threshold_on_training_rows"), ("test", "test_on_training_rows"))
    return [name for name, key in flags if provenance.get(key)]


def training_rows_mark(provenance: Mapping) -> str | None:
    """The warning a deployment's outputs carry when its threshold was chosen on, or its test
    rows come from, rows the adapter trained on (``TRAINING_ROWS_FLAG``); else None."""
    splits = _training_splits(provenance)
    if not splits:
        return None
    trained = provenance.get("trained_on") or {}
    where = f"({trained.get('dataset')}@{trained.get('split')}, {trained.get('config')})"
    if "validation" in splits:
        text = (
            f"NOT HELD OUT: tau was chosen on {provenance.get('validation_source')}, rows the "
            f"adapter trained on {where}; its accuracy there overstates what new questions get"
        )
        if "test" in splits:
            text += f", and so do the test figures ({provenance.get('test_source')})"
        return text + "."
    return (
        f"NOT HELD OUT: the test figures come from {provenance.get('test_source')}, rows the "
        f"adapter trained on {where}; they overstate what new questions get."
    )


def training_rows_problem(provenance: Mapping) -> str | None:
    """The refusal of a deployment whose threshold is chosen on, or whose test rows come from,
    the adapter's training rows: one line naming the split, the config and the fix; else None."""
    splits = _training_splits(provenance)
    if not splits:
        return None
    trained = provenance["trained_on"]
    run = (
        f"the split the adapter trained on ({trained['config']}: data.task={trained['dataset']}, "
        f"split {trained['split']})"
    )
    if "validation" in splits:
        return (
            f"the threshold would be chosen on {provenance['validation_source']}, {run}; choose "
            "it on a held-out split (deploy --validation of another split's samples; evaluate "
            f"--deployment-splits validation,test), or pass {TRAINING_ROWS_FLAG} to write it "
            "marked as not held out."
        )
    return (
        f"the test samples ({provenance['test_source']}) are {run}, so their coverage and "
        "accuracy overstate what new questions get; give --test another split's samples "
        f"(evaluate --deployment-splits validation,test), or pass {TRAINING_ROWS_FLAG} to write "
        "it marked as not held out."
    )


def deployment_provenance(
    val_path: str | os.PathLike,
    val_records: list[dict],
    test_records: list[dict],
    *,
    scorer: str,
    target: float,
    delta: float,
    model: str | None = None,
    adapter: str | None = None,
) -> dict:
    """What a deployment threshold was computed from (``deployment.json["provenance"]``); model
    and adapter from ``model`` / ``adapter``, else from the evaluation's ``run.json``."""
    found = find_run_record(val_path)
    run = found[1] if found else None
    model_name = model if model is not None else (run or {}).get("model")
    source = _source(val_records)
    test_source = _source(test_records)
    system_text = _system_text(val_records)
    prompt_name = system_prompt_name(system_text)
    if system_text is not None and prompt_name is None:
        # serve renders a prompt by name and checks it against this one: an unnamed prompt
        # would leave the threshold's prompt unrecorded and that check without a reference
        task = (run or {}).get("tasks") or {}
        hint = f" (task {', '.join(task)}'s own)" if isinstance(task, dict) and task else ""
        raise ValueError(
            f"the validation samples' system prompt{hint} is none rlsr knows, so "
            f"{DEPLOYMENT_FILE} could not name it for rlsr serve; load the task that defines it "
            "with --tasks-dir DIR (as rlsr evaluate had it)."
        )
    adapter_record = _adapter_record(run, adapter)
    trained = None if adapter_record is None else training_record(adapter_record["path"])
    return {
        "model": None if model_name is None else model_identity(model_name),
        "adapter": adapter_record,
        # what the adapter trained on (its run's config.yaml), and whether the threshold's rows
        # (or the reported test rows) are among them: rlsr deploy refuses the first unless told
        "trained_on": trained,
        "threshold_on_training_rows": _trained_on(source, trained),
        "test_on_training_rows": _trained_on(test_source, trained),
        "task": _task_record(run, val_records),
        "run_record": None if found is None else str(found[0].resolve()),
        "validation_source": source or None,
        "test_source": test_source or None,
        "n_validation": len(val_records),
        "n_test": len(test_records),
        "scorer": scorer,
        "system_prompt": prompt_name,
        # the whole protocol the validation samples were generated and scored with; "decoding"
        # (its DECODING_FIELDS) kept for readers of older files
        "protocol": evaluation_protocol(val_path),
        "decoding": evaluation_decoding(val_path),
        "target_accuracy": target,
        "delta": delta,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _samples_of(path: str | Path) -> Path:
    p = Path(path)
    return p / SAMPLES_FILE if p.is_dir() else p


def _system_text(records: list[dict]) -> str | None:
    """The system message the first sample was asked with; None without one."""
    messages = records[0].get("prompt") if records else None
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        if messages[0].get("role") == "system":
            return messages[0].get("content")
    return None


def _compared_protocol_fields(protocol: Mapping, scorer: str) -> tuple[str, ...]:
    """The protocol fields that decide an answer and its confidence (the seed only when
    sampling, the consistency settings only for that scorer)."""
    fields = [*DECODING_FIELDS, "response_format", "system_prompt"]
    if protocol.get("temperature"):
        fields.append("seed")
    if scorer == "consistency":
        fields += ["consistency_k", "consistency_temperature"]
    return tuple(fields)


def _adapter_identity(run: Mapping) -> str:
    """An evaluation's adapter by content: its recorded hash, else its folder's, else its path;
    ``"none"`` without adapter."""
    if not run.get("adapter"):
        return "none"
    if run.get("adapter_sha256"):
        return run["adapter_sha256"]
    path = Path(run["adapter"])
    return (
        adapter_fingerprint(path)["sha256"]
        if (path / "adapter_config.json").is_file()
        else str(path)
    )


def split_identity(samples: str | os.PathLike, records: list[dict], scorer: str) -> dict:
    """What a split's samples were produced by, as far as its files record it: task, model,
    adapter, task file, system prompt and ``protocol <field>`` (``_compared_protocol_fields``)."""
    out: dict[str, object] = {}
    dataset = split_job_name(str(records[0].get("dataset") or ""))[0] if records else ""
    if dataset:
        out["task"] = dataset
    found = find_run_record(samples)
    run = found[1] if found else {}
    if run.get("model"):
        out["model"] = model_identity(run["model"])
    if "adapter" in run:
        out["adapter"] = _adapter_identity(run)
    task = ((run.get("tasks") or {}).get(dataset) or {}) if dataset else {}
    if task.get("sha256"):
        out["task file"] = task["sha256"]
    if records and isinstance(records[0].get("prompt"), list):
        out["system prompt"] = _system_text(records)
    protocol = evaluation_protocol(samples) or {}
    for key in _compared_protocol_fields(protocol, scorer):
        if key in protocol:
            out[f"protocol {key}"] = protocol[key]
    return out


def _row_keys(records: list[dict]) -> set[tuple[str, object]]:
    """(id, question) of every sample (an id alone can repeat across splits)."""
    return {(str(r.get("id")), r.get("question")) for r in records}


def _shown(value: object) -> str:
    text = "none" if value is None else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def split_problems(
    val_path: Path, val: list[dict], test_path: Path, test: list[dict], scorer: str
) -> str | None:
    """Why the validation and test samples cannot certify one threshold together, in one line,
    else None: the same file, a difference in ``split_identity``, or shared questions."""
    if val_path.resolve() == test_path.resolve():
        return (
            f"validation and test are the same file ({val_path}): test coverage and accuracy "
            "would repeat validation's; give the test split's samples as --test (rlsr evaluate "
            "--deployment-splits validation,test evaluates both)."
        )
    mine, theirs = split_identity(val_path, val, scorer), split_identity(test_path, test, scorer)
    for key in mine:  # in split_identity's order: task and model before the protocol
        if key in theirs and mine[key] != theirs[key]:
            return (
                f"validation and test differ in {key}: {val_path} has "
                f"{_shown(mine[key])}, {test_path} has {_shown(theirs[key])}; a threshold holds "
                "only for the model, adapter, task and protocol it was chosen with: evaluate "
                "both splits with one (rlsr evaluate --deployment-target does)."
            )
    shared = _row_keys(val) & _row_keys(test)
    if shared:
        example = sorted(shared, key=str)[0][0]
        return (
            f"{len(shared)} of the {len(test)} test questions (e.g. id {example!r}) are also in "
            f"the validation samples ({val_path}, {test_path}): test figures must come from "
            "questions the threshold was not chosen on; give --test another split's samples."
        )
    return None


def _scorer_confidences(path: Path, records: list[dict], scorer: str, label: str):
    """(confidence, correct) of ``scorer``; refuses a scorer the samples lack or samples without
    any confidence, and warns on stderr at a low rate (``rate_warning``)."""
    if not any(scorer in (r.get("scores") or {}) for r in records):
        have = sorted({k for r in records for k in (r.get("scores") or {})})
        listed = ", ".join(have) if have else "none"
        raise ValueError(
            f"{label} {path}: its samples hold no {scorer} confidence (their scorers: {listed}); "
            f"choose --scorer from those, or evaluate again with --scorers {scorer}."
        )
    conf, ok, missing = scorer_arrays(records, scorer)
    recorded = [r["format_ok"] for r in records if "format_ok" in r]
    format_rate = float(np.mean(recorded)) if len(recorded) == len(records) else None
    if not confidence_defined(len(records), missing):
        rate = "" if format_rate is None else f" (format rate {format_rate:.2f})"
        raise ValueError(
            f"{label} {path}: no {scorer} confidence in any of its {len(records)} samples{rate}: "
            "every answer would tie at 0 and no threshold can be certified; evaluate a model "
            "that states a confidence (the system prompt asks for <answer>/<confidence>, and the "
            "model was trained on that format)."
        )
    warning = rate_warning(len(records), missing, format_rate, scorer)
    if warning:
        print(f"rlsr: warning: {label} {path}: {warning}", file=sys.stderr)
    return conf, ok


def deployment_from_samples(
    val_path, test_path, target, scorer, delta, *, model=None, adapter=None, allow_train=False,
    labels=("--validation", "--test"),
):  # fmt: skip
    """(rows, provenance) of a deployment from the validation / test samples (a samples.jsonl
    or its folder), what ``rlsr deploy`` and ``rlsr evaluate --deployment-target`` write.
    Refuses, before anything is written, in one line naming the file (``labels``): an unknown or
    absent scorer, samples without confidence or unfinished, validation and test that cannot go
    together, and the adapter's training rows unless ``allow_train``."""
    if scorer not in SCORERS:
        raise ValueError(f"--scorer {scorer}: unknown scorer; choose one of {', '.join(SCORERS)}.")
    val = read_finished_samples(val_path, labels[0])
    test = read_finished_samples(test_path, labels[1])
    val_file, test_file = _samples_of(val_path), _samples_of(test_path)
    problem = split_problems(val_file, val, test_file, test, scorer)
    if problem:
        raise ValueError(problem)
    vc, vo = _scorer_confidences(val_file, val, scorer, labels[0])
    tc, to = _scorer_confidences(test_file, test, scorer, labels[1])
    rows = deployment_rows(vc, vo, tc, to, target, delta=delta)
    provenance = deployment_provenance(
        val_file, val, test, scorer=scorer, target=target, delta=delta,
        model=model, adapter=adapter,
    )  # fmt: skip
    problem = training_rows_problem(provenance)
    if problem and not allow_train:
        raise ValueError(problem)
    return rows, provenance


def write_deployment(prefix: Path, method: str, rows: list[dict], provenance: dict) -> None:
    """PREFIX.json (``deployment_record``) and PREFIX.md (the table and its legend)."""
    record = deployment_record(method, rows, provenance)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(json.dumps(json_safe(record), indent=2) + "\n")
    note = training_rows_mark(provenance)
    prefix.with_suffix(".md").write_text(deployment_markdown({method: rows}, note=note))
