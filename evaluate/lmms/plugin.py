"""The `lmms_eval.models` entry point (pyproject.toml): lmms-eval's ModelRegistryV2 loads it and registers `cader`
(lmms_eval/models/registry_v2.py `load_entrypoint_manifests`: a payload may be a callable returning a manifest).
A callable, so that importing this module needs no lmms-eval and loads no model code.

`lmms-eval models` (lmms_eval/cli/models_cmd.py, 0.7.3) lists the names in `lmms_eval.models`'
AVAILABLE_SIMPLE_MODELS / AVAILABLE_CHAT_TEMPLATE_MODELS tables only, which the registry's entry-point models never
enter (only the deprecated LMMS_EVAL_PLUGINS route adds to them). So `manifest` also enters `cader` in the simple
table, which that command lists and nothing else of lmms-eval's resolves models from (they resolve through the
registry): `lmms-eval models` then shows cader as a simple model.
"""

import sys

MODEL_ID = "cader"
CLASS_PATH = "cader.evaluate.lmms.model.Cader"


def list_in(models_module) -> None:
    """Enter cader in an `lmms_eval.models` module's table of simple models (what `lmms-eval models` prints)."""
    table = getattr(models_module, "AVAILABLE_SIMPLE_MODELS", None)
    if isinstance(table, dict):
        table.setdefault(MODEL_ID, CLASS_PATH.rsplit(".", 1)[1])


def manifest():
    from lmms_eval.models.registry_v2 import ModelManifest

    # called while lmms_eval.models itself is being imported (its registry loads the entry points at import), so
    # the module is taken from sys.modules, where its tables already exist
    list_in(sys.modules.get("lmms_eval.models"))
    return ModelManifest(model_id=MODEL_ID, simple_class_path=CLASS_PATH)
