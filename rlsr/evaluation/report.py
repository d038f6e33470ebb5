"""``rlsr report``: compare evaluation directories in the layout of the RLSR paper.

* Tab. 1: per method, AURC / ECE / Acc@10 / Acc@25 / Acc@50 averaged over the in-domain (ID)
  and the out-of-domain (OOD) datasets;
* Tabs. 8-11: the same metrics per dataset;
* Tab. 5: with several runs (seeds) per method every cell is mean ± std over runs (std: ddof 1,
  ``rlsr.metrics.mean_std_over_seeds``); ID/OOD averages are taken per run first;
* Fig. 5-7: one panel per dataset with one risk-coverage curve per method (mean over runs).

Methods: ``--label NAME=DIR1,DIR2`` names runs explicitly; other directories are grouped by
their basename with a trailing seed tag removed (``rlsr-seed1`` and ``rlsr_s2`` -> ``rlsr``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlsr import metrics as M
from rlsr.data import GROUPS, resolve_datasets
from rlsr.evaluation.plots import COVERAGE_GRID, curve_on_grid, plot_overlay_grid
from rlsr.evaluation.samples_io import read_samples
from rlsr.evaluation.summary import scorer_arrays

__all__ = [
    "TABLE_METRICS",
    "Run",
    "method_from_dirname",
    "group_runs",
    "split_id_ood",
    "build_report",
]

TABLE_METRICS = (
    ("aurc", "AURC↓"),
    ("ece", "ECE↓"),
    ("acc@10", "Acc@10↑"),
    ("acc@25", "Acc@25↑"),
    ("acc@50", "Acc@50↑"),
)
_PERCENT = {"acc@10", "acc@25", "acc@50", "accuracy"}
_SEED_TAG = re.compile(r"[-_.](?:seed|s)\d+$", re.IGNORECASE)


@dataclass
class Run:
    path: Path
    metrics: dict[str, dict] = field(default_factory=dict)  # dataset -> metrics.json

    @classmethod
    def load(cls, path: str | Path) -> Run:
        root = Path(path)
        found = {}
        for mfile in sorted(root.glob("*/metrics.json")):
            found[mfile.parent.name] = json.loads(mfile.read_text())
        if not found:
            raise ValueError(
                f"{root}: no <dataset>/metrics.json inside; is it an `rlsr evaluate` output dir?"
            )
        return cls(root, found)


def method_from_dirname(path: str | Path) -> str:
    """Basename without a trailing seed tag (``-seed3``, ``_s2``, ``.seed0``)."""
    return _SEED_TAG.sub("", Path(path).resolve().name)


def group_runs(dirs: Sequence[str], labels: Sequence[str] = ()) -> dict[str, list[Path]]:
    """Method name -> run directories (see module docstring)."""
    groups: dict[str, list[Path]] = {}
    labelled: set[Path] = set()
    for spec in labels:
        name, sep, paths = spec.partition("=")
        if not sep or not name or not paths:
            raise ValueError(f"--label {spec!r}: expected NAME=DIR1,DIR2.")
        for p in paths.split(","):
            groups.setdefault(name, []).append(Path(p))
            labelled.add(Path(p).resolve())
    for d in dirs:
        if Path(d).resolve() not in labelled:
            groups.setdefault(method_from_dirname(d), []).append(Path(d))
    if not groups:
        raise ValueError("no evaluation directories given.")
    return groups


def split_id_ood(datasets: Sequence[str], family: str | None = None, id_sets=None, ood_sets=None):
    """(ID names, OOD names). Explicit lists win; else ``family`` ("hotpot" | "bigmath") groups;
    else the family whose ID group holds the most of ``datasets``; none -> ([all], [])."""

    if id_sets or ood_sets:
        ids = resolve_datasets(id_sets) if id_sets else []
        oods = resolve_datasets(ood_sets) if ood_sets else []
    else:
        if family is None:
            overlap = {
                f: len(set(datasets) & set(GROUPS[f"{f}-id"])) for f in ("hotpot", "bigmath")
            }
            family = max(overlap, key=overlap.get) if max(overlap.values()) > 0 else None
        if family is None:
            return list(datasets), []
        if f"{family}-id" not in GROUPS:
            raise ValueError(f"--family must be hotpot or bigmath; got {family!r}.")
        ids, oods = list(GROUPS[f"{family}-id"]), list(GROUPS[f"{family}-ood"])
    return [d for d in datasets if d in ids], [d for d in datasets if d in oods]


def _metric(m: dict, key: str) -> float:
    if key == "accuracy":
        return float(m["accuracy"])
    value = m["scorers"][m.get("primary_scorer", "verbalized")].get(key)
    return math.nan if value is None else float(value)


def _cell(values: list[float], key: str) -> tuple[float, float, str]:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan, "–"
    ms = M.mean_std_over_seeds(vals)
    scale, fmt = (100.0, "{:.1f}") if key in _PERCENT else (1.0, "{:.3f}")
    text = fmt.format(scale * ms.mean)
    if ms.n > 1:
        text += " ± " + fmt.format(scale * ms.std)
    return ms.mean, ms.std, text


def build_report(
    dirs: Sequence[str],
    output: str | Path,
    *,
    labels: Sequence[str] = (),
    family: str | None = None,
    id_sets=None,
    ood_sets=None,
) -> dict[str, Path]:
    """Write ``OUTPUT.md``, ``OUTPUT.csv`` and ``OUTPUT_risk_coverage.png``; return their paths.

    ``output`` is a file prefix; a folder (an existing one, or a path ending in ``/``, as in
    ``--output report/``) gets ``report.md``, ``report.csv``, ``report_risk_coverage.png`` inside.
    """
    groups = group_runs(dirs, labels)
    runs = {name: [Run.load(p) for p in paths] for name, paths in groups.items()}
    datasets = sorted({d for rs in runs.values() for r in rs for d in r.metrics})
    ids, oods = split_id_ood(datasets, family, id_sets, ood_sets)
    out = Path(output)
    if str(output).endswith(("/", os.sep)) or out.is_dir():
        out = out / "report"
    out.parent.mkdir(parents=True, exist_ok=True)
    csv_rows: list[dict] = []
    md: list[str] = [
        "# Evaluation report",
        "",
        "Methods: "
        + ", ".join(f"{n} ({len(rs)} run{'s' if len(rs) > 1 else ''})" for n, rs in runs.items())
        + "",
        "",
    ]

    scopes = [("ID", ids), ("OOD", oods)] if oods else [("ID" if ids != datasets else "All", ids)]
    md += ["## Averages (paper Tab. 1 layout)", ""]
    header = (
        "| Method | "
        + " | ".join(f"{s} {lab}" for s, _ in scopes for _, lab in TABLE_METRICS)
        + " |"
    )
    md += [header, "|" + " --- |" * (1 + len(scopes) * len(TABLE_METRICS))]
    for name, rs in runs.items():
        cells = []
        for scope, members in scopes:
            for key, _ in TABLE_METRICS:
                per_run = []
                for r in rs:
                    vals = [_metric(r.metrics[d], key) for d in members if d in r.metrics]
                    per_run.append(float(np.mean(vals)) if vals else math.nan)
                mean, std, text = _cell(per_run, key)
                cells.append(text)
                csv_rows.append(
                    dict(
                        method=name,
                        scope=scope,
                        dataset="",
                        metric=key,
                        mean=mean,
                        std=std,
                        runs=len(rs),
                    )
                )
        md.append(f"| {name} | " + " | ".join(cells) + " |")

    md += ["", "## Per dataset (paper Tabs. 8-11 layout)", ""]
    md += [
        "| Dataset | Method | n | Acc | " + " | ".join(lab for _, lab in TABLE_METRICS) + " |",
        "|" + " --- |" * (4 + len(TABLE_METRICS)),
    ]
    for d in datasets:
        scope = "ID" if d in ids else "OOD" if d in oods else ""
        for name, rs in runs.items():
            present = [r for r in rs if d in r.metrics]
            if not present:
                continue
            cells = []
            for key in ["accuracy"] + [k for k, _ in TABLE_METRICS]:
                mean, std, text = _cell([_metric(r.metrics[d], key) for r in present], key)
                cells.append(text)
                csv_rows.append(
                    dict(
                        method=name,
                        scope=scope,
                        dataset=d,
                        metric=key,
                        mean=mean,
                        std=std,
                        runs=len(present),
                    )
                )
            n = present[0].metrics[d]["n"]
            md.append(
                f"| {d}{' (' + scope + ')' if scope else ''} | {name} | {n} | "
                + " | ".join(cells)
                + " |"
            )

    paths = {
        "markdown": out.with_suffix(".md"),
        "csv": out.with_suffix(".csv"),
        "figure": out.with_name(out.stem + "_risk_coverage.png"),
    }
    md += ["", f"![risk-coverage]({paths['figure'].name})", ""]
    paths["markdown"].write_text("\n".join(md))
    with open(paths["csv"], "w", newline="") as fh:
        writer = csv.DictWriter(
            fh, fieldnames=["method", "scope", "dataset", "metric", "mean", "std", "runs"]
        )
        writer.writeheader()
        writer.writerows(csv_rows)
    _overlay(runs, datasets, paths["figure"])
    return paths


def _overlay(runs: dict[str, list[Run]], datasets: list[str], path: Path) -> None:
    curves: dict[str, dict[str, np.ndarray]] = {}
    for d in datasets:
        for name, rs in runs.items():
            per_run = []
            for r in rs:
                samples = r.path / d / "samples.jsonl"
                if d in r.metrics and samples.exists():
                    records = read_samples(samples)
                    conf, ok, _ = scorer_arrays(
                        records, r.metrics[d].get("primary_scorer", "verbalized")
                    )
                    per_run.append(curve_on_grid(conf, ok, COVERAGE_GRID))
            if per_run:
                curves.setdefault(d, {})[name] = np.mean(per_run, axis=0)
    if curves:
        plot_overlay_grid(curves, path, COVERAGE_GRID)
