#!/usr/bin/env bash
# Step 7 of scripts/quickstart.sh: judge AgentVidBench predictions (evaluate/judge.py).
# Usage: bash scripts/quickstart_judge.sh PREDICTIONS QUESTIONS OUT
# With JUDGE_BASE_URL set: an OpenAI-compatible endpoint judges as JUDGE_MODEL (default gpt-5; key from
#   OPENAI_API_KEY, optional for a local server without auth).
# Without it: the loopback test double serves made-up judgments. It answers only to its own model name, so
#   JUDGE_MODEL is not used, and judge_report.md / SUMMARY.md say its numbers are not from a real judge.
# With JUDGE_HARNESS_ROOT set (a checkout of github.com/krafton-ai/agentvidbench): the official harness's judge
#   prompt and denominators (--protocol official); otherwise the paper's (App. D.5). The report names which.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PREDICTIONS="$1" QUESTIONS="$2" OUT="$3"

if [ -z "${JUDGE_BASE_URL:-}" ]; then
  MODEL="$(python -c 'from cader.evaluate.judge.providers import LOOPBACK_MODEL; print(LOOPBACK_MODEL)')"
  if [ -n "${JUDGE_MODEL:-}" ] && [ "$JUDGE_MODEL" != "$MODEL" ]; then
    echo "   JUDGE_MODEL=$JUDGE_MODEL not used: without JUDGE_BASE_URL the judge is the loopback test double," \
         "which answers only as $MODEL" >&2
  fi
  URL_FILE="$(mktemp)"
  python -m cader.dev.judge_double --delay 0.01 --url_file "$URL_FILE" >/dev/null &
  SERVER=$!
  trap 'kill "$SERVER" 2>/dev/null || true; rm -f "$URL_FILE"' EXIT
  for _ in $(seq 100); do [ -s "$URL_FILE" ] && break; sleep 0.1; done
  BASE_URL="$(cat "$URL_FILE")"
  echo "   judging against the loopback test double at $BASE_URL as $MODEL: made-up scores, NOT a real judge" \
       "(set JUDGE_BASE_URL and JUDGE_MODEL for a real one)"
else
  MODEL="${JUDGE_MODEL:-gpt-5}"
  BASE_URL="$JUDGE_BASE_URL"
fi
PROTOCOL=(--protocol paper)
if [ -n "${JUDGE_HARNESS_ROOT:-}" ]; then
  PROTOCOL=(--protocol official --harness_root "$JUDGE_HARNESS_ROOT")
fi
python "$REPO/evaluate/judge.py" --predictions "$PREDICTIONS" --questions "$QUESTIONS" --out "$OUT" \
  --provider openai --base_url "$BASE_URL" --model "$MODEL" --concurrency 16 "${PROTOCOL[@]}"
