"""Stage 2: tool-assisted fine-grained reasoning (supplementary E, Algorithm 1 lines 14-40).

    propose [t_s, t_e] on F_cur (thinking on)      -> unparseable: A1 ("unparseable_proposal")
    too broad (> 1200 s or > 20 % of the video)     -> A1 ("too_broad")
    crop (>= 10 s), sample at r2 = clip(512 / D_crop, 1, 8)
    verifier P_yes; record (t_s, t_e, min(1, P_yes + f_min))
    P_yes >= delta                                  -> final answer on the crop's frames (thinking on)
    else tried += [t_s, t_e]; after K reflections   -> A1 ("not_accepted"), no extra model call
    else F_cur = RGR(V, scored segments, r1) and propose again

Variants (Table 2): no_verifier accepts the first in-bounds proposal; no_reflection uses K = 0; no_rgr proposes
again on F1. Frame budgets: the crop (F2) and the RGR context are capped at `max_frames` by uniform subsampling,
as Stage 1 is (the paper states the cap for Stage 1 only; F2 is reused for the final answer, F1 for proposals, so
nothing is decoded twice). The crop's frames follow `frame_rule`, as F1's do. The RGR contexts are taken from the
video's one whole-video decode, F1 and the r1 lattice (`cader.evaluate.method.whole_video`, `cader.vlm.frame_grid`),
each holding Algorithm 2's counts.
The final prompt names the crop bounds (the frames it shows), the record's `accepted`
the proposed window. Every step is appended to `steps` as it happens, so a failure mid-way keeps the partial trajectory.
A rejected crop whose RGR context would hold no frames (a video shorter than a frame interval at those rates) ends the
search as the last reflection does: A1, fallback "not_accepted", the resample step marked `no_frames`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cader.evaluate.backends.base import Backend, Prompt, verifier_used
from cader.evaluate.method.budget import crop_window, dense_rate, is_too_broad
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.parsing import parse_answer, parse_window
from cader.evaluate.method.prompts import final_prompt, proposal_prompt, verifier_prompt
from cader.evaluate.method.rgr import fuse_segments, relevance_fps, unexplored_intervals
from cader.evaluate.method.stage1 import Cost
from cader.evaluate.method.whole_video import WholeVideo
from cader.vlm.video import Frames


class MultipleChoice(Protocol):
    """What Stage 2 reads of a sample (a `cader.evaluate.benchmarks.Sample` has it)."""

    question: str
    options: Sequence[str]
    letters: Sequence[str]


class Stage2Failure(RuntimeError):
    """A model call or decode failed inside Stage 2; `partial` is the stage2 record up to that point."""

    def __init__(self, cause: BaseException, partial: dict):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause
        self.partial = partial


def _r(x: float) -> float:
    return round(float(x), 3)


def _window(a: float, b: float) -> list[float]:
    return [_r(a), _r(b)]


class Stage2Run:
    """One sample's Stage 2, from its Stage-1 frames F1 and answer A1 (Algorithm 1 lines 15-40).

    sample: the question, its options and their letters (a `cader.evaluate.benchmarks.Sample`).
    reader: the sample's video: `duration`, `sample_uniform` and `sample_times` (a VideoReader).
    f1: the Stage-1 frames, the first proposal's context (and every proposal's under no_rgr).
    a1: the Stage-1 prediction, the answer wherever Stage 2 falls back.
    cfg: the CADER settings (variant, delta, reflections, budgets).
    main: the main VLM: proposals and the final answer.
    verifier: the verifier VLM: P_yes of each crop.
    cost: the sample's running cost; Stage 2's forwards, tokens and decoded frames are added to it.
    whole: where the RGR contexts come from (`WholeVideo`: F1's decode, the video's r1 grid); None: each decoded
        on its own from `reader`.
    """

    def __init__(
        self,
        sample: MultipleChoice,
        reader,
        f1: Frames,
        a1: str,
        cfg: CaderConfig,
        main: Backend,
        verifier: Backend,
        cost: Cost,
        whole: WholeVideo | None = None,
    ):
        self.sample, self.reader, self.f1, self.a1, self.cfg = sample, reader, f1, a1, cfg
        self.main, self.verifier, self.cost = main, verifier, cost
        self.whole = whole if whole is not None else WholeVideo(reader, cfg, cost, use_grid=False)
        self.options, self.letters = list(sample.options), list(sample.letters)
        self.asked = (sample.question, self.options, self.letters)  # every prompt's first three arguments
        self.duration = float(reader.duration)
        self.steps: list[dict] = []
        self.cycles = 0

    def record(self, pred: str, accepted: list[float] | None, fallback: str | None) -> dict:
        record = {
            "pred": pred,
            "accepted": accepted,
            "cycles": self.cycles,
            "fallback": fallback,
            "steps": self.steps,
        }
        if self.cfg.uses_verifier:  # which model verified: the paper's separate verifier or the main model itself
            record["verifier"] = verifier_used(self.main, self.verifier)
        return record

    def run(self) -> dict:
        try:
            return self._run()
        except Exception as err:  # keep what happened so far; the runner marks the sample as failed
            raise Stage2Failure(err, self.record(None, None, None)) from err

    # ---- model calls -------------------------------------------------------------------------------------
    def _generate(self, system: str, user: str, video: Frames, max_new_tokens: int):
        (out,) = self.main.generate(
            [Prompt(user, system=system, video=video, enable_thinking=True)], max_new_tokens
        )
        self.cost.forwards += 1
        self.cost.prompt_tokens += out.prompt_tokens
        self.cost.completion_tokens += out.completion_tokens
        self.cost.calls.append(("main", out.prompt_tokens, out.completion_tokens))
        return out

    def _p_yes(self, clip: Frames) -> tuple[float, float, float]:
        system, user = verifier_prompt(*self.asked)
        (out,) = self.verifier.yes_no([Prompt(user, system=system, video=clip, enable_thinking=False)])
        self.cost.forwards += 1
        self.cost.prompt_tokens += out.prompt_tokens
        self.cost.calls.append(("verifier", out.prompt_tokens, 0))
        if self.cfg.p_yes_mode == "yes_no":
            total = out.p_yes + out.p_no
            p_yes = out.p_yes / total if total > 0 else 0.0
        else:
            p_yes = out.p_yes
        return float(p_yes), float(out.p_yes), float(out.p_no)

    # ---- Algorithm 1, lines 15-40 ------------------------------------------------------------------------
    def _run(self) -> dict:
        cfg = self.cfg
        scored: list[tuple[float, float, float]] = []
        tried: list[tuple[float, float]] = []
        f_cur, context = self.f1, "F1"
        for iteration in range(cfg.reflections + 1):
            system, user = proposal_prompt(*self.asked, self.duration, cfg.min_crop, tried)
            out = self._generate(system, user, f_cur, cfg.max_new_tokens_propose)
            parsed = parse_window(out.text, self.duration)
            step = {
                "phase": "propose",
                "iteration": iteration,
                "context": context,
                "n_frames": len(f_cur),
                "tried": [_window(*w) for w in tried],
                "raw_output": out.text,
                "parsed": parsed.to_dict(),
                "window": _window(*parsed.window) if parsed.window else None,
            }
            self.steps.append(step)
            if parsed.window is None:
                return self.record(self.a1, None, "unparseable_proposal")
            t_s, t_e = parsed.window
            step["too_broad"] = is_too_broad(
                t_s, t_e, self.duration, cfg.breadth_max_seconds, cfg.breadth_max_fraction
            )
            if step["too_broad"]:
                return self.record(self.a1, None, "too_broad")  # line 19: cached Stage-1 prediction

            c_s, c_e = crop_window(t_s, t_e, self.duration, cfg.min_crop, cfg.crop_edge)
            r2 = dense_rate(c_e - c_s, cfg.n_budget, cfg.r_min, cfg.r_max)
            clip = self.reader.sample_uniform(
                r2, start=c_s, end=c_e, max_frames=cfg.max_frames, max_pixels=cfg.max_pixels, rule=cfg.frame_rule
            )
            self.cost.frames_decoded += len(clip)
            self.cycles += 1
            verify = {
                "phase": "verify",
                "iteration": iteration,
                "window": _window(t_s, t_e),
                "crop": _window(c_s, c_e),
                "r2": _r(r2),
                "n_frames": len(clip),
            }
            self.steps.append(verify)
            if cfg.uses_verifier:
                p_yes, p_yes_vocab, p_no_vocab = self._p_yes(clip)
                f = relevance_fps(p_yes, cfg.f_min, cfg.f_max)
                scored.append((t_s, t_e, f))
                accepted = p_yes >= cfg.delta
                verify.update(
                    p_yes=p_yes, p_yes_vocab=p_yes_vocab, p_no_vocab=p_no_vocab, f=_r(f), accepted=accepted
                )
            else:  # w/o Verifier: every proposed segment is accepted unchecked
                accepted = True
                verify.update(p_yes=None, accepted=True, skipped=True)
            if accepted:
                return self._answer(clip, c_s, c_e, _window(t_s, t_e))

            tried.append((t_s, t_e))
            if iteration == cfg.reflections:
                break  # line 33: reflection budget exhausted
            f_cur, context = self._resample(scored, iteration + 1)
            if len(f_cur) == 0:
                # A video shorter than one frame interval at the RGR rates (a one-frame container, say) leaves the
                # next proposal nothing to look at, and a model cannot be asked about no frames: no segment can be
                # accepted any more, so A1 stands, as after the last reflection.
                self.steps[-1]["no_frames"] = True
                break
        return self.record(self.a1, None, "not_accepted")  # line 40: no extra model call

    def _resample(self, scored, iteration: int) -> tuple[Frames, str]:
        cfg = self.cfg
        if not cfg.uses_rgr:  # w/o RGR: propose again on the uniform Stage-1 frames
            self.steps.append(
                {"phase": "resample", "iteration": iteration, "mode": "uniform_f1", "n_frames": len(self.f1)}
            )
            return self.f1, "F1"
        fused = fuse_segments(scored)
        context = self.whole.rgr_context(scored, self.duration)
        step = {
            "phase": "resample",
            "iteration": iteration,
            "mode": "rgr",
            "fps_map": [[_r(s), _r(e), _r(f)] for s, e, f in fused],
            "unexplored": [_window(s, e) for s, e in unexplored_intervals(fused, self.duration)],
            "n_frames_planned": context.planned,
            "n_frames": len(context.frames),
        }
        if context.lost is not None:   # the speed option: what the context lacks of Algorithm 2's capped count
            step["frames_lost"] = context.lost
        self.steps.append(step)
        return context.frames, "rgr"

    def _answer(self, clip: Frames, c_s: float, c_e: float, accepted: list[float]) -> dict:
        system, user = final_prompt(*self.asked, c_s, c_e)
        out = self._generate(system, user, clip, self.cfg.max_new_tokens_answer)
        parsed = parse_answer(out.text, self.letters, self.options)   # option texts: text-only answers, conflicts
        # No letter at all: the cached Stage-1 answer (the paper only names the single-letter fallback).
        pred = parsed.letter or self.a1
        self.steps.append(
            {
                "phase": "answer",
                "window": _window(c_s, c_e),
                "n_frames": len(clip),
                "raw_output": out.text,
                "parsed": parsed.to_dict(),
                "pred": pred,
                "fallback_to_stage1": parsed.letter is None,
            }
        )
        return self.record(pred, accepted, None)


def run_stage2(
    sample: MultipleChoice,
    reader,
    f1: Frames,
    a1: str,
    cfg: CaderConfig,
    main: Backend,
    verifier: Backend,
    cost: Cost,
    whole: WholeVideo | None = None,
) -> dict:
    """The "stage2" object of predictions.jsonl for one sample. Raises Stage2Failure (with the partial record).

    sample: the question, its options and their letters (a `cader.evaluate.benchmarks.Sample`).
    reader: the sample's video: `duration`, `sample_uniform` and `sample_times` (a VideoReader).
    f1: the Stage-1 frames.
    a1: the Stage-1 prediction (the fallback answer).
    cfg: the CADER settings.
    main: the main VLM.
    verifier: the verifier VLM.
    cost: the sample's running cost, added to.
    whole: the sample's whole-video frames (`WholeVideo`, F1's decode); None: RGR contexts decoded on their own.
    """
    return Stage2Run(sample, reader, f1, a1, cfg, main, verifier, cost, whole).run()
