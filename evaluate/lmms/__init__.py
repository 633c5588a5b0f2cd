"""cader and lmms-eval: CADER as an lmms-eval model (`model`, registered by `plugin`), lmms-eval documents as cader
samples (`docs`), and a cader run exported as lmms-eval's samples and results files (`export`). Only `model` and
`plugin.manifest` need lmms-eval installed (scripts/install_lmms_eval.sh)."""
