"""The task registry: one ``TaskSpec`` per task, a dataset of the RLSR paper (Aligning Language Models with Selective Prediction, arXiv 2607.03528) with
its verifier and prompt.

Sources are the copies the RLCR authors published (paper Sec. C.4.1, C.5.1), whose
schemas we read from the ``damanimehul/RLCR`` repository (``data/*/dataset_info.json`` and
``data/creation_scripts/``). Verifiers follow paper Sec. C.2; system prompts Sec. C.1/C.5;
in-domain (ID) / out-of-domain (OOD) groups Sec. 4.1 and Tab. 8-11.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "DatasetUnavailableError",
    "TaskSpec",
    "TaskSource",
    "REGISTRY",
    "BUILTIN_TASKS",
    "GROUPS",
    "GROUP_SYSTEM_PROMPTS",
    "VERIFIERS",
    "get_spec",
    "resolve_tasks",
    "group_system_prompt",
]

VERIFIERS = ("exact_match", "math", "mcq", "llm_judge")


class DatasetUnavailableError(RuntimeError):
    """The dataset is neither local nor reachable on the hub (raised by ``rlsr.data.loading``)."""


@dataclass(frozen=True)
class TaskSource:
    """Where a user task (``rlsr.data.tasks``, docs/tasks.md) came from and how its data splits:
    ``file`` (None for a task registered in Python) and ``sha256`` (of that file's bytes, else of
    the task's canonical JSON), recorded in ``run.json`` / ``deployment.json``; the task's own
    settings as ``Task`` names them (``prompt_text``: its own system prompt; ``has_eval``: it
    names an evaluation split); ``definition_sha256``: the SHA-256 of the task's fields less its
    verifier's execution options, which a resume compares (so ``timeout_s`` may change)."""

    file: str | None
    sha256: str
    data_path: str | None = None
    eval_fraction: float | None = None
    split_seed: int = 0
    prompt_text: str | None = None
    has_eval: bool = False
    skip_empty: bool = False
    too_long: str = "refuse"
    definition_sha256: str | None = None


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to load, prompt and verify one dataset.

    ``split`` is the default (evaluation) split; ``train_split`` is set for the training sets.
    ``sizes`` maps upstream split names to the row counts of the published copy, so a load of a
    whole split can be checked. ``columns`` maps contract fields (``question``, ``answer``,
    ``id``, ``answerable``, ``cost`` ...) to upstream column names; it can be overridden per call
    (``load_examples(..., columns={...})``) for copies with other names. ``formatter`` names the
    row adapter in ``rlsr.data.formatting`` (``task``: a user task's rows, ``rlsr.data.task_rows``).
    """

    name: str
    hf_id: str | None
    sizes: Mapping[str, int]
    verifier: str
    description: str
    split: str = "test"
    system_prompt: str = "simple"
    formatter: str = "plain"
    hf_config: str | None = None
    revision: str | None = None
    train_split: str | None = None
    alt_verifiers: tuple[str, ...] = ()
    columns: Mapping[str, str] = field(default_factory=dict)
    source_note: str = ""
    verifier_options: Mapping[str, Any] = field(default_factory=dict)
    task: TaskSource | None = None

    @property
    def size(self) -> int | None:
        """Expected rows in the default split (``None`` when unknown)."""
        return self.sizes.get(self.split)

    @property
    def groups(self) -> tuple[str, ...]:
        """The ID/OOD groups this dataset belongs to (see ``GROUPS``)."""
        return tuple(g for g, members in GROUPS.items() if self.name in members)


def _spec(**kw) -> TaskSpec:
    kw["sizes"] = MappingProxyType(dict(kw["sizes"]))
    kw["columns"] = MappingProxyType(dict(kw.get("columns", {})))
    spec = TaskSpec(**kw)
    if spec.verifier not in VERIFIERS:
        raise ValueError(f"{spec.name}: verifier {spec.verifier!r} not in {VERIFIERS}")
    return spec


_TINY_COLUMNS = {"problem": "question", "answer": "answer", "id": "id"}
_HOTPOT_COLUMNS = {"problem": "problem", "answer": "answer", "id": "id", "question": "question"}

_SPECS = [
    _spec(
        name="hotpot_modified",
        hf_id="mehuldamani/hotpot_qa",
        train_split="train",
        sizes={"train": 20000, "test": 500},
        verifier="exact_match",
        system_prompt="long",
        formatter="hotpot",
        columns=_HOTPOT_COLUMNS,
        description="HotPotQA-Modified: 0, 1 or 2 gold paragraphs removed, 8 paragraphs each "
        "(C.4.1); test = 500 held-out validation questions (C.5.1).",
        source_note="Rebuild: scripts/build_hotpotqa_modified.py (from hotpotqa/hotpot_qa "
        "distractor).",
    ),
    _spec(
        name="hotpot_vanilla",
        hf_id="mehuldamani/hotpot_qa-vanilla",
        sizes={"test": 1000},
        verifier="exact_match",
        system_prompt="long",
        formatter="hotpot",
        columns=_HOTPOT_COLUMNS,
        description="HotPotQA distractor validation, 1,000 questions, 2 irrelevant paragraphs "
        "removed so 8 remain with both gold paragraphs (C.5.1).",
        source_note="Rebuild: scripts/build_hotpotqa_modified.py --vanilla.",
    ),
    _spec(
        name="bigmath_digits",
        hf_id="mehuldamani/big-math-digits",
        train_split="train",
        sizes={"train": 30000, "test": 1000},
        verifier="math",
        description="Big-Math Digits: numeric answers, LLaMA-8B solve rate in (0, 0.7] "
        "(C.4.1); test = 1,000 held-out problems (C.5.1).",
        source_note="The published train split has 30,000 rows; the paper trains 0.5 epoch = "
        "15,000 problems. Rebuild: scripts/build_bigmath_digits.py.",
    ),
    _spec(
        name="math500",
        hf_id="HuggingFaceH4/MATH-500",
        sizes={"test": 500},
        verifier="math",
        columns={"problem": "problem", "answer": "answer", "id": "unique_id"},
        description="MATH-500 (C.5.1).",
    ),
    _spec(
        name="gsm8k",
        hf_id="mehuldamani/gsm8k",
        sizes={"train": 7473, "test": 1319},
        verifier="math",
        description="GSM8K test set, 1,319 problems (C.5.1).",
    ),
    _spec(
        name="trivia",
        hf_id="mehuldamani/trivia",
        sizes={"test": 2000},
        verifier="llm_judge",
        alt_verifiers=("exact_match",),
        formatter="aliases",
        columns={"problem": "question", "answer": "answer", "id": "question_id"},
        description="TriviaQA rc.nocontext validation, 2,000 questions; gold = answer aliases "
        "(C.5.1).",
    ),
    _spec(
        name="simpleqa",
        hf_id="basicv8vc/SimpleQA",
        sizes={"test": 4326},
        verifier="llm_judge",
        description="SimpleQA, all 4,326 questions (C.5.1).",
    ),
    _spec(
        name="commonsenseqa",
        hf_id="mehuldamani/commonsenseqa",
        sizes={"test": 1221},
        verifier="llm_judge",
        alt_verifiers=("mcq",),
        formatter="mcq_rendered",
        columns={"problem": "problem", "answer": "answer", "id": "id", "letter": "answerKey"},
        description="CommonsenseQA validation, 1,221 rows (the paper says 1,220), options "
        "A-E inside the problem (C.5.1).",
    ),
    _spec(
        name="gpqa",
        hf_id="mehuldamani/gpqa-eval",
        sizes={"test": 448},
        verifier="llm_judge",
        alt_verifiers=("mcq",),
        formatter="mcq_rendered",
        description="GPQA main, 448 questions, options shuffled into A-D (C.5.1).",
    ),
    _spec(
        name="medqa",
        hf_id="GBaker/MedQA-USMLE-4-options-hf",
        train_split="train",
        sizes={"train": 10178, "validation": 1272, "test": 1273},
        verifier="mcq",
        alt_verifiers=("llm_judge",),
        system_prompt="long",
        formatter="mcq_columns",
        columns={"id": "id"},
        description="MedQA (USMLE, 4 options) with the original 10,178 / 1,272 / 1,273 "
        "train / validation / test split (C.6.1): validation selects the threshold, test is "
        "the deployment set. Letter match (C.6.1); the LLM judge of C.5.1 is the alternative.",
        source_note="Swag-style columns (sent1, ending0-3, label) of GBaker/MedQA-USMLE-4-options-hf;"
        " the question/options/answer_idx schema of GBaker/MedQA-USMLE-4-options is read too.",
    ),
    _spec(
        name="utilitybench",
        hf_id="leiqf/UtilityBench",
        split="train",
        sizes={"train": 15000},
        verifier="llm_judge",
        formatter="utility",
        columns={
            "problem": "question",
            "answer": "answer",
            "id": "id",
            "answerable": "answerable",
            "cost": "cost",
        },
        description="UtilityBench (arXiv 2610.25924): 15,000 queries, half refusal-required, each with "
        "an answerability label a_i and consequence cost L_i for UtilityAUC.",
        source_note="Column names NOT confirmed against the dataset card (unreachable here); "
        "override with load_examples(..., columns={...}) or --columns.",
    ),
    _spec(
        name="tiny",
        hf_id=None,
        train_split="train",
        sizes={"train": 200, "test": 50},
        verifier="exact_match",
        columns=_TINY_COLUMNS,
        description="Bundled offline synthetic fact-lookup QA for the trainer tests "
        "(generator: tools/tiny/data.py in the repository).",
    ),
    _spec(
        name="tiny-missing",
        hf_id=None,
        train_split="train",
        sizes={"train": 200, "validation": 100, "test": 100},
        verifier="exact_match",
        columns=_TINY_COLUMNS,
        description="Bundled offline fact-lookup QA for recipe=tiny: in half the questions the "
        "asked fact is missing, so the answer is a guess; validation (thresholds) and test "
        "share no prompt with train (generator: tools/tiny/data.py in the repository).",
    ),
    _spec(
        name="tiny-candidates",
        hf_id=None,
        train_split="train",
        sizes={"train": 200, "validation": 80, "test": 80},
        verifier="exact_match",
        columns=_TINY_COLUMNS,
        description="Bundled offline fact-lookup QA for recipe=tiny-candidates: 1, 2 or 4 "
        "candidate colors listed (the first named right 100 / 70 / 30 % of the time) or none (a "
        "guess), where calibration and the lifted-AURC reward want different confidences; "
        "validation and test share no prompt with train (generator: tools/tiny/data.py in the repository).",
    ),
]

_ENTRIES: dict[str, TaskSpec] = {s.name: s for s in _SPECS}
REGISTRY: Mapping[str, TaskSpec] = MappingProxyType(_ENTRIES)
"""Every dataset by name: the built-ins above, then the user tasks registered in this process
(``rlsr.data.tasks``). A read-only view; tasks enter through ``rlsr.data.register_task``."""

BUILTIN_TASKS: frozenset[str] = frozenset(_ENTRIES)

# Called, in order, when a name is not registered (``rlsr.data.tasks`` installs the loader of
# $RLSR_TASKS_PATH here), so every lookup by name sees the tasks of that path.
LOOKUP_HOOKS: list[Callable[[], None]] = []


def add_spec(spec: TaskSpec) -> None:
    """Register a user task's spec (``rlsr.data.tasks.register_task`` checks its name first)."""
    _ENTRIES[spec.name] = spec


def remove_spec(name: str) -> None:
    """Unregister a user task (``rlsr.data.tasks.unregister_task`` leaves built-ins alone)."""
    _ENTRIES.pop(name, None)


# Sec. 4.1 and Tab. 8-11: "for HotPotQA-aligned models, ID evaluation only uses HotPotQA, and OOD
# evaluation includes the remaining 6 additional datasets; for BigMath-aligned models, Math500,
# GSM8K, and BigMath are for ID evaluation, while the rest are for OOD evaluation."
GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "hotpot-id": ("hotpot_modified", "hotpot_vanilla"),
        "hotpot-ood": ("math500", "gsm8k", "trivia", "simpleqa", "commonsenseqa", "gpqa"),
        "bigmath-id": ("bigmath_digits", "math500", "gsm8k"),
        "bigmath-ood": ("hotpot_vanilla", "trivia", "simpleqa", "commonsenseqa", "gpqa"),
    }
)

# Sec. C.5: evaluation uses the system prompt of training, so a HotPotQA-trained model sees the
# long prompt on every benchmark and a BigMath-trained model the simple one.
GROUP_SYSTEM_PROMPTS: Mapping[str, str] = MappingProxyType(
    {"hotpot-id": "long", "hotpot-ood": "long", "bigmath-id": "simple", "bigmath-ood": "simple"}
)


def get_spec(name: str) -> TaskSpec:
    """Return the ``TaskSpec`` registered as ``name`` (a built-in or a user task)."""
    if name not in REGISTRY:
        for hook in LOOKUP_HOOKS:
            hook()
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown task {name!r}; registered tasks: {', '.join(REGISTRY)} "
            f"(groups: {', '.join(GROUPS)}). For your own data, write a task file and pass "
            "--tasks-dir DIR (tasks_dir=DIR in train.py, or RLSR_TASKS_PATH=DIR); docs/tasks.md."
        ) from None


def resolve_tasks(names: str | list[str] | tuple[str, ...]) -> list[str]:
    """Expand ``"a,b"``, a group name, or a list mixing both, into task names (deduplicated,
    order kept). Unknown names raise ``ValueError`` listing what exists."""
    if isinstance(names, str):
        items = [p.strip() for p in names.split(",")]
    else:
        items = [str(p).strip() for p in names]
    out: list[str] = []
    for item in items:
        if not item:
            continue
        members = GROUPS.get(item, (item,))
        for member in members:
            get_spec(member)  # validates
            if member not in out:
                out.append(member)
    if not out:
        raise ValueError(
            f"no task named in {names!r}; give names or a group ({', '.join(GROUPS)})."
        )
    return out


def group_system_prompt(group: str) -> str:
    """The system prompt name ("simple" | "long") used to evaluate models of a training domain."""
    try:
        return GROUP_SYSTEM_PROMPTS[group]
    except KeyError:
        raise ValueError(f"unknown group {group!r}; choose one of {sorted(GROUPS)}.") from None


def tasks_system_prompt(names: str | list[str] | tuple[str, ...]) -> str | None:
    """The training system prompt implied by the groups named in ``names`` (Sec. C.5).

    ``"hotpot-id,hotpot-ood"`` -> ``"long"``: every group named belongs to one training domain,
    so every dataset of the run (grouped or named alone) is evaluated with that domain's prompt.
    ``None`` when no group is named (each dataset keeps its own prompt). Groups of different
    domains raise ``ValueError``: no single prompt is right, so ``--system-prompt`` must choose.
    """
    items = names.split(",") if isinstance(names, str) else list(names)
    groups = [g for g in (str(i).strip() for i in items) if g in GROUPS]
    prompts = {GROUP_SYSTEM_PROMPTS[g] for g in groups}
    if len(prompts) > 1:
        raise ValueError(
            f"--tasks {names!r} names groups of different training domains "
            f"({', '.join(f'{g}: {GROUP_SYSTEM_PROMPTS[g]}' for g in groups)}); "
            "evaluate them in separate runs or choose one with --system-prompt simple|long."
        )
    return prompts.pop() if prompts else None
