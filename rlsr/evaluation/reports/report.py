"""``rlsr report``: compare evaluation directories in the layout of the RLSR paper.

* Tab. 1: per method, AURC / ECE / Acc@10 / Acc@25 / Acc@50 averaged over the in-domain (ID)
  and the out-of-domain (OOD) datasets;
* Tabs. 8-11: the same metrics per dataset;
* Tab. 5: with several runs (seeds) per method every cell is mean ± std over runs (std: ddof 1,
  ``rlsr.metrics.selective.mean_std_over_seeds``); ID/OOD averages are taken per run first;
* Fig. 5-7: one panel per dataset with one risk-coverage curve per method (mean over runs);
* Tab. 2: the controlled confidence gap on the questions every method answers correctly (resp.
  incorrectly), per ID/OOD scope and per dataset (``rlsr.evaluation.reports.gap``);
* Fig. 3: per dataset, the confidence densities of each method's correct and incorrect answers;
* calibration and selective risk per run (``reliability``) and a reliability diagram per run.

Confidences are each run's primary scorer, missing = 0.0; a dataset without any confidence shows
n/a (``rlsr.evaluation.run.summary.no_confidence``). Tab. 2 and Fig. 3 need samples.jsonl.

Methods: ``--label NAME=DIR1,DIR2`` names runs explicitly; other directories are grouped by
their basename with a trailing seed tag removed (``rlsr-seed1`` and ``rlsr_s2`` -> ``rlsr``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlsr.data import GROUPS, resolve_tasks
from rlsr.evaluation.reports.gap import (
    ControlledGap,
    QuestionKey,
    align_runs,
    controlled_confidence_gap,
)
from rlsr.evaluation.reports.plots import (
    COVERAGE_GRID,
    curve_on_grid,
    plot_confidence_densities,
    plot_overlay_grid,
    plot_reliability_diagrams,
)
from rlsr.evaluation.reports.reliability import (
    CalibrationMetric,
    CalibrationRow,
    calibration_metrics,
    calibration_rows,
    reliability_panels,
    scored_runs,
)
from rlsr.evaluation.reports.report_settings import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TARGET_COVERAGES,
    DEFAULT_TARGET_RISKS,
)
from rlsr.evaluation.run.samples_io import read_samples
from rlsr.evaluation.run.summary import (
    CONFIDENCE_METRICS,
    NOT_AVAILABLE,
    no_confidence,
    scorer_arrays,
    scorer_value,
)
from rlsr.metrics import selective as M
from rlsr.run.run_layout import METRICS_FILE, SAMPLES_FILE

__all__ = [
    "TABLE_METRICS",
    "Run",
    "method_from_dirname",
    "group_runs",
    "split_id_ood",
    "Cell",
    "DatasetRow",
    "GapRow",
    "DensityRow",
    "ReportRows",
    "report_rows",
    "csv_rows",
    "render_markdown",
    "build_report",
    "controlled_gap_rows",
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
    _samples: dict[str, list[dict]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: str | Path) -> Run:
        root = Path(path)
        found = {m.parent.name: json.loads(m.read_text()) for m in root.glob(f"*/{METRICS_FILE}")}
        if not found:
            raise ValueError(
                f"{root}: no <dataset>/{METRICS_FILE} inside; is it an `rlsr evaluate` output dir?"
            )
        return cls(root, dict(sorted(found.items())))

    def samples(self, dataset: str) -> list[dict]:
        """Records of ``<dataset>/samples.jsonl`` (read once; [] when absent)."""
        if dataset not in self._samples:
            path = self.path / dataset / SAMPLES_FILE
            self._samples[dataset] = read_samples(path) if dataset in self.metrics else []
        return self._samples[dataset]

    def scores(self, dataset: str) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """(confidence, correct, records) of the dataset's primary scorer (missing -> 0.0)."""
        records = self.samples(dataset)
        scorer = self.metrics.get(dataset, {}).get("primary_scorer", "verbalized")
        conf, ok, _ = scorer_arrays(records, scorer)
        return conf, ok, records

    def answers(self, dataset: str) -> dict[QuestionKey, tuple[float, bool]]:
        """(dataset, question id) -> (confidence, correct); the join key of Tab. 2."""
        conf, ok, records = self.scores(dataset)
        out: dict[QuestionKey, tuple[float, bool]] = {}
        for rec, c, y in zip(records, conf, ok, strict=True):
            key = (dataset, str(rec["id"]))
            if key in out:
                raise ValueError(
                    f"{self.path / dataset / SAMPLES_FILE}: question id {rec['id']!r} appears "
                    "twice; one evaluation directory holds one sample per question. Give each "
                    "seed its own --output-dir."
                )
            out[key] = (float(c), bool(y))
        return out


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
        ids = resolve_tasks(id_sets) if id_sets else []
        oods = resolve_tasks(ood_sets) if ood_sets else []
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


def _metric(m: dict, key: str) -> float | None:
    """``key`` of ``m``'s primary scorer: None when n/a (no confidence at all), NaN when
    otherwise undefined."""
    if key == "accuracy":
        return float(m["accuracy"])
    if key in CONFIDENCE_METRICS and no_confidence(m):
        return None
    value = scorer_value(m, key)
    return math.nan if value is None else value


@dataclass(frozen=True)
class Cell:
    """One metric of one method in one scope or dataset: mean and std (ddof 1) over its runs
    (``values``: how many had a value); a row of ``OUTPUT.csv``."""

    method: str
    scope: str
    dataset: str
    metric: str
    mean: float
    std: float
    runs: int
    values: int
    undefined: int = 0  # runs whose value is n/a: no confidence at all (summary.no_confidence)


@dataclass(frozen=True)
class DatasetRow:
    """One line of the per-dataset table: a method on a dataset, accuracy then TABLE_METRICS."""

    dataset: str
    scope: str  # "ID", "OOD" or ""
    method: str
    n: int  # questions (the first run's metrics.json)
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class GapRow:
    """One line of Tab. 2: a method on a question set (an ID/OOD scope or one dataset)."""

    questions: str  # the scope's or the dataset's name
    is_dataset: bool
    method: str
    runs: int
    n_correct: int
    n_incorrect: int
    n_questions: int
    dropped: int
    mean_correct: float
    mean_incorrect: float
    gap: float


@dataclass(frozen=True)
class DensityRow:
    """One line of the Fig. 3 table: a method's pooled samples on a dataset."""

    dataset: str
    method: str
    runs: int
    n_correct: int
    n_incorrect: int
    mean_correct: float
    mean_incorrect: float


@dataclass
class ReportRows:
    """Everything ``rlsr report`` shows, computed, before any rendering."""

    runs: dict[str, list[Run]]
    datasets: list[str]
    scopes: list[tuple[str, list[str]]]  # Tab. 1 column groups: (name, datasets)
    averages: list[tuple[str, list[Cell]]]  # per method: scope x TABLE_METRICS cells
    per_dataset: list[DatasetRow]
    gap_methods: list[str]
    gap: list[GapRow]
    panels: dict  # Fig. 3 densities: panels[dataset][method] = (confidence, correct)
    density: list[DensityRow]
    calibration_metrics: list[CalibrationMetric] = field(default_factory=list)
    calibration: list[CalibrationRow] = field(default_factory=list)  # per run and dataset


def _cell(values: list[float | None], key: str, **where) -> Cell:
    """Mean and std of the runs' ``values`` without None (n/a, counted) and NaN."""
    undefined = sum(v is None for v in values)
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return Cell(**where, metric=key, mean=math.nan, std=math.nan, values=0,
                    undefined=undefined)  # fmt: skip
    ms = M.mean_std_over_seeds(vals)
    return Cell(**where, metric=key, mean=ms.mean, std=ms.std, values=ms.n, undefined=undefined)


def report_rows(
    dirs: Sequence[str],
    *,
    labels: Sequence[str] = (),
    family: str | None = None,
    id_sets=None,
    ood_sets=None,
    gap_methods: Sequence[str] | None = None,
    target_risks: Sequence[float] = DEFAULT_TARGET_RISKS,
    target_coverages: Sequence[float] = DEFAULT_TARGET_COVERAGES,
    bootstrap: int = DEFAULT_BOOTSTRAP,
) -> ReportRows:
    """The report's tables as plain data; ``gap_methods``: the methods Tab. 2 holds accuracy
    fixed across (default: all); ``bootstrap``: resamples of the calibration CIs (0: none)."""
    groups = group_runs(dirs, labels)
    runs = {name: [Run.load(p) for p in paths] for name, paths in groups.items()}
    datasets = sorted({d for rs in runs.values() for r in rs for d in r.metrics})
    ids, oods = split_id_ood(datasets, family, id_sets, ood_sets)
    scopes = [("ID", ids), ("OOD", oods)] if oods else [("ID" if ids != datasets else "All", ids)]
    averages = []
    for name, rs in runs.items():
        cells = []
        for scope, members in scopes:
            for key, _ in TABLE_METRICS:
                per_run = []
                for r in rs:
                    vals = [_metric(r.metrics[d], key) for d in members if d in r.metrics]
                    # a dataset without confidence makes the run's average n/a (None)
                    per_run.append(None if None in vals else np.mean(vals) if vals else math.nan)
                cells.append(_cell(per_run, key, method=name, scope=scope, dataset="",
                                   runs=len(rs)))  # fmt: skip
        averages.append((name, cells))
    per_dataset = []
    for d in datasets:
        scope = "ID" if d in ids else "OOD" if d in oods else ""
        for name, rs in runs.items():
            present = [r for r in rs if d in r.metrics]
            if not present:
                continue
            cells = tuple(
                _cell([_metric(r.metrics[d], key) for r in present], key, method=name,
                      scope=scope, dataset=d, runs=len(present))
                for key in ["accuracy"] + [k for k, _ in TABLE_METRICS]
            )  # fmt: skip
            per_dataset.append(DatasetRow(d, scope, name, present[0].metrics[d]["n"], cells))
    names = _gap_methods(runs, gap_methods)
    gap_scopes = [(scope, members) for scope, members in scopes if members]
    gap_scopes += [(d, [d]) for d in datasets]
    panels = _density_panels(runs, datasets)
    calibration = calibration_metrics(target_risks, target_coverages)
    return ReportRows(
        runs=runs, datasets=datasets, scopes=scopes, averages=averages, per_dataset=per_dataset,
        gap_methods=names, gap=_gap_rows(runs, names, gap_scopes), panels=panels,
        density=_density_rows(runs, panels), calibration_metrics=calibration.columns,
        calibration=calibration_rows(runs, datasets, calibration, n_resamples=bootstrap),
    )  # fmt: skip


def _gap_methods(runs: dict[str, list[Run]], names: Sequence[str] | None) -> list[str]:
    if not names:
        return list(runs)
    unknown = [n for n in names if n not in runs]
    if unknown:
        raise ValueError(
            f"--gap-methods {','.join(names)}: no method named {unknown[0]!r}; the report's methods "
            f"are {', '.join(runs)}."
        )
    return list(names)


def controlled_gap_rows(
    runs: dict[str, list[Run]], methods: Sequence[str], datasets: Sequence[str]
) -> tuple[ControlledGap, int] | None:
    """Tab. 2 over the questions of ``datasets`` (pooled): the gap and the number of questions
    some run lacks; None when a method has no samples there."""
    per_method = {}
    for m in methods:
        tables = []
        for r in runs[m]:
            merged: dict[QuestionKey, tuple[float, bool]] = {}
            for d in datasets:
                if d in r.metrics:
                    merged.update(r.answers(d))
            if merged:
                tables.append(merged)
        if not tables:
            return None
        per_method[m] = tables
    aligned = align_runs(per_method)
    return controlled_confidence_gap(aligned.confidence, aligned.correct), aligned.n_dropped


def _gap_rows(runs, methods, scopes) -> list[GapRow]:
    rows = []
    for scope, members in scopes:
        found = controlled_gap_rows(runs, methods, members)
        if found is None:
            continue
        gap, dropped = found
        for i, m in enumerate(gap.methods):
            rows.append(GapRow(
                questions=scope, is_dataset=len(members) == 1 and scope == members[0], method=m,
                runs=len(runs[m]), n_correct=gap.n_correct, n_incorrect=gap.n_incorrect,
                n_questions=gap.n_questions, dropped=dropped, mean_correct=gap.mean_correct[i],
                mean_incorrect=gap.mean_incorrect[i], gap=gap.gap[i],
            ))  # fmt: skip
    return rows


def _per_run(runs: dict[str, list[Run]], datasets: list[str], of) -> dict:
    """``out[dataset][method]``: ``of(confidence, correct)`` of each run with samples."""
    out: dict[str, dict[str, list]] = {}
    for d, name, _, conf, ok in scored_runs(runs, datasets):
        out.setdefault(d, {}).setdefault(name, []).append(of(conf, ok))
    return out


def _density_panels(runs: dict[str, list[Run]], datasets: list[str]) -> dict:
    """``panels[dataset][method] = (confidence, correct)`` pooled over the method's runs."""
    parts = _per_run(runs, datasets, lambda conf, ok: (conf, ok))
    return {
        d: {name: tuple(map(np.concatenate, zip(*ps, strict=True))) for name, ps in methods.items()}
        for d, methods in parts.items()
    }


def _density_rows(runs: dict[str, list[Run]], panels: dict) -> list[DensityRow]:
    rows = []
    for d, methods in panels.items():
        for name, (conf, ok) in methods.items():
            hi = float(conf[ok].mean()) if ok.any() else math.nan
            lo = float(conf[~ok].mean()) if (~ok).any() else math.nan
            n_runs = sum(1 for r in runs[name] if d in r.metrics and r.samples(d))
            rows.append(DensityRow(d, name, n_runs, int(ok.sum()), int((~ok).sum()), hi, lo))
    return rows


_CELL_FIELDS = ["method", "scope", "dataset", "metric", "mean", "std", "runs"]
# run, ci_low, ci_high: the calibration section's rows (one run each); empty on the other rows.
CSV_FIELDS = [*_CELL_FIELDS, "run", "ci_low", "ci_high"]


def _num(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3f}"


def _text(cell: Cell) -> str:
    """``mean`` or ``mean ± std`` (percent for accuracies); ``NOT_AVAILABLE`` when no run gave a
    confidence, with how many did not beside the others' value; "–" without a value."""
    if cell.values == 0:
        return NOT_AVAILABLE if cell.undefined else "–"
    scale, fmt = (100.0, "{:.1f}") if cell.metric in _PERCENT else (1.0, "{:.3f}")
    text = fmt.format(scale * cell.mean)
    if cell.values > 1:
        text += " ± " + fmt.format(scale * cell.std)
    if cell.undefined:
        text += f" ({cell.undefined} {NOT_AVAILABLE})"
    return text


def csv_rows(rows: ReportRows) -> list[dict]:
    """``OUTPUT.csv``'s rows (``CSV_FIELDS``): Tab. 1 cells, per-dataset cells, Tab. 2, Fig. 3."""
    out = [{k: getattr(c, k) for k in _CELL_FIELDS} for _, cells in rows.averages for c in cells]
    out += [{k: getattr(c, k) for k in _CELL_FIELDS} for r in rows.per_dataset for c in r.cells]
    for g in rows.gap:
        for key in ("conf_correct", "conf_incorrect", "gap", "n_correct", "n_incorrect"):
            value = getattr(g, key.replace("conf_", "mean_"))
            out.append(dict(method=g.method, scope="" if g.is_dataset else g.questions,
                            dataset=g.questions if g.is_dataset else "", metric=f"controlled_{key}",
                            mean=float(value), std=math.nan, runs=g.runs))  # fmt: skip
    out += [dict(method=r.method, scope="", dataset=r.dataset, metric="confidence_gap_pooled",
                 mean=r.mean_correct - r.mean_incorrect, std=math.nan, runs=r.runs)
            for r in rows.density]  # fmt: skip
    return out + _calibration_csv(rows)


def _calibration_csv(rows: ReportRows) -> list[dict]:
    """One row per run, dataset and calibration metric: estimate, bootstrap CI, run folder."""
    return [
        dict(method=r.method, scope="", dataset=r.dataset, metric=m.key, mean=v.estimate,
             std=math.nan, runs=1, run=r.run, ci_low=v.low, ci_high=v.high)
        for r in rows.calibration
        for m, v in zip(rows.calibration_metrics, r.values, strict=True)
    ]  # fmt: skip


def render_markdown(
    rows: ReportRows, figure: str, density_figure: str, reliability_figure: str = ""
) -> str:
    """``OUTPUT.md``: the tables of ``rows``, linking the three figures by file name."""
    runs, scopes = rows.runs, rows.scopes
    md: list[str] = [
        "# Evaluation report",
        "",
        "Methods: "
        + ", ".join(f"{n} ({len(rs)} run{'s' if len(rs) > 1 else ''})" for n, rs in runs.items())
        + "",
        "",
    ]
    md += ["## Averages (paper Tab. 1 layout)", ""]
    md += _md_table(
        ["Method", *(f"{s} {lab}" for s, _ in scopes for _, lab in TABLE_METRICS)],
        ([name, *map(_text, cells)] for name, cells in rows.averages),
    )
    md += ["", "## Per dataset (paper Tabs. 8-11 layout)", ""]
    md += _md_table(
        ["Dataset", "Method", "n", "Acc", *(lab for _, lab in TABLE_METRICS)],
        (
            [f"{r.dataset}{' (' + r.scope + ')' if r.scope else ''}", r.method, r.n,
             *map(_text, r.cells)]
            for r in rows.per_dataset
        ),
    )  # fmt: skip
    md += ["", f"![risk-coverage]({figure})", ""]
    md += _tab2_markdown(rows)
    if rows.panels:
        md += _fig3_markdown(rows, density_figure)
    if rows.calibration:
        md += _calibration_markdown(rows, reliability_figure)
    return "\n".join(md)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(map(str, cells)) + " |" for cells in rows]


def _ci_text(value: M.BootstrapCI) -> str:
    """``estimate [low, high]``, or the estimate alone."""
    text = _num(value.estimate)
    if math.isnan(value.low) or math.isnan(value.high):
        return text
    return f"{text} [{_num(value.low)}, {_num(value.high)}]"


def _calibration_markdown(rows: ReportRows, figure: str) -> list[str]:
    metrics = rows.calibration_metrics
    with_ci = any(not math.isnan(v.low) for r in rows.calibration for v in r.values)
    cells = (
        "estimate [95 % percentile bootstrap CI over the samples]"
        if with_ci
        else "estimate (no CIs: --bootstrap 0)"
    )
    md = [
        "## Calibration and selective risk (per run)",
        "",
        f"Each run's samples on its own, not averaged over runs: {cells}. "
        "ECE, MCE, RMS-CE: 10 equal-width bins, those of the ECE "
        "above; equal-mass: bin edges at the deciles of the confidences. Cov@risk≤r: the largest "
        "share of samples a confidence threshold keeps with an error rate ≤ r (0 when none "
        "does); Risk@cov c: the error rate of the smallest threshold selection covering ≥ c. A "
        "threshold keeps or drops tied confidences together (docs/metrics.md).",
        "",
        *_md_table(
            ["Dataset", "Method", "Run", "n", *(m.label for m in metrics)],
            ([r.dataset, r.method, r.run, r.n, *map(_ci_text, r.values)] for r in rows.calibration),
        ),
    ]
    if figure:
        md += ["", f"![reliability diagrams]({figure})"]
    return md + [""]


def _tab2_markdown(rows: ReportRows) -> list[str]:
    if not rows.gap:  # no samples.jsonl anywhere: no section
        return []
    md = [
        "## Controlled confidence gap (paper Tab. 2 layout)",
        "",
        f"Methods held to the same questions: {', '.join(rows.gap_methods)}. S+ / S−: questions "
        "that every run of every one of them answers correctly / incorrectly; E[c|·]: a method's "
        "mean confidence on S+ / S− (rlsr.evaluation.reports.gap.controlled_confidence_gap). `shared`: "
        "questions present in every run; `dropped`: present in some runs only.",
        "",
        *_md_table(
            ["Questions", "Method", "S+", "S−", "shared", "dropped", "E[c\\|correct]",
             "E[c\\|incorrect]", "Δc↑"],
            (
                [g.questions, g.method, g.n_correct, g.n_incorrect, g.n_questions, g.dropped,
                 _num(g.mean_correct), _num(g.mean_incorrect), _num(g.gap)]
                for g in rows.gap
            ),
        ),
    ]  # fmt: skip
    return md + [""]


def _fig3_markdown(rows: ReportRows, figure: str) -> list[str]:
    md = [
        "## Confidence of correct vs incorrect answers (paper Fig. 3)",
        "",
        "All samples of each method (pooled over its runs), not the controlled subset of Tab. 2. "
        "Δc = E[c|correct] − E[c|incorrect]; densities: Gaussian KDE, bandwidth 0.15 (kernel std "
        "in confidence units), solid = correct, dotted = incorrect.",
        "",
        *_md_table(
            ["Dataset", "Method", "n correct", "n incorrect", "E[c\\|correct]",
             "E[c\\|incorrect]", "Δc"],
            (
                [r.dataset, r.method, r.n_correct, r.n_incorrect, _num(r.mean_correct),
                 _num(r.mean_incorrect), _num(r.mean_correct - r.mean_incorrect)]
                for r in rows.density
            ),
        ),
    ]  # fmt: skip
    return md + ["", f"![confidence densities]({figure})", ""]


def build_report(dirs: Sequence[str], output: str | Path, **options) -> dict[str, Path]:
    """Write ``OUTPUT.md``, ``OUTPUT.csv``, ``OUTPUT_risk_coverage.png``,
    ``OUTPUT_confidence_density.png`` and ``OUTPUT_reliability.png`` of ``report_rows(dirs,
    **options)``; return their paths. ``output``: a file prefix, or a folder (existing, or
    ending in ``/``) that gets ``report.*`` inside."""
    rows = report_rows(dirs, **options)
    out = Path(output)
    if str(output).endswith(("/", os.sep)) or out.is_dir():
        out = out / "report"
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out.with_suffix(".md"),
        "csv": out.with_suffix(".csv"),
        "figure": out.with_name(out.stem + "_risk_coverage.png"),
        "density": out.with_name(out.stem + "_confidence_density.png"),
        "reliability": out.with_name(out.stem + "_reliability.png"),
    }
    paths["markdown"].write_text(render_markdown(
        rows, paths["figure"].name, paths["density"].name, paths["reliability"].name
    ))  # fmt: skip
    with open(paths["csv"], "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(csv_rows(rows))
    _overlay(rows.runs, rows.datasets, paths["figure"])
    if rows.panels:
        plot_confidence_densities(rows.panels, paths["density"])
    reliability = reliability_panels(rows.runs, rows.datasets)
    if reliability:
        plot_reliability_diagrams(reliability, paths["reliability"])
    return paths


def _overlay(runs: dict[str, list[Run]], datasets: list[str], path: Path) -> None:
    """Fig. 5-7: per dataset and method, the risk on ``COVERAGE_GRID`` averaged over runs."""
    curves = _per_run(runs, datasets, curve_on_grid)
    if curves:
        plot_overlay_grid(
            {
                d: {name: np.mean(per_run, axis=0) for name, per_run in m.items()}
                for d, m in curves.items()
            },
            path,
            COVERAGE_GRID,
        )
