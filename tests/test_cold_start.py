"""The cold-start builder's filters and reformatting (eval/cold_start.py), on hand-made candidates."""

from data.templates import is_readable_response, think_text
from eval.cold_start import (
    DROP_REASONS,
    Candidate,
    build_cold_start,
    candidate_from_rl,
    candidate_from_user,
    longest_paragraph,
    repeat_share,
)
from stages.pipeline.recipe import ColdStartConfig

CFG = ColdStartConfig(max_samples=3, max_per_problem=1, min_reasoning_chars=10, max_reasoning_chars=200,
                      max_paragraph_chars=80, max_repeat_share=0.3)
GOOD = "4+7=11 write 1 carry 1, 3+5+1=9 write 9; answer 91"


def cand(reasoning: str, answer_given: str = "91", *, id: str = "p1", gold: str = "91", lang: str = "en") -> Candidate:
    completion = f"<think> {reasoning} </think> <answer> {answer_given} </answer>" if reasoning else "<answer> 91 </answer>"
    return Candidate(id=id, problem="What is 34 + 57?", answer=gold, reasoning=reasoning, completion=completion,
                     lang=lang, source="stage1")


def test_every_drop_reason_is_hit_and_counted():
    candidates = [
        cand(GOOD),                                                   # kept
        cand(""),                                                     # no_think
        cand(GOOD, answer_given="92"),                                # incorrect
        cand("4+7=11 write 1 carry 1，3+5+1=9 写9 进位; 答案 91"),      # mixed_language
        cand("add the ones " * 10, id="p2"),                          # long_paragraph (130 chars, one line)
        cand("carry one now\n" * 8, id="p3"),                         # repetition
        cand("so 91", id="p4"),                                       # too_short
        cand("\n".join(["step by step we add digit pairs " + str(i) for i in range(8)]), id="p5"),  # too_long
        cand(GOOD + " ", id="p1"),                                    # duplicate (whitespace only)
        cand("ones: 4+7=11, write 1, carry 1; tens: 3+5+1=9", id="p1"),  # per_problem_cap
        cand("4+7=11 so write 1 and carry; then 3+5+1=9", id="p6"),    # kept
        cand("the ones give 11 and the tens give 9 in all", id="p7"),  # kept (third)
        cand("first add ones 4+7=11 then tens 3+5+1=9", id="p8"),     # over_cap
    ]
    rows, drops = build_cold_start(candidates, CFG, seed=0)
    assert all(drops[r] == 1 for r in DROP_REASONS), drops
    assert len(rows) == 3 and sum(drops.values()) + len(rows) == len(candidates)
    for r in rows:
        user, assistant = r["messages"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        assert is_readable_response(assistant["content"]) and "\\boxed{91}" in assistant["content"]
        assert think_text(assistant["content"]).strip() in {c.reasoning for c in candidates}


def test_caps_sample_across_candidates_deterministically():
    many = [cand(f"{GOOD} variant {i}", id=f"q{i}") for i in range(10)]
    kept = [frozenset(r["id"] for r in build_cold_start(many, CFG, seed=s)[0]) for s in range(5)]
    assert all(len(k) == 3 for k in kept)
    assert kept[0] == frozenset(r["id"] for r in build_cold_start(many, CFG, seed=0)[0])  # same seed, same set
    assert any(k != {"q0", "q1", "q2"} for k in kept)  # not first-come-first-kept (early RL steps)
    assert len(set(kept)) > 1


def test_readability_measures():
    assert longest_paragraph("short\n" + "x" * 50 + "\nend") == 50
    assert repeat_share("the the the the the the the the the the") > 0.9
    assert repeat_share(GOOD) < 0.2
    assert repeat_share("too short") == 0.0


def test_candidates_from_stage1_rows_and_user_rows():
    c = candidate_from_rl({"id": "a", "problem": "What is 1 + 2?", "answer": "3", "lang": "en",
                           "completion": "<think> 1+2=3 </think> <answer> 3 </answer>"})
    assert c.reasoning == "1+2=3" and c.source == "stage1"
    u = candidate_from_user({"problem": "What is 1 + 2?", "answer": 3, "reasoning": "one plus two is three"})
    assert u.reasoning == "one plus two is three" and "\\boxed{3}" in u.completion and u.source == "user"
    rows, drops = build_cold_start([u], CFG)
    assert len(rows) == 1 and rows[0]["source"] == "user" and not drops


def test_samples_kept_by_rejection_sampling_are_not_graded_again(monkeypatch):
    import eval.cold_start as cold_start

    graded = []

    def counting(texts, golds, **kw):
        graded.extend(texts)
        return real(texts, golds, **kw)

    real = cold_start.grade_batch
    monkeypatch.setattr(cold_start, "grade_batch", counting)
    row = {"id": "a", "problem": "What is 34 + 57?", "answer": "91", "lang": "en",
           "completion": f"<think> {GOOD} </think> <answer> 91 </answer>"}
    sampled = candidate_from_rl({**row, "id": "b", "drop": None})  # kept by eval.rejection: graded there
    from_stage1 = candidate_from_rl(row)                          # stage 1's candidates file: graded here
    wrong = candidate_from_rl({**row, "id": "c", "completion": f"<think> {GOOD} </think> <answer> 92 </answer>"})
    assert (sampled.correct, from_stage1.correct, wrong.correct) == (True, None, None)
    rows, drops = build_cold_start([sampled, from_stage1, wrong], CFG)
    assert sorted(r["id"] for r in rows) == ["a", "b"] and drops["incorrect"] == 1
    assert len(graded) == 2  # the stage-1 row and the wrong one; not the rejection-kept sample
