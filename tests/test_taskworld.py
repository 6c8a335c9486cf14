"""The task world: deterministic under a seed, train/test disjoint by construction, exact answers."""

import random

import pytest

from data.corpus import corpus_documents
from data.taskworld import FAMILIES, Problem, TaskWorld, split_of, trace
from eval.language import is_mixed, language_fraction
from stages.pipeline.recipe import CorpusConfig


def world(**kw):
    args = dict(seed=7, families=FAMILIES, min_digits=2, max_digits=4, n_train=800, n_test=200, test_percent=10)
    args.update(kw)
    return TaskWorld(**args)


def test_deterministic_under_seed():
    assert world().rows("train") == world().rows("train")
    assert world().rows("test") == world().rows("test")
    assert world(seed=8).rows("train") != world().rows("train")


def test_train_and_test_are_disjoint_whatever_the_seed():
    test_problems = {r["problem"] for r in world().rows("test")}
    for seed in range(5):
        train = {r["problem"] for r in world(seed=seed).rows("train")}
        assert not train & test_problems
    # the split is a function of content: every test row hashes to test
    for r in world().rows("test"):
        assert r["split"] == "test"


def test_rows_have_exact_answers_and_fields():
    rows = world().rows("train")
    assert len(rows) == 800 and len({r["id"] for r in rows}) == 800
    for r in rows:
        assert set(r) >= {"id", "problem", "answer", "split", "family", "difficulty"}
        expr = r["problem"].removeprefix("What is ").removesuffix("?")
        assert int(r["answer"]) == eval(expr)  # noqa: S307 - our own arithmetic strings
        assert int(r["answer"]) >= 0
    assert {r["family"] for r in rows} == set(FAMILIES)


def test_difficulty_knob_controls_digits():
    rows = world(families=("add",), min_digits=4, max_digits=4, n_train=50, n_test=5).rows("train")
    assert all(r["difficulty"] == 4 for r in rows)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="unknown task families"):
        world(families=("add", "mul"))
    with pytest.raises(ValueError, match="min_digits"):
        world(min_digits=3, max_digits=2)


@pytest.mark.parametrize("p", [
    Problem("add", (347, 589), ("+",)), Problem("add", (99, 38), ("+",)),
    Problem("sub", (6855, 756), ("-",)), Problem("sub", (1000, 1), ("-",)),
    Problem("expr3", (497, 257, 68), ("+", "-")), Problem("expr3", (74, 46, 22), ("-", "+")),
])
def test_traces_end_with_the_answer_in_each_language(p):
    rng = random.Random(0)
    en, zh = trace(p, "en", rng), trace(p, "zh", rng)
    assert en.endswith(f"answer {p.answer}") and zh.endswith(f"答案{p.answer}")
    assert language_fraction(en, "en") == 1.0
    assert language_fraction(zh, "zh") == 1.0
    mixed = [trace(p, "mix", random.Random(s)) for s in range(20)]
    assert all(is_mixed(m, "en") or is_mixed(m, "zh") for m in mixed)


def test_corpus_uses_train_problems_only_and_follows_the_mix(monkeypatch):
    import data.corpus as corpus_module

    w = world(val_percent=10)
    drawn = []  # every problem that made it into a document (the corpus states it in its language next)
    real = corpus_module.in_language
    monkeypatch.setattr(corpus_module, "in_language", lambda p, langs: drawn.append(p) or real(p, langs))
    docs = corpus_documents(w, CorpusConfig(), 2000, seed=0)
    assert len(drawn) == len(docs) and all(split_of(p, 10, 10) == "train" for p in drawn)
    share = sum(d["type"] == "worked" for d in docs) / len(docs)
    assert abs(share - CorpusConfig().worked) < 0.05
    # the filter is what keeps them out: without it, val and test problems are drawn
    drawn.clear()
    monkeypatch.setattr(TaskWorld, "split_of", lambda self, p: "train")
    corpus_documents(w, CorpusConfig(), 2000, seed=0)
    assert {split_of(p, 10, 10) for p in drawn} == {"train", "val", "test"}


def test_splits_are_disjoint_by_content_and_val_moves_no_test_problem():
    old = world(n_train=300, n_test=100)
    new = world(n_train=300, n_test=100, n_val=100, val_percent=10)
    assert [r["id"] for r in old.rows("test")] == [r["id"] for r in new.rows("test")]
    ids = {s: {r["id"] for r in new.rows(s)} for s in ("train", "val", "test")}
    assert len(ids["val"]) == 100 and not ids["train"] & ids["val"] and not ids["val"] & ids["test"]
    for split in ids:
        assert all(r["split"] == split for r in new.rows(split))
    p = Problem("add", (12, 34), ("+",))
    assert split_of(p, 10, 10) == split_of(p, 10, 10)  # a function of the content alone
    assert {split_of(Problem("add", (a, 2), ("+",)), 10, 10) for a in range(10, 99)} == {"train", "val", "test"}


def test_problems_are_stated_in_their_language_by_content():
    w = world(prompt_langs=(("en", 0.7), ("zh", 0.3)))
    rows = w.rows("train")
    zh = [r for r in rows if r["lang"] == "zh"]
    assert 0.2 < len(zh) / len(rows) < 0.4
    assert all(r["problem"].endswith("等于多少？") for r in zh)
    assert all(r["problem"].startswith("What is ") for r in rows if r["lang"] == "en")
    # the same content gets the same language and id in any world, whatever its seed
    small = {"min_digits": 1, "max_digits": 1, "n_train": 40, "n_test": 5, "prompt_langs": (("en", 0.7), ("zh", 0.3))}
    mine = {r["id"]: r for r in world(seed=1, **small).rows("train")}
    theirs = {r["id"]: r for r in world(seed=99, **small).rows("train")}
    common = mine.keys() & theirs.keys()
    assert common and all(mine[i]["lang"] == theirs[i]["lang"] for i in common)
    with pytest.raises(ValueError, match="prompt_langs"):
        world(prompt_langs=(("xx", 1.0),))


def test_corpus_transcripts_in_context_and_chat_documents():
    from data.corpus import CHAT_PREFIX
    from data.templates import chat_user_message

    cfg = CorpusConfig(direct=0.02, chat_direct=0.08)
    docs = corpus_documents(world(), cfg, 3000, seed=1)
    worked = [d for d in docs if d["type"] == "worked"]
    in_context = [d for d in worked if d.get("group") == "worked_in_context"]
    assert abs(len(in_context) / len(worked) - cfg.context_share) < 0.06
    for d in in_context[:50]:  # exactly one earlier, standalone document, then the transcript
        head, _, tail = d["prompt"].rpartition("\nUser: ")
        assert head and tail.endswith(" Assistant:") and "\nUser: " not in head.split("\n", 1)[-1][-40:]
        assert d["completion"].startswith(" <think> ")
    chat = [d for d in docs if d["type"] == "chat_direct"]
    assert abs(len(chat) / len(docs) - cfg.chat_direct) < 0.03
    problem = chat[0]["prompt"].split(CHAT_INSTRUCTION_LINE)[1].split(" Assistant:")[0]
    assert chat[0]["prompt"] == CHAT_PREFIX.format(user=chat_user_message(problem))
    assert chat[0]["completion"].startswith("The final answer is \\boxed{")


CHAT_INSTRUCTION_LINE = "within \\boxed{}.\n"


def test_the_corpus_without_rechecks_is_the_corpus_it_was_and_with_them_holds_their_share():
    """``recheck: 0`` leaves every document as before (the re-check draws use their own generator);
    a share of the worked solutions re-checks itself, and a share of those is corrected after a slip."""
    import dataclasses
    import re

    from eval.recheck import label

    def answer_text(completion: str) -> str:
        return re.search(r"<answer>\s*(\S+)\s*</answer>", completion).group(1)

    def truth(doc: dict) -> str:  # the value of the last question's expression in the prompt
        expr = re.findall(r"(\d+(?: [+-] \d+)+)(?:\?| 等于多少)", doc["prompt"])[-1]
        value, sign = 0, 1
        for token in expr.split():
            if token in "+-":
                sign = 1 if token == "+" else -1
            else:
                value += sign * int(token)
        return str(value)

    w, cfg = world(), CorpusConfig()
    plain = corpus_documents(w, cfg, 3000, seed=1)
    assert corpus_documents(w, cfg, 3000, seed=1) == plain
    mixed = corpus_documents(w, dataclasses.replace(cfg, recheck=0.2, template_recheck=0.2, slip=0.3), 3000, seed=1)
    worked = [d for d in mixed if d["type"] in ("worked", "template_reason")]
    labels = [label(d["completion"]) for d in worked]
    checked = [d for d, x in zip(worked, labels, strict=True) if x != "plain"]
    corrected = sum(x == "corrected" for x in labels) / len(checked)
    assert 0.15 < len(checked) / len(worked) < 0.25 and 0.2 < corrected < 0.4
    wrong = [d for d, x in zip(worked, labels, strict=True) if x == "plain" and answer_text(d["completion"]) != truth(d)]
    assert 0.2 < len(wrong) / (len(worked) - len(checked)) < 0.4  # unchecked slips end in a wrong answer …
    assert all(answer_text(d["completion"]) == truth(d) for d in checked)  # … checked ones never
    assert all(answer_text(d["completion"]) == truth(d) for d in plain if d["type"] in ("worked", "template_reason"))
    assert all(label(d["completion"]) == "plain" for d in plain)
