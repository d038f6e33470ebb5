"""Where the commands write: one convention for ``rlsr evaluate``, ``deploy``, ``report`` and
``serve-report``.

Each command writes into the folder ``--output-dir DIR`` (created with its parents), under fixed
file names: ``evaluate`` its run layout (``rlsr.run_layout``), ``deploy``
``DIR/deployment.json`` and ``.md``, ``report`` ``DIR/report.md``, ``report.csv``,
``report_*.png`` (``--curves``: ``report_curves.png`` / ``.csv``; ``--pools``:
``report_pools.csv``), ``serve-report`` ``DIR/serve_report.json`` and ``.md``. The target
accuracy is ``--deployment-target`` and its risk level ``--deployment-delta`` in ``evaluate`` and
``deploy``.

The old spellings keep working with a one-line note on stderr naming the new one
(``deprecated_flag``): ``deploy --output PREFIX`` (PREFIX.json, PREFIX.md), ``report --output
PREFIX`` (PREFIX.md, PREFIX_curves.png, ...), ``serve-report --output FILE``, ``deploy --target``,
``deploy --delta``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = [
    "REPORT_PREFIX",
    "SERVE_REPORT_FILE",
    "TRAINING_ROWS_FLAG",
    "ALLOW_TRAIN_HELP",
    "output_prefix",
    "deprecated_flag",
]

# ``rlsr report --output-dir DIR`` writes DIR/report.md, DIR/report_curves.png, ...
REPORT_PREFIX = "report"
# ``rlsr serve-report --output-dir DIR`` writes DIR/serve_report.json and .md
SERVE_REPORT_FILE = "serve_report.json"
# ``rlsr deploy`` and ``rlsr evaluate --deployment-target``: a threshold on the adapter's training
# split is refused unless this flag is given
TRAINING_ROWS_FLAG = "--allow-train-split"
ALLOW_TRAIN_HELP = (
    "allow a threshold chosen on the split the adapter trained on (its run's config.yaml); every "
    "output marks it NOT HELD OUT"
)


def output_prefix(args, name: str, *, required: bool) -> Path | str | None:
    """Where a command writes, from its parsed flags: ``DIR/name`` for ``--output-dir DIR`` (a
    file there is refused now; the writer creates the folder with its parents once its inputs
    are read, so a failed command leaves no empty output), the old ``--output PREFIX`` as given
    (``args.output_prefix``), else None, or a one-line ``ValueError`` when ``required``."""
    if args.output_dir is not None and args.output_prefix is not None:
        raise ValueError("give --output-dir DIR only (--output is its old spelling).")
    if args.output_dir is not None:
        folder = Path(args.output_dir).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--output-dir {args.output_dir} is a file; give a folder.")
        return folder / name
    if args.output_prefix is None and required:
        raise ValueError("--output-dir DIR is required: the folder to write into.")
    return args.output_prefix


class _Deprecated(argparse.Action):
    """Stores the value like the new flag and says once on stderr what to write instead."""

    def __init__(self, option_strings, dest, *, instead: str, **kwargs):
        self.instead = instead
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        command = parser.prog.split()[-1] if parser.prog else "rlsr"
        if not command.endswith(".py"):  # a script (slurm/sweep.py) names itself
            command = f"rlsr {command}"
        print(f"{command}: note: {option_string} is deprecated; use {self.instead}.",
              file=sys.stderr)  # fmt: skip
        setattr(namespace, self.dest, values)


def deprecated_flag(parser, flag: str, *, instead: str, dest: str, **kwargs) -> None:
    """Add the old spelling ``flag`` to ``parser``, hidden from ``--help``: its value lands in
    ``dest`` and its use prints ``rlsr CMD: note: FLAG is deprecated; use INSTEAD.`` (a script's
    parser, ``prog`` ending in ``.py``: ``slurm/sweep.py: note: ...``)."""
    parser.add_argument(
        flag, dest=dest, action=_Deprecated, instead=instead, help=argparse.SUPPRESS, **kwargs
    )


def add_output_dir(parser, writes: str, *, detail: str = "", old_metavar: str = "PREFIX") -> None:
    """The output convention of every command that writes files: ``--output-dir DIR``, a folder
    created as needed, holding ``writes`` (e.g. ``DIR/deployment.json and .md``; ``detail``
    adds to the help only); the old ``--output`` spelling kept hidden (``dest="output_prefix"``)
    with its deprecation note."""
    parser.add_argument(
        "--output-dir", metavar="DIR", help=f"folder, created as needed: writes {writes}{detail}"
    )
    deprecated_flag(parser, "--output", dest="output_prefix", metavar=old_metavar,
                    instead=f"--output-dir DIR (writes {writes})")  # fmt: skip
