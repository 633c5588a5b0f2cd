"""Which judge protocol produces the numbers: the paper's (App. D.5 text) or the official harness's (`--protocol`).

`paper`: the system prompt and user template printed in the AgentVidBench paper, App. D.5 (prompt.py); every
question of questions.jsonl is in the accuracy denominator (a missing or errored prediction counts as wrong).

`official`: what the official harness sends and counts (github.com/krafton-ai/agentvidbench; read at commit
13059bb69fee92de5cc79aeda7836d8aa20ccaeb of its public mirror jhyeonseo/agentvidbench), read from the user's own
checkout of it (`--harness_root`), never shipped here:
- system prompt: `evaluation/prompts/judge_system.md`, stripped (evaluation/judge.py, `_load_system_prompt`);
- user template: the `USER_TEMPLATE` string of `evaluation/judge.py`, read with `ast` (the file is not imported or
  run), filled with the fields its `build_user` passes: qid, framework, sweep_required, question_text, options
  (`"  {letter}. {text}"` per line, `options_block`), answer_explanation, milestones_block
  (`"  {id} type={type}: {description}"`, type "?" when absent and "None" when null, `milestones_block`),
  n_milestones, milestone_ids, prediction. (The official build_user passes answer_explanation; its template at that commit does not use it.)
- the prediction: a run folder's `inference/trajectories/question<N>.txt`, verbatim (`read_prediction`); a
  run-folder question without that file is an error row `missing_pred: <path>` with no judge call, as the official
  score_process records it; cader's own predictions.jsonl is judged from cader's rendering of the record;
- denominators (evaluate.py, `inference_qids`: results of inference/summary.json without "error"; aggregate.py,
  `_accumulate`: n = the evaluated records): a question with no prediction or an errored prediction is left out of
  accuracy, not counted wrong; slices skip a question without the field (aggregate.py, `_slice`).
In both protocols the prediction reaches the judge fenced as quoted data (prompt.fence_prediction): the official
harness pastes it raw, which lets a prediction write lines that read as the template's own.
"""

from __future__ import annotations

import ast
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cader.evaluate.judge.params import CONTEXT_1M_BETA, JudgeConfigError
from cader.evaluate.judge.prompt import (
    SYSTEM_PROMPT_WITH_SCHEMA,
    USER_TEMPLATE,
    build_user_prompt,
    fence_prediction,
    letters_for,
    sweep_required,
)
from cader.evaluate.judge.questions import Question
from cader.evaluate.judge.render import render_prediction

ProtocolName = Literal["paper", "official"]
PROTOCOLS: tuple[str, ...] = ("paper", "official")
SYSTEM_PROMPT_FILE = Path("evaluation") / "prompts" / "judge_system.md"
JUDGE_MODULE = Path("evaluation") / "judge.py"
TEMPLATE_NAME = "USER_TEMPLATE"
# The fields the official build_user passes to USER_TEMPLATE.format (evaluation/judge.py).
OFFICIAL_FIELDS = frozenset({"qid", "framework", "sweep_required", "question_text", "options", "answer_explanation",
                             "milestones_block", "n_milestones", "milestone_ids", "prediction"})
# Where an adapter puts a framework's own judge-input text (inference/trajectories/question<N>.txt), and the path
# it expected when a run folder has none for a question.
VERBATIM_KEY = "trajectory_text"
MISSING_KEY = "trajectory_text_missing"


@dataclass(frozen=True)
class JudgeProtocol:
    """The text the judge is sent and how accuracy is counted; `source` says where the text came from."""

    name: ProtocolName
    system: str
    user_template: str
    source: str

    @property
    def drops_unanswered(self) -> bool:
        """Whether questions with no prediction or an errored one leave the accuracy denominator (official)."""
        return self.name == "official"

    def missing_input(self, record: dict) -> str | None:
        """The error the official judge records for a run-folder question without its judge-input file
        (evaluation/judge.py, score_process: `missing_pred: <path>`), or None: this question can be judged."""
        missing = record.get(MISSING_KEY)
        if self.name == "official" and isinstance(missing, str):
            return f"missing_pred: {missing}"
        return None

    def prediction_text(self, record: dict) -> str:
        """What the judge reads of a prediction: the framework's own judge text verbatim (official, when there is
        one), else cader's allow-listed rendering."""
        verbatim = record.get(VERBATIM_KEY)
        if self.name == "official" and isinstance(verbatim, str):
            return verbatim
        return render_prediction(record)

    def prompt(self, question: Question, record: dict, framework: str) -> tuple[str, str]:
        """(system, user) for one prediction."""
        text = self.prediction_text(record)
        if self.name == "paper":
            user = build_user_prompt(qid=question.question_id, framework=framework,
                                     ecom_required=question.ecom_required, question=question.question,
                                     options=question.options, milestones=question.milestones, trajectory=text,
                                     letters=_letters(record))
            return self.system, user
        ids = [m["id"] for m in question.milestones]
        user = self.user_template.format(
            qid=question.question_id, framework=framework, sweep_required=sweep_required(question.ecom_required),
            question_text=question.question, options=official_options(question.options),
            answer_explanation=question.answer_explanation or "",
            milestones_block=official_milestones(question.milestones), n_milestones=len(ids),
            milestone_ids=", ".join(ids), prediction=fence_prediction(text))
        return self.system, user


def _letters(record: dict) -> list[str] | None:
    letters = record.get("letters")
    return letters if isinstance(letters, list) and all(isinstance(x, str) for x in letters) and letters else None


def official_options(options: Sequence[str]) -> str:
    return "\n".join(f"  {letter}. {text}" for letter, text in zip(letters_for(len(options)), options))


def official_milestones(milestones: Sequence[dict]) -> str:
    # the official milestones_block: `m.get('type', '?')`, so an absent type reads "?" and a null one "None"
    return "\n".join(f"  {m['id']} type={m.get('type', '?')}: {m.get('description', '')}" for m in milestones)


# Request settings. The paper (App. D Table 16): 4,096 output tokens. The official harness (evaluation/judge.py):
# Anthropic `max_tokens` 8000 with the 1M-context beta header and temperature 0, retried without a temperature when
# the API rejects it (anthropic_call); OpenAI no token limit, response_format json_object, seed 42 and temperature
# 0, retried without a temperature on a rejection naming it or "unsupported" (openai_call).
PAPER_MAX_TOKENS = 4096
OFFICIAL_MAX_TOKENS = 8000
OFFICIAL_ANTHROPIC = {"name": "official-anthropic", "models": ["*"], "temperature": 0.0,
                      "temperature_fallback": True, "anthropic_beta": [CONTEXT_1M_BETA]}
OFFICIAL_OPENAI = {"name": "official-openai", "models": ["*"], "temperature": 0.0, "temperature_fallback": True,
                   "seed": 42, "json_response": True, "send_token_limit": False}


def official_families(registry: dict[str, type], defaults: list[dict]) -> list[dict]:
    """The family table under --protocol official: the harness's settings for every name registered for an
    Anthropic or OpenAI provider class, ahead of the built-in table (which still serves hf-local)."""
    by_api = {"anthropic-messages": OFFICIAL_ANTHROPIC, "openai-chat-completions": OFFICIAL_OPENAI}
    official = []
    for api, family in by_api.items():
        names = [name for name, cls in registry.items() if cls.API == api]
        if names:
            official.append({**family, "providers": names})
    return official + defaults


PAPER = JudgeProtocol(name="paper", system=SYSTEM_PROMPT_WITH_SCHEMA, user_template=USER_TEMPLATE,
                      source="AgentVidBench paper, App. D.5 (cader.evaluate.judge.prompt)")


def read_template(module_path: Path) -> str:
    """The USER_TEMPLATE string literal of the harness's evaluation/judge.py, read from its syntax tree."""
    try:
        tree = ast.parse(module_path.read_bytes(), filename=str(module_path))
    except OSError as error:
        raise JudgeConfigError(f"{module_path}: cannot read the official judge module ({error.strerror})") from None
    except SyntaxError as error:
        raise JudgeConfigError(f"{module_path}:{error.lineno}: not Python ({error.msg})") from None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == TEMPLATE_NAME for t in targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
            raise JudgeConfigError(f"{module_path}:{node.lineno}: {TEMPLATE_NAME} is not a plain string literal")
    raise JudgeConfigError(f"{module_path}: no top-level {TEMPLATE_NAME} = \"...\" (the official user template)")


def check_template(template: str, where: Path) -> None:
    """The template must place the prediction and use only fields the official build_user supplies."""
    try:
        fields = {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template)
                  if name is not None}
    except ValueError as error:
        raise JudgeConfigError(f"{where}: {TEMPLATE_NAME} is not a format string ({error})") from None
    unknown = sorted(fields - OFFICIAL_FIELDS)
    if unknown:
        raise JudgeConfigError(f"{where}: {TEMPLATE_NAME} uses {unknown}, which the official build_user does not "
                               f"supply (it supplies {sorted(OFFICIAL_FIELDS)})")
    if "prediction" not in fields:
        raise JudgeConfigError(f"{where}: {TEMPLATE_NAME} has no {{prediction}} field")


def official_protocol(harness_root: str | Path) -> JudgeProtocol:
    """The official harness's prompt texts from a checkout of it; JudgeConfigError naming a missing file."""
    root = Path(harness_root)
    if not root.is_dir():
        raise JudgeConfigError(f"--harness_root {root}: no such folder (a checkout of the official AgentVidBench "
                               "harness, github.com/krafton-ai/agentvidbench)")
    missing = [str(root / p) for p in (SYSTEM_PROMPT_FILE, JUDGE_MODULE) if not (root / p).is_file()]
    if missing:
        raise JudgeConfigError(f"--harness_root {root} lacks {', '.join(missing)}: the official protocol reads its "
                               "judge system prompt and user template from there")
    try:
        system = (root / SYSTEM_PROMPT_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise JudgeConfigError(f"{root / SYSTEM_PROMPT_FILE}: cannot read it as UTF-8 text ({error})") from None
    if not system:
        raise JudgeConfigError(f"{root / SYSTEM_PROMPT_FILE}: empty")
    template = read_template(root / JUDGE_MODULE)
    check_template(template, root / JUDGE_MODULE)
    return JudgeProtocol(name="official", system=system, user_template=template,
                         source=f"official harness at {root.resolve()} ({SYSTEM_PROMPT_FILE}, "
                                f"{JUDGE_MODULE}:{TEMPLATE_NAME})")


def make_protocol(name: str, harness_root: str | Path | None = None) -> JudgeProtocol:
    if name == "paper":
        return PAPER
    if name == "official":
        if harness_root is None:
            raise JudgeConfigError("--protocol official needs --harness_root DIR (your checkout of the official "
                                   "AgentVidBench harness; its prompt text is not shipped with cader)")
        return official_protocol(harness_root)
    raise JudgeConfigError(f"unknown protocol {name!r}; choose one of {list(PROTOCOLS)}")
