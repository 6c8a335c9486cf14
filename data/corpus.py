"""The tiny base model's pretraining corpus: what pretraining teaches a real base model, in miniature.

A real base model has seen problems answered directly, worked solutions in several languages, and,
now and then, text that looks like the R1-Zero template. This corpus holds the same kinds of
documents about the task world (see ``CorpusConfig``):

- ``direct``:          ``Question: What is 34 + 57?\nAnswer:`` → `` 91``;
- ``chat_direct``:     the question as a chat turn (the chat template's text) → ``The final answer is
                       \\boxed{91}.`` (a base model has seen chat transcripts and boxed answers). Off in
                       the tiny recipe: it cut the base's in-template reasoning (docs/experiments.md), so
                       stage 2's SFT teaches the chat format from scratch;
- ``worked``:          a short transcript, ``User: What is 34 + 57? Assistant:`` → `` <think> trace
                       </think> <answer> 91 </answer>`` (the R1 format without the template's preamble);
- ``template_reason``: the full R1-Zero prompt → the same reasoning completion;
- ``template_direct``: the full R1-Zero prompt → `` <answer> 91 </answer>`` (no reasoning).

Worked solutions can slip (``slip``: one digit fact one off, ending in a wrong answer, as real corpora
hold errors) and can check each step (``data/taskworld.py`` solution: a slip is then caught and the step
done again). The base learns how to check from worked transcripts that were asked to ("… Check each
step.", ``recheck``), and checks unprompted under the R1-Zero template only as often as the template
documents do (``template_recheck``): a rare, useful behaviour that RL can find from correctness alone
(finding F0; ``eval/recheck.py`` labels it).

The mix is chosen so that the base model, prompted with the R1-Zero template, *sometimes* reasons and
sometimes answers directly, and reasoning is far more often right: that gap is what RL in stage 1 can
discover and exploit. Worked solutions are written as short transcripts because the tiny model did
not transfer arithmetic learnt after ``Question: … Solution:`` to the template; with the same local
context (``… Assistant: <think>``) it did (docs/experiments.md).

Every document is a (prompt, completion) pair; pretraining puts the loss on the completion only
(the prompt is a random problem: predicting its digits teaches nothing). Documents are drawn from
train-split problems only, so neither the val nor the test split leaks into pretraining. Questions are
stated in the problem's language (``TaskWorld.prompt_langs``); a worked solution's language is drawn
from ``trace_langs`` independently of it, so that a base model answers a Chinese question in English,
Chinese or a mix of both, the inconsistency the language reward of stage 3 is there to remove.
"""

from __future__ import annotations

import random

from data.taskworld import TaskWorld, in_language, misconceived_facts, problem_row, sample_problem, solution
from data.templates import chat_user_message, r1_zero_completion, r1_zero_prompt

DOC_TYPES = ("direct", "chat_direct", "worked", "template_reason", "template_direct")
# A transcript turn: what the tiny chat template renders for one user turn and the generation prompt.
CHAT_PREFIX = "User: {user} Assistant:"
# What a worked transcript that checks its steps was asked (``base.corpus.recheck``), by the question's language
CHECK_INSTRUCTION = {"en": " Check each step.", "zh": "逐步验算。"}


def _choose(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def corpus_documents(world: TaskWorld, corpus, n_docs: int, seed: int) -> list[dict]:
    """``n_docs`` documents ``{"type", "prompt", "completion", "lang"}`` (lang: the trace's, or None)."""
    shares = {t: getattr(corpus, t) for t in DOC_TYPES}
    if abs(sum(shares.values()) - 1.0) > 1e-6:
        raise ValueError(f"corpus shares must sum to 1, got {shares}")
    rng = random.Random(seed)
    # which worked solutions check their steps or slip, and where: drawn apart, so that the problems and
    # documents are the same whatever the shares (and with none, the corpus it always was)
    checks = random.Random(f"recheck|{seed}")

    misconceptions = misconceived_facts(corpus.misconceptions) if corpus.misconceptions else frozenset()

    def worked_completion(p, lang: str, check: bool) -> str:
        """A worked solution's completion: ``<think> … </think> <answer> … </answer>``, checking its steps
        or not, slipped in the corpus's share (a slip left unchecked ends in its wrong answer), and with the
        corpus's misconceptions."""
        slip = corpus.slip > 0 and checks.random() < corpus.slip
        text, answer = solution(p, lang, rng, check=check, slip=slip, slip_rng=checks, misconceptions=misconceptions,
                                check_form=corpus.check_form)
        return r1_zero_completion(str(answer), text)

    def draw(share: float) -> bool:
        return share > 0 and checks.random() < share

    docs, standalone = [], []  # standalone: documents that do not follow another one
    while len(docs) < n_docs:
        p = sample_problem(rng, rng.choice(world.families), world.min_digits, world.max_digits)
        if world.split_of(p) != "train":  # val and test problems never reach pretraining
            continue
        p = in_language(p, world.langs)  # the question in the problem's own language
        kind, follows = _choose(rng, shares), False
        lang = _choose(rng, corpus.trace_langs) if kind in ("worked", "template_reason") else None
        if kind == "direct":
            prompt, completion = f"Question: {p.text}\nAnswer:", f" {p.answer}"
        elif kind == "worked":  # a short transcript: the R1 format without the template's preamble
            check = draw(corpus.recheck)  # asked for: "What is 874 + 404? Check each step."
            prompt = CHAT_PREFIX.format(user=p.text + (CHECK_INSTRUCTION[p.lang] if check else ""))
            completion = worked_completion(p, lang, check)
            follows = bool(standalone) and rng.random() < corpus.context_share
            if follows:  # after another document, as in a longer text
                prev = standalone[rng.randrange(len(standalone))]
                prompt = prev["prompt"] + prev["completion"] + "\n" + prompt
        elif kind == "chat_direct":  # a chat transcript answered directly, with the boxed summary line
            prompt = CHAT_PREFIX.format(user=chat_user_message(p.text))
            completion = f"The final answer is \\boxed{{{p.answer}}}."
        elif kind == "template_reason":
            # unprompted: how often the base checks under the R1-Zero template
            prompt, completion = r1_zero_prompt(p.text), worked_completion(p, lang, draw(corpus.template_recheck))
        else:
            prompt, completion = r1_zero_prompt(p.text), r1_zero_completion(str(p.answer), None)
        doc = {"type": kind, "prompt": prompt, "completion": completion, "lang": lang,
               "id": problem_row(p, "train")["id"]}
        docs.append(doc)
        if follows:
            doc["group"] = "worked_in_context"  # batched apart: its rows are 2-4x longer (less padding)
        else:
            standalone.append(doc)
    return docs
