"""cader and lmms-eval: CADER as an lmms-eval model (`model`, registered by `plugin`; what it reads from the run
and refuses, `run_context`), lmms-eval documents as cader samples (`docs`), local rows for lmms-eval's built-in
video tasks offline (`local_data`), lmms-eval samples files read for `cader compare` (`samples`), and a cader run
exported as lmms-eval's samples and results files (`export`). Only `model` and `plugin.manifest` need lmms-eval
installed (scripts/install_lmms_eval.sh)."""
