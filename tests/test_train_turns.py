"""Every assistant turn of a multi-turn row is a trained span (cader.train.turns), as LLaMA-Factory and TRL train
them; on hand-made ids and on the tiny model's real chat template."""
from pathlib import Path

from cader.train.collate import chat_messages
from cader.train.formats import read_source
from cader.train.turns import IGNORE_INDEX, assistant_spans, labels_for_spans

SHAREGPT = Path(__file__).resolve().parent / "fixtures" / "llamafactory_sharegpt"
S, E, A, U = 1, 2, 7, 9     # <|im_start|>, <|im_end|>, "assistant\n", "user\n"


def test_spans_by_hand():
    ids = [S, U, 5, 5, E, S, A, 6, 6, E, S, U, 5, E, S, A, 8, E]
    assert assistant_spans(ids, S, E, [A]) == [(7, 9), (16, 17)]
    labels = labels_for_spans(ids, assistant_spans(ids, S, E, [A]))
    assert labels == [IGNORE_INDEX] * 7 + [6, 6, E] + [IGNORE_INDEX] * 6 + [8, E]


def test_open_last_turn_and_keep():
    ids = [S, U, 5, E, S, A, 6, 6, 6]                     # cut before its <|im_end|>
    assert assistant_spans(ids, S, E, [A]) == [(6, 8)]
    assert labels_for_spans(ids, [(6, 8)], keep=7) == [IGNORE_INDEX] * 6 + [6]


def test_no_assistant_turn_and_empty_turn():
    assert assistant_spans([S, U, 5, E], S, E, [A]) == []
    assert assistant_spans([S, A, E], S, E, [A]) == [(2, 2)]   # an empty turn still learns to stop


def test_every_assistant_turn_of_a_multi_turn_row_on_the_real_template(tiny_model_dir):
    from cader.vlm.loading import load_processor

    processor = load_processor(str(tiny_model_dir))
    tok = processor.tokenizer
    sample = next(s for s in read_source("sharegpt", SHAREGPT / "glaive_toolcall_en_demo.json")
                  if sum(t.role == "assistant" for t in s.turns) == 2)
    text = processor.apply_chat_template(chat_messages(sample), tokenize=False, enable_thinking=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    spans = assistant_spans(ids, tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>"),
                            tok("assistant\n", add_special_tokens=False)["input_ids"])
    decoded = [tok.decode(ids[s:e + 1]) for s, e in spans]
    wants = [t.text for t in sample.turns if t.role == "assistant"]
    assert len(decoded) == 2
    for got, want in zip(decoded, wants):
        assert got.endswith(want + "<|im_end|>")   # the template may open a turn with an empty think block
