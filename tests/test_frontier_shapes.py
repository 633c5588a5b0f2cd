"""The frontier's FLOPs size each model by what the run names: a folder's config.json, or a released checkpoint's
hub id (runs name the paper's 4B verifier so), never the 8B's sizes for the 4B."""

import json

from cader.calibrate.frontier import model_shape
from cader.vlm.flops import QWEN3_VL_4B_TEXT, QWEN3_VL_8B_TEXT


def test_the_papers_verifier_by_hub_id_is_sized_as_the_4b(capsys):
    assert model_shape("Qwen/Qwen3-VL-4B-Instruct") == QWEN3_VL_4B_TEXT
    assert model_shape("Qwen/Qwen3-VL-8B-Instruct") == QWEN3_VL_8B_TEXT
    assert model_shape(None) == QWEN3_VL_8B_TEXT and capsys.readouterr().err == ""


def test_a_name_that_is_neither_says_so_and_takes_the_8bs_sizes(capsys):
    assert model_shape("someone/other-model") == QWEN3_VL_8B_TEXT
    assert "someone/other-model is neither a model folder nor a released checkpoint" in capsys.readouterr().err


def test_a_folder_is_sized_by_its_config(tmp_path):
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps({"text_config": text}))
    shape = model_shape(str(tmp_path))
    assert (shape.hidden, shape.layers, shape.vocab) == (64, 2, 1000)
