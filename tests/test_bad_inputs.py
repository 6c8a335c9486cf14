"""Bad inputs get a clear error naming what is wrong, or are skipped and counted; nothing is lost."""

import errno

import pytest

from stages.cli import main
from stages.common import check_model_ref, save_model_atomically
from stages.rl import fit_prompts


class CharTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text)}

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True):
        text = "".join(m["content"] for m in messages)
        # as transformers 5: tokenize=True gives a BatchEncoding (two fields), not a list of ids
        return {"input_ids": list(text), "attention_mask": [1] * len(text)} if tokenize else text


def test_prompts_longer_than_the_context_are_skipped_and_counted():
    rows = [{"problem": "x" * n} for n in (5, 50, 8)]
    kept, dropped = fit_prompts(rows, lambda r: r["problem"], CharTokenizer(), 10, "data.jsonl")
    assert [len(r["problem"]) for r in kept] == [5, 8] and dropped == 1
    chat = lambda r: [{"role": "user", "content": r["problem"]}]  # noqa: E731
    assert fit_prompts(rows, chat, CharTokenizer(), 10, "data.jsonl")[1] == 1
    with pytest.raises(ValueError, match="data.jsonl: every prompt is longer than 4 tokens"):
        fit_prompts(rows, lambda r: r["problem"], CharTokenizer(), 4, "data.jsonl")


def test_a_missing_local_model_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        check_model_ref(str(tmp_path / "nope"))
    check_model_ref("Qwen/Qwen2.5-1.5B")  # a hub id is not a local path
    assert main(["base", "--recipe", "tiny", "--set", f"run_root={tmp_path}",
                 "--set", f"base.pretrained={tmp_path / 'missing-model'}"]) == 2


def test_a_full_disk_during_save_leaves_no_partial_checkpoint(tmp_path):
    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "model.safetensors").write_text("the previous checkpoint")

    class FullDisk:
        def save_pretrained(self, folder):
            folder.mkdir(parents=True)
            (folder / "model.safetensors").write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        save_model_atomically(FullDisk(), None, target)
    assert (target / "model.safetensors").read_text() == "the previous checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]  # the partial .checkpoint.tmp is gone
