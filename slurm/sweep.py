#!/usr/bin/env python3
"""Submit the paper's comparison: recipes x methods x seeds training jobs, each followed by an
evaluation job array that starts only if training succeeded (``--dependency=afterok``).

    slurm/sweep.py --recipes hotpot,bigmath --methods rlsr,rlcr,rlvr --seeds 0,1,2 \\
        --partition gpu --account myproj --dry-run
    slurm/sweep.py --recipes hotpot --seeds 0 -- grpo.save_steps=10     # extra Hydra overrides
    slurm/sweep.py --recipes tiny --tasks-dir tasks --eval-tasks caps -- data.task=caps

Every training run writes to the output_dir its config resolves to (made absolute and passed
explicitly, so a requeued job resumes there); its evaluation array runs slurm/evaluate.slurm on
the final adapter in that folder, one array task per evaluated task or task group (default
<recipe>-id, <recipe>-ood).
``--dry-run`` prints every job, its dependency and its exact sbatch command, and submits nothing.
Otherwise it asks sbatch whether the cluster takes the jobs (``--test-only``: partition, account,
GPUs) before submitting any, prints one line per job with the Slurm job id and records the jobs in
logs/sweep-<first job id>.json; ``--status RECORD`` then reports each job's state, and for a failed
training run the reason and the tail of its log. ``--gpus-per-node 0`` trains on CPU nodes
(``--eval-gpus-per-node 0``: evaluates there). Run it from anywhere; sbatch runs in the
repository root (logs/ is created there).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"  # scripts/install.sh's environment
_REEXEC = "RLSR_SWEEP_REEXEC"  # set for the one re-run in VENV_PYTHON, so it never loops


def run_in_rlsr_environment() -> None:
    """Continue only in a python that imports rlsr: this one, else the repository's .venv run in
    its place (same arguments); else stop with one line naming how to activate one."""
    try:
        import hydra  # noqa: F401

        import rlsr  # noqa: F401
    except ImportError:
        pass
    else:
        return
    if VENV_PYTHON.exists() and not os.environ.get(_REEXEC):
        os.environ[_REEXEC] = "1"
        # this repository's rlsr, whichever one the environment has installed
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])
    raise SystemExit(
        f"sweep: this python ({sys.executable}) cannot import rlsr, and {VENV_PYTHON} "
        f"{'cannot either' if VENV_PYTHON.exists() else 'does not exist'}; activate rlsr's "
        f"environment (source {ROOT / '.venv/bin/activate'}, built by bash scripts/install.sh) "
        "and run the sweep again"
    )


run_in_rlsr_environment()

from rlsr.config import MAX_SEED  # noqa: E402

sys.path.insert(0, str(ROOT / "slurm"))

import sweep_status  # noqa: E402
from needs_judge import items_needing_judge, load_registry  # noqa: E402  (sibling scripts, not a package)
from resolve_config import resolve  # noqa: E402

# The method files of recipes/method/ (rlsr, rlcr, rlvr, sft and the named variants).
METHODS = tuple(sorted(p.stem for p in (ROOT / "recipes" / "method").glob("*.yaml")))


@dataclass
class Job:
    """One sbatch submission. ``after`` indexes the job it waits for (afterok)."""

    kind: str  # "train" | "evaluate"
    name: str
    sbatch_args: list[str]
    script: str
    script_args: list[str]
    after: int | None = None
    job_id: str | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def command(self, dependency_id: str | None) -> list[str]:
        """The sbatch command line; ``dependency_id`` is the id of the job it waits for."""
        cmd = ["sbatch", "--parsable", f"--job-name={self.name}", *self.sbatch_args]
        if dependency_id is not None:
            cmd.append(f"--dependency=afterok:{dependency_id}")
        return [*cmd, self.script, *self.script_args]


def comma_list(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, e.g. 0,1,2")
    return items


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="slurm/sweep.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--recipes", type=comma_list, default=["hotpot", "bigmath"])
    parser.add_argument("--methods", type=comma_list, default=list(METHODS))
    parser.add_argument("--seeds", type=comma_list, default=["0", "1", "2"])
    parser.add_argument(
        "--nodes", type=int, default=1, help="nodes per training run (>1: the last one serves vLLM)"
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=4,
        help="GPUs per training node (0: CPU nodes, a CPU recipe such as tiny)",
    )
    parser.add_argument(
        "--time",
        default=None,
        help="training time limit (sbatch --time); default the script's 24:00:00",
    )
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument("--qos", default=None)
    parser.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra sbatch option for every job, e.g. --sbatch-arg=--constraint=h100 (repeatable)",
    )
    parser.add_argument(
        "--eval-tasks",
        type=comma_list,
        default=None,
        metavar="NAMES",
        help="the tasks (names or groups) each trained checkpoint is evaluated on, one array task "
        "each (default <recipe>-id,<recipe>-ood)",
    )
    parser.add_argument(
        "--eval-gpus-per-node",
        type=int,
        default=2,
        help="evaluated model + LLM judge (0: CPU nodes, transformers generation, no judge)",
    )
    parser.add_argument(
        "--eval-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `rlsr evaluate` flag for every evaluation, e.g. --eval-arg=--limit=100 "
        "(repeatable)",
    )
    parser.add_argument("--eval-time", default=None, help="evaluation time limit per array task")
    parser.add_argument("--evals-dir", default="evals")
    parser.add_argument(
        "--runs-dir",
        default=None,
        metavar="DIR",
        help="put each run's folder (its config's output_dir name) in DIR instead of where the "
        "config puts it (runs/)",
    )
    parser.add_argument(
        "--protocol-variant",
        default="paper",
        metavar="NAME",
        help="the recipe's named protocol variant the evaluations use (heldout.variants; default "
        "paper: the paper tables' 4,096-token budget, where the recipe declares it; none: the "
        "held-out protocol itself)",
    )
    parser.add_argument(
        "--tasks-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="folder of task files (or one file; repeatable): your own tasks, by name in "
        "data.task and --eval-tasks; every job gets it as $RLSR_TASKS_PATH (docs/tasks.md)",
    )
    parser.add_argument("--no-eval", action="store_true", help="submit training jobs only")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs, submit nothing")
    parser.add_argument(
        "--status",
        metavar="RECORD",
        default=None,
        help="report the jobs of a submitted sweep (its logs/sweep-<id>.json): state, and for a "
        "failed run why, with the tail of its log; exits 1 when a job failed",
    )
    parser.add_argument(
        "overrides", nargs="*", help="extra Hydra overrides for every run (after --)"
    )
    args = parser.parse_args(argv)
    if args.status is not None:
        return args
    for method in args.methods:
        if method not in METHODS:
            parser.error(f"--methods: unknown method {method!r}; choose from {', '.join(METHODS)}")
    for seed in args.seeds:
        if not seed.isdigit() or int(seed) > MAX_SEED:
            parser.error(f"--seeds: {seed!r} is not an integer in 0..{MAX_SEED} (numpy's seeds)")
    for flag_name, values, key in (("--recipes", args.recipes, str), ("--methods", args.methods, str),
                                   ("--seeds", args.seeds, int)):  # fmt: skip
        seen = {}
        for value in values:
            if key(value) in seen:
                parser.error(
                    f"{flag_name}: {seen[key(value)]!r} and {value!r} name the same run twice "
                    "(both would train into one output_dir); give each once"
                )
            seen[key(value)] = value
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    if args.gpus_per_node < 0 or args.eval_gpus_per_node < 0:
        parser.error("--gpus-per-node and --eval-gpus-per-node must be 0 (CPU nodes) or more")
    setup = os.environ.get("RLSR_SETUP")
    if setup and not Path(setup).is_file():
        parser.error(
            f"RLSR_SETUP={setup} does not exist; point it at a script that activates rlsr's "
            "environment on every node (e.g. one line: source /path/to/rlsr/.venv/bin/activate)"
        )
    for override in args.overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in {"recipe", "method", "seed", "output_dir"}:
            parser.error(
                f"override {override!r}: the sweep sets {key} itself; use --recipes/--methods/--seeds"
            )
    args.tasks_path = check_tasks(args.tasks_dir, parser)
    for arg in args.sbatch_arg:
        check_sbatch_arg(arg, args, parser)
    if args.eval_tasks and not args.no_eval:
        try:
            items_needing_judge(args.eval_tasks)  # resolves every name (user tasks registered)
        except ValueError as err:
            parser.error(f"--eval-tasks: {err}")
    return args


# sbatch options the sweep sets on its jobs -> the sweep's own flag for them (None: set per job).
SWEEP_SBATCH_OPTIONS = {
    "--nodes": "--nodes", "-N": "--nodes", "--gpus-per-node": "--gpus-per-node / "
    "--eval-gpus-per-node", "--time": "--time / --eval-time", "-t": "--time / --eval-time",
    "--partition": "--partition", "-p": "--partition", "--account": "--account",
    "-A": "--account", "--qos": "--qos", "-q": "--qos", "--job-name": None, "-J": None,
    "--dependency": None, "-d": None, "--array": None, "-a": None, "--kill-on-invalid-dep": None,
    "--parsable": None,
}  # fmt: skip


def check_sbatch_arg(arg: str, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse an ``--sbatch-arg`` the sweep's own options would contradict (sbatch keeps the last
    of two, so one of them would be dropped without a word)."""
    option = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
    if option == "--export" and args.tasks_path:
        parser.error(
            f"--sbatch-arg={arg}: the sweep exports RLSR_TASKS_PATH (--tasks-dir) with --export "
            "itself; set the other variables in the environment you run the sweep from"
        )
    if option not in SWEEP_SBATCH_OPTIONS:
        return
    own = SWEEP_SBATCH_OPTIONS[option]
    parser.error(
        f"--sbatch-arg={arg}: the sweep sets {option} on its jobs itself"
        + (f"; use the sweep's {own}" if own else " (one per job)")
    )


def check_tasks(dirs: list[str], parser: argparse.ArgumentParser) -> str | None:
    """The ``$RLSR_TASKS_PATH`` of every job (absolute paths), after registering the task files
    here, so a broken one stops the sweep before anything is submitted."""
    if not dirs:
        return None
    paths = [str(Path(d).expanduser().resolve()) for d in dirs]
    if any("," in p for p in paths):
        parser.error("--tasks-dir: a path with ',' cannot pass through sbatch --export")
    import rlsr.data  # heavy (datasets); only when tasks are given

    try:
        rlsr.data.load_tasks(paths)
    except ValueError as err:
        parser.error(f"--tasks-dir: {err}")
    return os.pathsep.join(paths)


def default_eval_tasks(recipe: str) -> list[str]:
    """``<recipe>-id``, ``<recipe>-ood`` when those groups exist (rlsr.data.GROUPS)."""
    known = load_registry().GROUPS
    groups = [f"{recipe}-id", f"{recipe}-ood"]
    if not all(g in known for g in groups):
        raise SystemExit(
            f"sweep: no task groups {groups} for recipe {recipe!r}; pass --eval-tasks NAMES "
            f"(groups: {', '.join(known)})"
        )
    return groups


def launch_shape(nodes: int, gpus_per_node: int) -> tuple[str, int]:
    """The vLLM engine and the training processes slurm/train.slurm gives a run of ``nodes``
    nodes with ``gpus_per_node`` GPUs (its allocation section): on GPUs a vLLM server on the last
    node when there are several (``RLSR_USE_VLLM=0``: no vLLM), else one colocated in each
    process; one process per CPU node. Each run is planned for that launch."""
    if gpus_per_node == 0:
        return "none", nodes
    if os.environ.get("RLSR_USE_VLLM", "1") == "0":
        return "none", gpus_per_node * nodes
    if nodes > 1:
        return "server", gpus_per_node * (nodes - 1)
    return "colocate", gpus_per_node


def plan(args: argparse.Namespace) -> list[Job]:
    """Every job of the sweep, each evaluation right after the training run it waits for."""
    common: list[str] = []
    for flag in ("partition", "account", "qos"):
        if getattr(args, flag):
            common.append(f"--{flag}={getattr(args, flag)}")
    common += args.sbatch_arg
    if args.tasks_path:  # user tasks, for train.py and rlsr evaluate alike (docs/tasks.md)
        common.append(f"--export=ALL,RLSR_TASKS_PATH={args.tasks_path}")

    jobs: list[Job] = []
    for recipe in args.recipes:
        eval_tasks = args.eval_tasks or (None if args.no_eval else default_eval_tasks(recipe))
        judged = items_needing_judge(eval_tasks) if eval_tasks and not args.no_eval else []
        if args.eval_gpus_per_node == 0 and judged:
            raise SystemExit(
                f"sweep: {', '.join(judged)} need the LLM judge, which vLLM serves on a GPU, but "
                "--eval-gpus-per-node is 0; pass --eval-tasks without them, or --no-eval"
            )
        for method in args.methods:
            for seed in args.seeds:
                overrides = [
                    f"recipe={recipe}",
                    f"method={method}",
                    f"seed={seed}",
                    *args.overrides,
                ]
                try:
                    variant = None if args.protocol_variant == "none" else args.protocol_variant
                    mode, processes = launch_shape(args.nodes, args.gpus_per_node)
                    resolved = resolve(
                        overrides, variant=variant, vllm_mode=mode, world_size=processes
                    )
                except Exception as err:  # Hydra raises several types
                    raise SystemExit(
                        f"sweep: the config does not compose with {overrides}: {err}"
                    ) from None
                if resolved["evaluate_args"] is None and not args.no_eval:
                    raise SystemExit(
                        f"sweep: the evaluation protocol of {overrides} does not resolve (the "
                        "reason is above); fix the setting or pass --no-eval."
                    )
                if args.gpus_per_node == 0 and resolved["gpu_settings"]:
                    raise SystemExit(
                        f"sweep: recipe={recipe} method={method} asks for a GPU "
                        f"({' '.join(resolved['gpu_settings'])}) but --gpus-per-node is 0; pass "
                        "-- grpo.use_cpu=true grpo.bf16=false to train on CPUs, or request GPUs"
                    )
                output_dir = resolved["output_dir"]
                if args.runs_dir:
                    output_dir = str(Path(args.runs_dir).resolve() / Path(output_dir).name)
                name = f"rlsr-{recipe}-{method}-s{seed}"
                train_sbatch = [
                    *common,
                    f"--nodes={args.nodes}",
                    f"--gpus-per-node={args.gpus_per_node}",
                ]
                if args.time:
                    train_sbatch.append(f"--time={args.time}")
                jobs.append(
                    Job(
                        kind="train",
                        name=name,
                        sbatch_args=train_sbatch,
                        script="slurm/train.slurm",
                        script_args=[*overrides, f"output_dir={output_dir}"],
                        notes={"output_dir": output_dir},
                    )
                )
                if args.no_eval:
                    continue
                eval_sbatch = [
                    *common,
                    f"--gpus-per-node={args.eval_gpus_per_node}",
                    f"--array=0-{len(eval_tasks) - 1}",
                    # a failed training run cancels its evaluation instead of leaving it
                    # pending forever (DependencyNeverSatisfied)
                    "--kill-on-invalid-dep=yes",
                ]
                if args.eval_time:
                    eval_sbatch.append(f"--time={args.eval_time}")
                jobs.append(
                    Job(
                        kind="evaluate",
                        name=f"{name}-eval",
                        sbatch_args=eval_sbatch,
                        script="slurm/evaluate.slurm",
                        script_args=[
                            "--checkpoints",
                            output_dir,
                            "--model",
                            resolved["model"],
                            "--tasks",
                            ",".join(eval_tasks),
                            "--output-dir",
                            str((ROOT / args.evals_dir).resolve()),
                            # how a model of this method is evaluated (method.evaluate)
                            *(
                                ["--", *resolved["evaluate_args"], *args.eval_arg]
                                if resolved["evaluate_args"] or args.eval_arg
                                else []
                            ),
                        ],
                        after=len(jobs) - 1,
                        # the record's key keeps its older word: scripts read it (docs/architecture.md)
                        notes={"datasets": ",".join(eval_tasks)},
                    )
                )
    return jobs


def submitted_note(jobs: list[Job]) -> str:
    """Which jobs are already in the queue (after a failure midway), with the command that
    cancels them."""
    done = [job for job in jobs if job.job_id is not None]
    if not done:
        return "  nothing was submitted."
    ids = " ".join(job.job_id for job in done)
    listing = ", ".join(f"{job.kind} {job.name} {job.job_id}" for job in done)
    return f"  already submitted: {listing}\n  cancel them with: scancel {ids}"


def preflight(jobs: list[Job]) -> None:
    """Asks sbatch (``--test-only``, submits nothing) whether the cluster takes the first job of
    each kind, so a partition, account or GPU request it refuses stops the sweep before anything
    is in the queue."""
    if shutil.which("sbatch") is None:
        raise SystemExit(
            "sweep: sbatch is not on PATH: run the sweep on a Slurm login node (where sbatch "
            "is), or pass --dry-run to print the commands"
        )
    for kind in ("train", "evaluate"):
        job = next((j for j in jobs if j.kind == kind), None)
        if job is None:
            continue
        cmd = job.command(None)
        cmd.insert(1, "--test-only")
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            reason = " ".join(result.stderr.split())
            raise SystemExit(
                f"sweep: the cluster refuses the {kind} jobs (sbatch --test-only, nothing "
                f"submitted): {reason}\n  check --partition / --account / --qos / "
                f"--{'eval-' if kind == 'evaluate' else ''}gpus-per-node (sinfo lists the "
                f"partitions); command: {shlex.join(cmd)}"
            )


def submit(job: Job, dependency_id: str | None, jobs: list[Job]) -> str:
    cmd = job.command(dependency_id)
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"sweep: sbatch failed ({result.returncode}) for {job.name}: {result.stderr.strip()}\n"
            f"  command: {shlex.join(cmd)}\n{submitted_note(jobs)}"
        )
    return result.stdout.strip().split(";")[0]  # --parsable prints "id" or "id;cluster"


def write_record(path: Path, jobs: list[Job]) -> None:
    """The submitted jobs (kind, name, id, the training job waited for, output folder, log),
    rewritten after every submission so a sweep stopped midway still lists what it submitted."""
    rows = [
        {
            "kind": job.kind,
            "name": job.name,
            "job_id": job.job_id,
            "after": jobs[job.after].job_id if job.after is not None else None,
            "log": f"logs/{job.name}-%j.out",  # the scripts' #SBATCH --output
            **job.notes,
        }
        for job in jobs
        if job.job_id is not None
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"root": str(ROOT), "jobs": rows}, indent=2) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.status is not None:
        return sweep_status.report(Path(args.status))
    jobs = plan(args)
    record = None
    if not args.dry_run:
        preflight(jobs)
        (ROOT / "logs").mkdir(exist_ok=True)
    for index, job in enumerate(jobs, start=1):
        after = jobs[job.after] if job.after is not None else None
        if args.dry_run:
            dependency = f"<job {job.after + 1}>" if after is not None else None
            depends = f"afterok:job{job.after + 1}" if after is not None else "none"
            print(f"job {index}: kind={job.kind} name={job.name} depends={depends}")
            print(f"  sbatch: {shlex.join(job.command(dependency))}")
            continue
        job.job_id = submit(job, after.job_id if after is not None else None, jobs)
        record = record or ROOT / "logs" / f"sweep-{job.job_id}.json"
        write_record(record, jobs)
        depends = f" (afterok:{after.job_id} {after.name})" if after is not None else ""
        print(f"{job.kind} {job.name} {job.job_id}{depends}", flush=True)
    n_train = sum(job.kind == "train" for job in jobs)
    verb = "would submit" if args.dry_run else "submitted"
    print(
        f"{verb} {len(jobs)} jobs: {n_train} training runs, {len(jobs) - n_train} evaluation arrays"
    )
    if record is not None:
        print(f"record: {record} (report: slurm/sweep.py --status {record})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
