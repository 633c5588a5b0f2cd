"""The `lmms_eval.models` entry point (pyproject.toml): lmms-eval's ModelRegistryV2 loads it and registers `cader`
(lmms_eval/models/registry_v2.py `load_entrypoint_manifests`: a payload may be a callable returning a manifest).
A callable, so that importing this module needs no lmms-eval and loads no model code."""


def manifest():
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id="cader", simple_class_path="cader.evaluate.lmms.model.Cader")
