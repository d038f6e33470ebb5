"""Where the commands write: ``--output-dir DIR`` (created with its parents) holding fixed file
names (``rlsr.run.run_layout``, ``REPORT_PREFIX``, ``SERVE_REPORT_FILE``, deployment.json)."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "REPORT_PREFIX",
    "SERVE_REPORT_FILE",
    "TRAINING_ROWS_FLAG",
    "ALLOW_TRAIN_HELP",
    "output_prefix",
    "add_output_dir",
    "add_training_rows_flag",
]

# ``rlsr report --output-dir DIR`` writes DIR/report.md, DIR/report_curves.png, ...
REPORT_PREFIX = "report"
# ``rlsr serve-report --output-dir DIR`` writes DIR/serve_report.json and .md
SERVE_REPORT_FILE = "serve_report.json"
# ``rlsr deploy`` and ``rlsr evaluate --deployment-target``: a threshold on the adapter's training
# split is refused unless this flag is given
TRAINING_ROWS_FLAG = "--allow-train-split"
ALLOW_TRAIN_HELP = (
    "allow a threshold chosen on, or test rows from, the split the adapter trained on (its run's "
    "config.yaml); every output marks it NOT HELD OUT"
)


def output_prefix(args, name: str, *, required: bool) -> Path | None:
    """``DIR/name`` for ``--output-dir DIR`` (a file there refused; the writer creates the
    folder once its inputs are read), else None, or a ``ValueError`` when ``required``."""
    if args.output_dir is None:
        if required:
            raise ValueError("--output-dir DIR is required: the folder to write into.")
        return None
    folder = Path(args.output_dir).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--output-dir {args.output_dir} is a file; give a folder.")
    return folder / name


def add_training_rows_flag(parser) -> None:
    parser.add_argument(TRAINING_ROWS_FLAG, action="store_true", help=ALLOW_TRAIN_HELP)


def add_output_dir(parser, writes: str, *, detail: str = "") -> None:
    parser.add_argument(
        "--output-dir", metavar="DIR", help=f"folder, created as needed: writes {writes}{detail}"
    )
