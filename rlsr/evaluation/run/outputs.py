"""Where the commands write: one convention for ``rlsr evaluate``, ``deploy``, ``report`` and
``serve-report``.

Each command writes into the folder ``--output-dir DIR`` (created with its parents), under fixed
file names: ``evaluate`` its run layout (``rlsr.run.run_layout``), ``deploy``
``DIR/deployment.json`` and ``.md``, ``report`` ``DIR/report.md``, ``report.csv``,
``report_*.png`` (``--curves``: ``report_curves.png`` / ``.csv``; ``--pools``:
``report_pools.csv``), ``serve-report`` ``DIR/serve_report.json`` and ``.md``. The target
accuracy is ``--deployment-target`` and its risk level ``--deployment-delta`` in ``evaluate`` and
``deploy``.
"""

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
    """Where a command writes, from its parsed flags: ``DIR/name`` for ``--output-dir DIR`` (a
    file there is refused now; the writer creates the folder with its parents once its inputs
    are read, so a failed command leaves no empty output), else None, or a one-line
    ``ValueError`` when ``required``."""
    if args.output_dir is None:
        if required:
            raise ValueError("--output-dir DIR is required: the folder to write into.")
        return None
    folder = Path(args.output_dir).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--output-dir {args.output_dir} is a file; give a folder.")
    return folder / name


def add_training_rows_flag(parser) -> None:
    """``--allow-train-split`` (``TRAINING_ROWS_FLAG``): ``rlsr deploy``'s and ``rlsr evaluate
    --deployment-target``'s permission to use the adapter's training split."""
    parser.add_argument(TRAINING_ROWS_FLAG, action="store_true", help=ALLOW_TRAIN_HELP)


def add_output_dir(parser, writes: str, *, detail: str = "") -> None:
    """The output convention of every command that writes files: ``--output-dir DIR``, a folder
    created as needed, holding ``writes`` (e.g. ``DIR/deployment.json and .md``; ``detail``
    adds to the help only)."""
    parser.add_argument(
        "--output-dir", metavar="DIR", help=f"folder, created as needed: writes {writes}{detail}"
    )
