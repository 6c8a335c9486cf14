"""The synthetic verifiable task world of the embedded CPU default.

Three problem families with exact integer gold answers:

- ``add``:   ``What is 347 + 589?``        (operands of ``min_digits``..``max_digits`` digits)
- ``sub``:   ``What is 589 - 347?``        (the larger operand first, so answers are >= 0)
- ``expr3``: ``What is 23 + 45 - 17?``     (three operands, two steps, intermediate results >= 0)

Each problem is stated in one language of ``prompt_langs`` (``en``: ``What is 347 + 589?``; ``zh``:
``347 + 589 等于多少？``), chosen by a hash of its content, so that the RL prompts and the held-out
set are multilingual in the same shares (DeepSeek-R1's language-mixing problem arises with
multilingual prompts); a row's ``lang`` is its problem's language, which the language-consistency
reward and the mixing measure take as the target.

Difficulty is the operand length in digits. Each problem also has a worked solution ("trace") that
computes it digit by digit, with carries and borrows, in English, in Chinese, or switching from one
to the other midway (the mixed-language chains of thought that R1-Zero is known for). Traces feed the
tiny base model's pretraining corpus and nothing else: RL and evaluation only see problems and
gold answers.

Train, validation and test are disjoint *by construction*: a problem's split is a function of its
content (a hash of its canonical form), not of the seed or of the order of generation, so no seed,
size or difficulty setting can ever put a test problem in the train split. ``val`` is for choosing
settings (learning rates, steps, corpus shares); ``test`` is read only for reported figures.
Generation is deterministic under a seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass

FAMILIES = ("add", "sub", "expr3")
TRACE_LANGS = ("en", "zh", "mix")
PROMPT_LANGS = ("en", "zh")
SPLITS = ("train", "val", "test")

# The words of a trace, per language. Chinese words are single characters or pairs (each CJK
# character counts as one word for the language-consistency measure).
WORDS = {
    "en": {"write": "write", "carry": "carry", "borrow": "borrow", "get": "get",
           "first": "first", "then": "then", "answer": "answer", "sep": ", ", "stop": "; ", "colon": ": ",
           "check": "check", "vs": "vs", "ok": "ok", "not": "not", "wait": "wait", "open": "(", "close": ")"},
    "zh": {"write": "写", "carry": "进", "borrow": "借", "get": "得",
           "first": "先算", "then": "再算", "answer": "答案", "sep": "，", "stop": "；", "colon": "：",
           "check": "验算", "vs": "比", "ok": "对", "not": "不是", "wait": "等等", "open": "（", "close": "）"},
}


@dataclass(frozen=True)
class Problem:
    family: str
    operands: tuple[int, ...]
    ops: tuple[str, ...]  # len(operands) - 1 operators, each "+" or "-"
    lang: str = "en"  # the language the problem is stated in (one of PROMPT_LANGS)

    @property
    def expression(self) -> str:
        expr = str(self.operands[0])
        for op, x in zip(self.ops, self.operands[1:], strict=True):
            expr += f" {op} {x}"
        return expr

    @property
    def text(self) -> str:
        return f"{self.expression} 等于多少？" if self.lang == "zh" else f"What is {self.expression}?"

    @property
    def answer(self) -> int:
        value = self.operands[0]
        for op, x in zip(self.ops, self.operands[1:], strict=True):
            value = value + x if op == "+" else value - x
        return value

    @property
    def canonical(self) -> str:
        """The content, whatever the language (splits and ids depend on this alone)."""
        return f"{self.family}:What is {self.expression}?"

    @property
    def id(self) -> str:
        return f"{self.family}-{hashlib.sha256(self.canonical.encode()).hexdigest()[:12]}"

    @property
    def digits(self) -> int:
        return max(len(str(x)) for x in self.operands)


def split_of(problem: Problem, test_percent: int, val_percent: int = 0) -> str:
    """'test' for a fixed ``test_percent`` share of all possible problems, 'val' for the next
    ``val_percent``, chosen by content hash (so adding a val split moves no test problem)."""
    bucket = int(hashlib.sha256(("split|" + problem.canonical).encode()).hexdigest(), 16) % 100
    if bucket < test_percent:
        return "test"
    return "val" if bucket < test_percent + val_percent else "train"


def lang_of(problem: Problem, shares: dict[str, float]) -> str:
    """The language ``problem`` is stated in: a function of its content, drawn with ``shares``."""
    if len(shares) == 1:
        return next(iter(shares))
    u = int(hashlib.sha256(("lang|" + problem.canonical).encode()).hexdigest(), 16) % 10**6 / 10**6
    total, acc = sum(shares.values()), 0.0
    for lang, share in shares.items():
        acc += share / total
        if u < acc:
            return lang
    return lang


def in_language(problem: Problem, shares: dict[str, float]) -> Problem:
    return dataclasses.replace(problem, lang=lang_of(problem, shares))


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def sample_problem(rng: random.Random, family: str, min_digits: int, max_digits: int) -> Problem:
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    if family == "add":
        d1, d2 = rng.randint(min_digits, max_digits), rng.randint(min_digits, max_digits)
        return Problem("add", (_operand(rng, d1), _operand(rng, d2)), ("+",))
    if family == "sub":
        d1, d2 = rng.randint(min_digits, max_digits), rng.randint(min_digits, max_digits)
        a, b = _operand(rng, d1), _operand(rng, d2)
        return Problem("sub", (max(a, b), min(a, b)), ("-",))
    # expr3: one digit shorter operands than the other families (two steps per problem).
    hi = max(min_digits, max_digits - 1)
    while True:
        xs = tuple(_operand(rng, rng.randint(min_digits, hi)) for _ in range(3))
        ops = (rng.choice("+-"), rng.choice("+-"))
        p = Problem("expr3", xs, ops)
        if Problem("expr3", xs[:2], ops[:1]).answer >= 0 and p.answer >= 0:
            return p


@dataclass(frozen=True)
class TaskWorld:
    """A deterministic problem set. ``rows(split)`` gives the dataset rows every stage consumes."""

    seed: int
    families: tuple[str, ...]
    min_digits: int
    max_digits: int
    n_train: int
    n_test: int
    test_percent: int
    n_val: int = 0
    val_percent: int = 0
    prompt_langs: tuple[tuple[str, float], ...] = (("en", 1.0),)  # (language, share) pairs

    def __post_init__(self):
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise ValueError(f"unknown task families {unknown}; known: {', '.join(FAMILIES)}")
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}")
        if not 0 < self.test_percent < 100 or not 0 <= self.val_percent < 100 - self.test_percent:
            raise ValueError(f"need 0 < test_percent and 0 <= val_percent with test_percent + val_percent < 100, "
                             f"got {self.test_percent}, {self.val_percent}")
        if self.n_val and not self.val_percent:
            raise ValueError(f"n_val is {self.n_val} but val_percent is 0: no problem can be in the val split")
        langs = [lang for lang, _ in self.prompt_langs]
        if not langs or any(lang not in PROMPT_LANGS for lang in langs) or any(w <= 0 for _, w in self.prompt_langs):
            raise ValueError(f"prompt_langs must give positive shares of {PROMPT_LANGS}, got {dict(self.prompt_langs)}")

    @classmethod
    def from_recipe(cls, recipe) -> TaskWorld:
        """The task world of a recipe's ``task_world`` section (an error naming the recipe if none)."""
        tw = recipe.task_world
        if tw is None:
            raise ValueError(f"recipe {recipe.name!r} has no task_world section")
        return cls(seed=tw.seed, families=tuple(tw.families), min_digits=tw.min_digits, max_digits=tw.max_digits,
                   n_train=tw.n_train, n_test=tw.n_test, test_percent=tw.test_percent, n_val=tw.n_val,
                   val_percent=tw.val_percent, prompt_langs=tuple(tw.prompt_langs.items()))

    @property
    def langs(self) -> dict[str, float]:
        return dict(self.prompt_langs)

    def split_of(self, problem: Problem) -> str:
        return split_of(problem, self.test_percent, self.val_percent)

    def problems(self) -> dict[str, list[Problem]]:
        rng = random.Random(self.seed)
        want = {"train": self.n_train, "val": self.n_val, "test": self.n_test}
        out: dict[str, list[Problem]] = {s: [] for s in SPLITS}
        seen: set[str] = set()
        attempts = 0
        while any(len(out[s]) < want[s] for s in out):
            attempts += 1
            if attempts > 100 * sum(want.values()) + 10_000:
                raise ValueError("task world too small for the requested sizes: widen the digit range")
            p = sample_problem(rng, rng.choice(self.families), self.min_digits, self.max_digits)
            split = self.split_of(p)
            if p.canonical in seen or len(out[split]) >= want[split]:
                continue
            seen.add(p.canonical)
            out[split].append(in_language(p, self.langs))
        return out

    def rows(self, split: str) -> list[dict]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return [problem_row(p, split) for p in self.problems()[split]]


def problem_row(p: Problem, split: str) -> dict:
    return {
        "id": p.id,
        "problem": p.text,
        "answer": str(p.answer),
        "split": split,
        "family": p.family,
        "difficulty": p.digits,
        "verifier": "math",
        "lang": p.lang,
    }


# ---------------------------------------------------------------------------------------------
# Worked solutions (pretraining corpus only)
# ---------------------------------------------------------------------------------------------


def _add_steps(a: int, b: int) -> list[tuple]:
    """Digit-by-digit addition, least significant first: ('add', expr, digit, carry_out)."""
    steps, carry = [], 0
    da, db = str(a)[::-1], str(b)[::-1]
    for i in range(max(len(da), len(db))):
        terms = [int(d[i]) for d in (da, db) if i < len(d)] + ([carry] if carry else [])
        total = sum(terms)
        carry = total // 10
        steps.append(("add", "+".join(map(str, terms)) + f"={total}", str(total % 10), carry))
    if carry:
        steps.append(("lead", "", str(carry), 0))
    return steps


def _sub_steps(a: int, b: int) -> list[tuple]:
    """Digit-by-digit subtraction a - b (a >= b): ('sub', expr, digit, borrow_out)."""
    steps, borrow = [], 0
    da, db = str(a)[::-1], str(b)[::-1]
    for i in range(len(da)):
        top, bot = int(da[i]), int(db[i]) if i < len(db) else 0
        x = top - borrow
        prefix = f"{top}-1={x}|" if borrow else ""  # '|' becomes the language's separator
        borrow = 1 if x < bot else 0
        steps.append(("sub", prefix + f"{x + 10 * borrow}-{bot}={x + 10 * borrow - bot}",
                      str(x + 10 * borrow - bot), borrow))
    return steps


def one_off(value: int) -> int:
    """A digit fact's value as a slip or a misconception writes it: one more ("8+4=13"), or one less when
    its last digit is 9 ("5+4=8"), so that the digit written stays a digit."""
    return value - 1 if value % 10 == 9 else value + 1


def _slipped(steps: list[tuple], position: int) -> tuple[list[tuple], int]:
    """The steps with a slip at digit ``position``: the sum or difference of that step written one off
    ("8+4=13 write 3"), the carry or borrow unchanged. Returns (steps, the change in the result: ±10^k)."""
    kind, expr, digit, flag = steps[position]
    head, _, value = expr.rpartition("=")
    wrong = one_off(int(value))
    delta = wrong - int(value)
    out = list(steps)
    out[position] = (kind, f"{head}={wrong}", str(wrong % 10), flag)
    return out, delta * 10**position


def fact_key(kind: str, expr: str) -> str | None:
    """The digit fact a step states, without its value ("8+4+1=13" → "8+4+1"; a borrow step's main fact,
    "3-1=2|12-7=5" → "12-7"); None for a step with no fact (a lone digit, the final carry)."""
    fact = expr.rpartition("|")[2]
    if kind == "lead" or not ("+" in fact or "-" in fact):
        return None
    return fact.rpartition("=")[0]


def misconceived_facts(share: float) -> frozenset[str]:
    """The digit facts a corpus with misconceptions always writes one off: ``share`` of every fact the
    digit methods state (a+b, a+b+1, x-y), chosen by a hash of the fact (the same set for every seed)."""
    facts = {f"{a}+{b}" for a in range(10) for b in range(10)} | {f"{a}+{b}+1" for a in range(10) for b in range(10)}
    facts |= {f"{x}-{y}" for x in range(20) for y in range(10) if 0 <= x - y <= 9}
    chosen = {f for f in facts if int(hashlib.sha256(f"misconception|{f}".encode()).hexdigest()[:8], 16) < share * 2**32}
    return frozenset(chosen)


def _misconceived(steps: list[tuple], facts: frozenset[str]) -> tuple[list[tuple], int]:
    """The steps with every fact of ``facts`` written one off (as :func:`_slipped`), and the change in the
    result."""
    change = 0
    for k, (kind, expr, _, _) in enumerate(steps):
        if fact_key(kind, expr) in facts:
            steps, delta = _slipped(steps, k)
            change += delta
    return steps, change


def _operations(p: Problem, slip: tuple[int, int] | None = None,
                misconceptions: frozenset[str] = frozenset()) -> list[tuple] | None:
    """The operations of a worked solution of ``p``: [(a, op, b, steps, result)], each applied to the
    previous result. ``slip`` = (operation, digit position): that operation's step at that position is
    written one off, and the operations after it go on from the wrong result. None when the slip would
    make a value negative (the digit-by-digit methods need a >= b)."""
    out, value = [], p.operands[0]
    for j, (op, x) in enumerate(zip(p.ops, p.operands[1:], strict=True)):
        if op == "-" and value < x:
            return None
        steps = _add_steps(value, x) if op == "+" else _sub_steps(value, x)
        result = value + x if op == "+" else value - x
        if misconceptions:  # every misconceived fact written one off; the next operation goes on from there
            steps, change = _misconceived(steps, misconceptions)
            result += change
            if result < 0:
                return None
        if slip is not None and slip[0] == j:
            if slip[1] >= len(steps) or not ("+" in steps[slip[1]][1] or "-" in steps[slip[1]][1]):
                return None  # only a fact can slip (not a lone digit, not the final carry)
            if fact_key(*steps[slip[1]][:2]) in misconceptions:
                return None  # already written one off
            steps, delta = _slipped(steps, slip[1])
            result += delta
            if result < 0:
                return None
        out.append((value, op, x, steps, result))
        value = result
    return out


# how a check is written (data/taskworld.py _render_steps): the corpus's first form, and two that compare
CHECK_FORMS = ("plain", "compare_after", "compare_first")


def _check_of(kind: str, expr: str) -> tuple[str, int, int]:
    """A digit step's check: its fact undone by the inverse operation, (the check's text, its value, the
    value it must match). Addition: the sum less the other terms ("8+4=12" → "12-4=8", "8+4+1=13" →
    "13-1-4=8"); subtraction: the difference plus the subtrahend ("16-7=9" → "9+7=16"). A check never
    looks like a step of its own operation. ``expr`` is the step's main fact (after any borrow)."""
    head, _, value = expr.rpartition("=")
    if kind == "add":
        terms = head.split("+")
        rest = list(reversed(terms[1:]))
        undone = int(value) - sum(map(int, rest))
        return f"{value}-" + "-".join(rest) + f"={undone}", undone, int(terms[0])
    top, bottom = head.split("-")
    return f"{value}+{bottom}={int(value) + int(bottom)}", int(value) + int(bottom), int(top)


def _render_steps(steps, lang_of_step, *, check: bool = False, right: list[tuple] | None = None,
                  check_form: str = "plain") -> str:
    """Join digit steps into text; each step (and the separator after it) in its own language.

    ``check``: every step's fact is followed by its check ("8+4=12 (check 12-4=8 ok) write 2"); a step
    whose fact is wrong in ``steps`` fails its check and is done again from ``right``, the right steps
    ("8+4=13 (check 13-4=9, not 8; wait, 8+4=12) write 2"). ``check_form`` (:data:`CHECK_FORMS`): ``plain`` as
    above; ``compare_after``: the value the check must match written after the check's, before the verdict
    ("8+4=13 (check 13-4=9 vs 8 not; wait, 8+4=12)"); ``compare_first``: that value written first, copied
    from the step before the check computes anything ("8+4=13 (check 8 vs 13-4=9 not; wait, 8+4=12)")."""
    out = ""
    for i, (kind, expr, digit, flag) in enumerate(steps):
        w, en = WORDS[lang_of_step(i)], lang_of_step(i) == "en"
        sp = " " if en else ""
        if kind == "lead":  # the final carry becomes the leading digit
            text = f"{w['write']}{sp}{digit}"
        else:
            expr = expr.replace("|", w["sep"])
            if check and ("+" in steps[i][1] or "-" in steps[i][1]):  # a lone digit ("6=6") has nothing to check
                prefix, _, fact = expr.rpartition(w["sep"]) if "|" in steps[i][1] else ("", "", expr)
                shown, value, target = _check_of(kind, fact)
                if check_form == "compare_after":  # the value to match, written beside the check's before the verdict
                    shown = f"{shown}{sp}{w['vs']}{sp}{target}"
                elif check_form == "compare_first":  # ... or before the check, copied while only the step is there
                    shown = f"{target}{sp}{w['vs']}{sp}{shown}"
                if value == target:
                    note = f"{w['check']}{sp}{shown}{sp if en else w['sep']}{w['ok']}"
                else:  # the fact was wrong: redo the step
                    kind, expr, digit, flag = right[i]
                    expr = expr.replace("|", w["sep"])
                    redo = expr.rpartition(w["sep"])[2] if "|" in right[i][1] else expr
                    verdict = (f"{w['sep']}{w['not']}{sp}{target}" if check_form == "plain" else
                               f"{sp if en else w['sep']}{w['not']}")
                    note = f"{w['check']}{sp}{shown}{verdict}{w['stop']}{w['wait']}{w['sep']}{redo}"
                    expr = fact if not prefix else f"{prefix}{w['sep']}{fact}"
                text = f"{expr}{sp}{w['open']}{note}{w['close']}{sp}{w['write']}{sp}{digit}"
            else:
                text = f"{expr}{sp}{w['write']}{sp}{digit}"
            if flag:
                word = w["carry"] if kind == "add" else w["borrow"]
                text += f"{sp}{word}{sp}1"
        out += text + (w["sep"] if i < len(steps) - 1 else "")
    return out


class _Languages:
    """The language of each digit step of a trace, in order ('mix': one switch at a random step)."""

    def __init__(self, lang: str, n_steps: int, rng: random.Random):
        if lang == "mix":
            first = rng.choice(("en", "zh"))
            switch_at = rng.randint(1, max(1, n_steps - 1))
            self.langs = [first if i < switch_at else ("zh" if first == "en" else "en") for i in range(n_steps)]
        else:
            self.langs = [lang] * max(1, n_steps)
        self.k = 0  # the next digit step

    def at(self, i: int) -> str:
        return self.langs[min(i, len(self.langs) - 1)]

    def last(self) -> dict:
        """The words of the trace's closing language (the answer, and the stops between operations)."""
        return WORDS[self.langs[-1]]


def trace(p: Problem, lang: str, rng: random.Random, *, check: bool = False, slip: bool = False) -> str:
    """A worked solution of ``p`` in ``lang`` ('en', 'zh', or 'mix': switches language midway); the text
    of :func:`solution`."""
    return solution(p, lang, rng, check=check, slip=slip)[0]


def solution(p: Problem, lang: str, rng: random.Random, *, check: bool = False, slip: bool = False,
             slip_rng: random.Random | None = None, misconceptions: frozenset[str] = frozenset(),
             check_form: str = "plain") -> tuple[str, int]:
    """A worked solution of ``p`` in ``lang`` and the answer it ends with.

    ``slip``: one digit step's fact is written one off ("8+4=13 write 3"), as worked solutions in a real
    corpus sometimes are; unchecked, the solution goes on from it and ends with a wrong answer.
    ``check``: every digit step's fact is checked right after it, undone by the inverse operation
    ("8+4=12 (check 12-4=8 ok) write 2"); a slipped fact fails its check and the step is done again
    ("8+4=13 (check 13-4=9, not 8; wait, 8+4=12) write 2"), so a checked solution always ends right. A
    slip is placed only where every value stays non-negative (a problem with no such place gets none),
    drawn from ``slip_rng`` (default ``rng``; the corpus passes its own, so that slips move no other
    draw of the corpus).
    ``misconceptions``: digit facts (:func:`misconceived_facts`) that the solution writes one off every
    time they occur, not by chance: unchecked, it ends wrong whenever the problem needs one; checked,
    each fails its check and is done again (a problem whose misconceptions would make a value negative is
    solved right). With ``slip`` too, the slip falls on a fact that is not misconceived.
    ``check_form``: how a check is written (:data:`CHECK_FORMS`, :func:`_render_steps`): ``compare_after``
    and ``compare_first`` write the value the check must match beside the check's own ("check 12-4=8 vs 8
    ok", "check 8 vs 12-4=8 ok"), so that the verdict compares two numbers side by side."""
    if check_form not in CHECK_FORMS:
        raise ValueError(f"unknown check form {check_form!r}; known: {CHECK_FORMS}")
    if lang not in TRACE_LANGS:
        raise ValueError(f"unknown trace language {lang!r}; known: {TRACE_LANGS}")
    right = _operations(p)
    ops, slip_at = right, None
    if misconceptions and not check:
        ops = _operations(p, misconceptions=misconceptions) or right
    if slip:
        places = [(j, k) for j, (_, _, _, steps, _) in enumerate(right) for k in range(len(steps))
                  if fact_key(*steps[k][:2]) not in misconceptions]
        (slip_rng or rng).shuffle(places)
        written_wrong = misconceptions if ops is not right else frozenset()  # what the unchecked ops write one off
        for place in places:
            slipped = _operations(p, place, written_wrong)
            if slipped is not None:
                # checked: the slip is caught at its step and the rest goes on from the right values
                ops, slip_at = (right, place) if check else (slipped, None)
                break
    # where a mixed trace may switch: a bound on the digit steps (one per digit of the longer operand,
    # and one for a carry), as the corpus has always drawn it
    n_steps = sum(len(str(max(a, b))) + 1 for a, _, b, _, _ in ops)
    langs = _Languages(lang, n_steps, rng)

    pieces = []
    for j, (a, op, b, steps, result) in enumerate(ops):
        base = langs.k
        shown = steps
        here = slip_at[1] if slip_at is not None and slip_at[0] == j else None
        if misconceptions and check:  # each misconceived fact written, checked, caught and redone
            shown, _ = _misconceived(steps, misconceptions)
        if here is not None:
            shown, _ = _slipped(shown, here)
        body = _render_steps(shown, lambda i, base=base: langs.at(base + i), check=check, right=steps,
                             check_form=check_form)
        langs.k += len(steps)
        if len(ops) > 1:
            w, we = WORDS[langs.at(base)], WORDS[langs.at(langs.k)]
            head = w["first"] if j == 0 else w["then"]
            body = f"{head} {a}{op}{b}{w['colon']}{body}{we['sep']}{we['get']}{_sp(we)}{result}"
        pieces.append(body)
    answer = ops[-1][-1]
    w_end = langs.last()
    text = w_end["stop"].join(pieces)
    return text + f"{w_end['stop']}{w_end['answer']}{_sp(w_end)}{answer}", answer


def _sp(w: dict) -> str:
    return " " if w is WORDS["en"] else ""
