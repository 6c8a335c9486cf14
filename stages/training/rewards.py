"""Rule-based reward functions for the RL stages, in TRL's reward-function form.

    f(completions, **dataset_columns) -> list[float | None]     (one value per completion)

``completions`` are strings (plain-text prompts, stage 1) or ``[{"role": "assistant", "content": …}]``
(chat prompts, later stages). Dataset columns arrive as lists, one entry per completion (TRL repeats each
row ``num_generations`` times), beside TRL's ``prompts``, ``completion_ids``, ``trainer_state``,
``log_extra`` and ``log_metric``; these functions accept them all and mostly ignore them. ``None`` means
"does not apply": TRL leaves it out of that function's mean, and out of the baseline when every function
returns None for a completion.

The registry (:data:`RULE_REWARDS`, :data:`MODEL_REWARDS`, :data:`REWARD_NAMES`) names what a recipe's
``rewards`` may weight; :func:`get_reward` builds one, or imports a custom reward by its dotted path.
"""

from __future__ import annotations

import collections
import functools
import importlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from data.templates import is_readable_response, is_well_formed, think_text
from eval.language import language_fraction
from eval.verify import gold_is_parseable, grade_batch
from stages.pipeline.recipe import MODEL_REWARD_NAMES, RULE_REWARD_NAMES

log = logging.getLogger("r1")

# Counts over the life of the process: graded_math, graded_code, gold_unparseable, grade_timeout,
# grade_error, sandbox_error, code_no_tests, code_test_error. Read them in tests and in the stage summary.
STATS: collections.Counter[str] = collections.Counter()
_stats_lock = threading.Lock()
_warned: set[str] = set()

CODE_WORKERS = min(4, os.cpu_count() or 1)


def _count(key: str, n: int = 1) -> None:
    with _stats_lock:
        STATS[key] += n


def completion_text(completion) -> str:
    """The text of one completion: the string itself, or the assistant messages' contents joined."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content", "")
        if isinstance(content, list):  # multimodal-style parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(content or "")
    return "".join(parts)


def _column(kwargs: dict, name: str, n: int, default=None) -> list:
    values = kwargs.get(name)
    return [default] * n if values is None else list(values)


# ---------------------------------------------------------------------------------------------
# Format
# ---------------------------------------------------------------------------------------------


def format_reward(completions: Sequence, **kwargs) -> list[float]:
    r"""Reward for DeepSeek-R1-Zero's format: one non-blank think block, then one answer block with content.

    1.0 for ``<think>…</think> <answer>…</answer>`` and nothing else around them, else 0.0. A blank think
    block, a blank answer or an empty ``\boxed{}`` earn 0.0 (``data.templates.is_well_formed``).

    Args:
        completions (`Sequence[str | list[dict]]`):
            The completions: strings, or lists of messages whose ``"content"`` holds the text.
        **kwargs:
            The dataset columns and TRL's extras. Not used; accepted for [`GRPOTrainer`]'s calling convention.

    Returns:
        `list[float]`: 1.0 or 0.0 per completion.

    Example:
        >>> from stages.training.rewards import format_reward
        >>> format_reward(["<think> 2+2=4 </think> <answer> 4 </answer>", "The answer is 4."])
        [1.0, 0.0]
    """
    return [1.0 if is_well_formed(completion_text(c)) else 0.0 for c in completions]


def summary_format_reward(completions: Sequence, **kwargs) -> list[float]:
    r"""Reward for the readable format of stages 2-4: one non-blank think block, then a summary with a boxed answer.

    1.0 when the completion is exactly one non-blank ``<think>…</think>`` followed by a summary that boxes a
    non-empty final answer and holds no other tags (``data.templates.is_readable_response``), else 0.0.

    Args:
        completions (`Sequence[str | list[dict]]`):
            The completions: strings, or lists of messages whose ``"content"`` holds the text.
        **kwargs:
            The dataset columns and TRL's extras. Not used; accepted for [`GRPOTrainer`]'s calling convention.

    Returns:
        `list[float]`: 1.0 or 0.0 per completion.

    Example:
        >>> from stages.training.rewards import summary_format_reward
        >>> summary_format_reward([[{"role": "assistant", "content": r"<think> 2+2=4 </think> It is \boxed{4}."}],
        ...                        [{"role": "assistant", "content": "<think> 2+2=4 </think> It is 4."}]])
        [1.0, 0.0]
    """
    return [1.0 if is_readable_response(completion_text(c)) else 0.0 for c in completions]


# ---------------------------------------------------------------------------------------------
# Accuracy
# ---------------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str:
    """The program in a response: the answer region (last <answer> block, else the text after the
    last </think>, else everything), and in it the last fenced code block if there is one."""
    close = completion.rfind("</answer>")
    open_ = completion.rfind("<answer>", 0, close) if close >= 0 else -1
    if open_ >= 0:  # the last complete block (found from the end: linear, unlike a lazy regex per "<answer>")
        region = completion[open_ + len("<answer>"):close]
    else:
        end = completion.rfind("</think>")
        region = completion[end + len("</think>"):] if end >= 0 else completion
    fences = _FENCE_RE.findall(region)
    return (fences[-1] if fences else region).strip()


def _tests_of(value) -> list[str]:
    """A row's tests: a list of assert statements, or a JSON string holding one."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    return [str(t) for t in value]


def _math_rewards(texts: list[str], golds: list[str], problems: list[str | None]) -> list[float | None]:
    out: list[float | None] = [None] * len(texts)
    parseable = {g: gold_is_parseable(g) for g in set(golds)}  # cached per gold string in eval.verify
    todo = [i for i, g in enumerate(golds) if parseable[g]]
    bad = len(texts) - len(todo)
    if bad:
        _count("gold_unparseable", bad)
        for g in {g for g, ok in parseable.items() if not ok}:
            if g not in _warned:
                _warned.add(g)
                log.warning("accuracy reward: gold answer %r cannot be parsed; its rows score None", g[:80])
    grades = grade_batch([texts[i] for i in todo], [golds[i] for i in todo], problems=[problems[i] for i in todo])
    for i, g in zip(todo, grades, strict=True):
        if g.reason == "gold_unparseable":  # decided by the full grader after all
            _count("gold_unparseable")
            continue
        if g.reason in ("timeout", "error"):
            _count(f"grade_{g.reason}")
        out[i] = 1.0 if g.correct else 0.0
    _count("graded_math", len(todo))
    return out


def _code_rewards(texts: list[str], tests: list, test_imports: list) -> list[float | None]:
    from eval.sandbox import run_tests  # imported lazily: math-only runs never load the sandbox

    def one(i: int) -> float | None:
        cases = _tests_of(tests[i])
        if not cases:
            _count("code_no_tests")
            return None
        result = run_tests(extract_code(texts[i]), cases, test_imports=_tests_of(test_imports[i]))
        if result.status == "sandbox_error":
            _count("sandbox_error")
            log.warning("accuracy reward: sandbox error (%s); the completion scores None", result.detail[:200])
            return None
        if result.test_errors:  # a test that needs a name nobody declared: the benchmark's fault
            _count("code_test_error", result.test_errors)
        return result.fraction

    _count("graded_code", len(texts))
    if len(texts) == 1:
        return [one(0)]
    with ThreadPoolExecutor(max_workers=CODE_WORKERS) as pool:
        return list(pool.map(one, range(len(texts))))


def accuracy_reward(completions: Sequence, answer: Sequence[str] | None = None, **kwargs) -> list[float | None]:
    r"""Reward for correctness, routed per row by the ``verifier`` column (``math`` when absent).

    ``math``: 1.0/0.0 from ``eval.verify.grade_batch``, the evaluation's own grader and answer policy, so
    training and evaluation cannot drift apart (echoed arithmetic, prose around a number and split digits
    earn 0; ``tests/test_reward_hacking.py``); None when the gold itself cannot be parsed. ``code``: the
    fraction of the row's ``tests`` that the code in the answer region (:func:`extract_code`) passes in
    ``eval.sandbox``; None on a sandbox error or when the row has no tests. Both None cases are counted
    in :data:`STATS` (and logged through ``log_metric``), never silently scored as wrong.

    Args:
        completions (`Sequence[str | list[dict]]`):
            The completions: strings, or lists of messages whose ``"content"`` holds the text.
        answer (`Sequence[str]`, *optional*):
            The gold final answer of each row; required for the ``math`` rows.
        **kwargs:
            The dataset columns ``verifier`` (``math`` or ``code``), ``problem`` (the question, for the
            grader's echo rule), ``tests`` and ``test_imports`` (a code row's asserts and their declared
            imports: lists, or JSON strings holding one), and TRL's ``log_metric``; the rest is ignored.

    Returns:
        `list[float | None]`: per completion, 1.0/0.0 (math) or the fraction of tests passed (code), or None.

    Raises:
        ValueError: an unknown verifier, or a math row without an ``answer``.

    Example:
        >>> from stages.training.rewards import accuracy_reward
        >>> accuracy_reward([r"<think> 2+2=4 </think> <answer> \boxed{4} </answer>",
        ...                  "<think> 2+2=5 </think> <answer> 5 </answer>"], answer=["4", "4"])
        [1.0, 0.0]
    """
    n = len(completions)
    texts = [completion_text(c) for c in completions]
    answers = [None] * n if answer is None else list(answer)
    verifiers = [v or "math" for v in _column(kwargs, "verifier", n)]
    tests = _column(kwargs, "tests", n)
    problems = _column(kwargs, "problem", n)
    out: list[float | None] = [None] * n

    unknown = sorted({v for v in verifiers if v not in ("math", "code")})
    if unknown:
        raise ValueError(f"accuracy reward: unknown verifier {unknown[0]!r} (known: math, code)")
    math_idx = [i for i in range(n) if verifiers[i] == "math"]
    code_idx = [i for i in range(n) if verifiers[i] == "code"]
    before = {k: STATS[k] for k in ("gold_unparseable", "sandbox_error", "code_test_error")}
    if math_idx:
        if any(answers[i] is None for i in math_idx):
            raise ValueError("accuracy reward: a math row has no 'answer' column")
        rewards = _math_rewards([texts[i] for i in math_idx], [str(answers[i]) for i in math_idx],
                                [problems[i] for i in math_idx])
        for i, r in zip(math_idx, rewards, strict=True):
            out[i] = r
    if code_idx:
        imports = _column(kwargs, "test_imports", n)
        for i, r in zip(code_idx, _code_rewards([texts[i] for i in code_idx], [tests[i] for i in code_idx],
                                                [imports[i] for i in code_idx]), strict=True):
            out[i] = r

    log_metric = kwargs.get("log_metric")
    if log_metric is not None:
        for key, was in before.items():
            log_metric(f"accuracy/{key}", float(STATS[key] - was))
    return out


# ---------------------------------------------------------------------------------------------
# Language consistency
# ---------------------------------------------------------------------------------------------


def language_consistency_reward(completions: Sequence, lang: Sequence[str | None] | None = None,
                                target: str = "en", **kwargs) -> list[float | None]:
    r"""Reward for language consistency: the proportion of target-language words in the chain of thought.

    DeepSeek-R1's language-consistency reward (section 2.3.3), on the text of the first think block
    (``eval.language.language_fraction``). No think block: 0.0. A think block with no words at all (only
    digits and symbols): None, since the proportion is undefined there.

    Args:
        completions (`Sequence[str | list[dict]]`):
            The completions: strings, or lists of messages whose ``"content"`` holds the text.
        lang (`Sequence[str | None]`, *optional*):
            The target language of each row (e.g. ``"en"``, ``"zh"``); a row without one uses ``target``.
        target (`str`, *optional*, defaults to ``"en"``):
            The default target (bind another with :func:`make_language_reward`).
        **kwargs:
            The dataset columns and TRL's extras. Not used; accepted for [`GRPOTrainer`]'s calling convention.

    Returns:
        `list[float | None]`: per completion, the target language's share of the words in the think block.

    Example:
        >>> from stages.training.rewards import language_consistency_reward
        >>> language_consistency_reward(["<think> two plus two </think> 4", "<think> 二加二 </think> 4", "4"])
        [1.0, 0.0, 0.0]
    """
    n = len(completions)
    langs = [None] * n if lang is None else list(lang)
    out: list[float | None] = []
    for c, row_lang in zip(completions, langs, strict=True):
        think = think_text(completion_text(c))
        out.append(0.0 if think is None else language_fraction(think, target=row_lang or target))
    return out


def make_language_reward(target: str = "en") -> Callable[..., list[float | None]]:
    r"""Factory of :func:`language_consistency_reward` with another default target language.

    Args:
        target (`str`, *optional*, defaults to ``"en"``):
            The target language for rows without a ``lang`` column (a row's ``lang`` still wins).

    Returns:
        `Callable[..., list[float | None]]`: the reward function (a ``functools.partial``).

    Example:
        >>> from stages.training.rewards import make_language_reward
        >>> chinese = make_language_reward("zh")
        >>> chinese(["<think> 二加二 </think> 4", "<think> 二加二 </think> 4"], lang=[None, "en"])
        [1.0, 0.0]
    """
    return functools.partial(language_consistency_reward, target=target)


# ---------------------------------------------------------------------------------------------
# Overlong penalty (DAPO)
# ---------------------------------------------------------------------------------------------


def make_overlong_penalty(max_length: int, buffer: int) -> Callable[..., list[float]]:
    r"""Factory of DAPO's soft overlong punishment (its Eq. 13), on the token counts of ``completion_ids``.

    0 up to ``max_length - buffer`` tokens, then linear down to -1 at ``max_length``, -1 beyond. TRL's
    ``get_soft_overlong_punishment`` computes it; this refuses a buffer of 0 (TRL's hard cut-off) and takes
    the completions first, as the recorder and :func:`for_task` call every reward. The reward raises a
    ValueError when called without ``completion_ids`` (TRL always passes them).

    Args:
        max_length (`int`):
            The completion length, in tokens, that earns -1 (the RL section's ``max_completion_length``).
        buffer (`int`):
            The length of the linear ramp before ``max_length``; ``0 < buffer <= max_length``.

    Returns:
        `Callable[..., list[float]]`: ``overlong_penalty(completions, completion_ids, **kwargs)``.

    Raises:
        ValueError: ``buffer`` out of range.

    Example:
        >>> from stages.training.rewards import make_overlong_penalty
        >>> penalty = make_overlong_penalty(max_length=10, buffer=4)
        >>> penalty(["a", "b", "c"], completion_ids=[[1] * 6, [1] * 8, [1] * 12])
        [0.0, -0.5, -1.0]
    """
    if not 0 < buffer <= max_length:
        raise ValueError(f"overlong penalty: need 0 < buffer <= max_length, got {buffer}, {max_length}")
    from trl.rewards import get_soft_overlong_punishment

    punish = get_soft_overlong_punishment(max_completion_len=max_length, soft_punish_cache=buffer)

    def overlong_penalty(completions: Sequence, completion_ids: Sequence[Sequence[int]] | None = None,
                         **kwargs) -> list[float]:
        if completion_ids is None:
            raise ValueError("overlong penalty: needs completion_ids (TRL passes them)")
        return punish(completion_ids)

    return overlong_penalty


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------

# The rule rewards a recipe may weight: name → builder, given the RL section's settings
# (``language_target``, ``overlong_max_length``, ``overlong_buffer``).
RULE_REWARDS: dict[str, Callable[..., Callable[..., list[float | None]]]] = {
    "format": lambda **_: format_reward,
    "summary_format": lambda **_: summary_format_reward,
    "accuracy": lambda **_: accuracy_reward,
    "language": lambda *, language_target="en", **_: make_language_reward(language_target),
    "overlong": lambda *, overlong_max_length=None, overlong_buffer=0, **_: _overlong(overlong_max_length,
                                                                                       overlong_buffer),
}
# Rewards that are a reward model's score: stage 4 trains or loads the models (stages/training/reward_model.py)
# and builds these with :func:`make_reward_model_reward`.
MODEL_REWARDS = MODEL_REWARD_NAMES
REWARD_NAMES = (*RULE_REWARDS, *MODEL_REWARDS)
if tuple(RULE_REWARDS) != RULE_REWARD_NAMES:  # the recipe's schema declares the names without importing the grader
    raise ImportError(f"stages/training/rewards.py RULE_REWARDS {tuple(RULE_REWARDS)} != stages.pipeline.recipe "
                      f"RULE_REWARD_NAMES {RULE_REWARD_NAMES}")


def _overlong(max_length: int | None, buffer: int):
    if max_length is None:
        raise ValueError("reward 'overlong' needs overlong_max_length")
    return make_overlong_penalty(max_length, buffer)


def get_reward(name: str, *, language_target: str = "en", overlong_max_length: int | None = None,
               overlong_buffer: int = 0) -> Callable[..., list[float | None]]:
    r"""The reward function a recipe names: a rule reward of :data:`RULE_REWARDS`, or a custom one by import path.

    A name that is not a rule reward and contains a ``.`` is a custom reward's import path,
    ``package.module:function`` or ``package.module.function`` (as TRL's ``trl/scripts/grpo.py`` takes
    dotted ``reward_funcs``): the module is imported and the function is the reward itself, in TRL's form
    ``f(completions, **kwargs) -> list[float | None]`` (called with the completions first). The module must
    be importable (on ``sys.path``) in every training process. The settings below apply to rule rewards.

    Args:
        name (`str`):
            A rule reward's name (``format``, ``summary_format``, ``accuracy``, ``language``, ``overlong``) or
            a custom reward's import path.
        language_target (`str`, *optional*, defaults to ``"en"``):
            ``language``'s default target language (a row's ``lang`` still wins).
        overlong_max_length (`int`, *optional*):
            ``overlong``'s ``max_length``; required for it.
        overlong_buffer (`int`, *optional*, defaults to ``0``):
            ``overlong``'s ``buffer``; ``0 < overlong_buffer <= overlong_max_length`` for it.

    Returns:
        `Callable[..., list[float | None]]`: the reward function.

    Raises:
        ValueError: a reward model's name (stage 4 builds those), an unknown name (the known ones listed),
            ``overlong`` without its settings, or an import path whose module cannot be imported, or whose
            module has no such attribute, or whose attribute is not callable.

    Example:
        >>> from stages.training.rewards import format_reward, get_reward
        >>> get_reward("format") is format_reward
        True
        >>> get_reward("overlong", overlong_max_length=10, overlong_buffer=4)(["a"], completion_ids=[[1] * 8])
        [-0.5]
        >>> get_reward("stages.training.rewards:format_reward") is format_reward
        True
    """
    if name in MODEL_REWARDS:
        raise ValueError(f"reward {name!r} is a reward model's score: only stage 4's final RL (stage4.rl) loads "
                         "reward models; use the rule rewards elsewhere")
    if name in RULE_REWARDS:
        return RULE_REWARDS[name](language_target=language_target, overlong_max_length=overlong_max_length,
                                  overlong_buffer=overlong_buffer)
    if "." in name:
        return _import_reward(name)
    raise ValueError(f"unknown reward {name!r}; known: {', '.join(REWARD_NAMES)} "
                     "(or a custom reward's import path, package.module:function)")


def _import_reward(name: str) -> Callable[..., list[float | None]]:
    """The function that ``package.module:function`` or ``package.module.function`` names."""
    module_name, colon, attr = name.partition(":")
    if not colon:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"reward {name!r}: an import path is package.module:function or package.module.function")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ValueError(f"reward {name!r}: module {module_name!r} not found (is it on sys.path?)") from e
        raise ValueError(f"reward {name!r}: importing module {module_name!r} failed: {e}") from e
    except Exception as e:  # the module's own code failed: name it, keep its traceback
        raise ValueError(f"reward {name!r}: importing module {module_name!r} failed: {type(e).__name__}: {e}") from e
    if not hasattr(module, attr):
        raise ValueError(f"reward {name!r}: module {module_name!r} has no attribute {attr!r}")
    func = getattr(module, attr)
    if not callable(func):
        raise ValueError(f"reward {name!r}: {module_name}.{attr} is not callable (a {type(func).__name__}); "
                         "a reward is f(completions, **kwargs) -> list[float | None]")
    return func


# ---------------------------------------------------------------------------------------------
# Reward models and routing (stage 4)
# ---------------------------------------------------------------------------------------------


def prompt_text(prompt) -> str:
    """The last user turn of a prompt (a string prompt is returned as is)."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    return users[-1] if users else ""


def make_reward_model_reward(score: Callable[[list[str], list[str]], list[float]], *, part: str,
                             name: str) -> Callable[..., list[float]]:
    r"""Factory of a reward function from a reward model's scorer (stage 4's helpfulness and harmlessness).

    Args:
        score (`Callable[[list[str], list[str]], list[float]]`):
            ``score(user_texts, responses) -> scores``: the reward model, given each prompt's last user turn.
        part (`str`):
            ``summary`` scores the text after ``</think>`` (DeepSeek-R1's helpfulness reward: "focusing
            exclusively on the final summary"), ``whole`` the entire response (its harmlessness reward).
        name (`str`):
            The reward function's ``__name__`` (TRL logs it as ``rewards/<name>/mean``).

    Returns:
        `Callable[..., list[float]]`: ``reward(completions, prompts=None, **kwargs)``.

    Raises:
        ValueError: ``part`` is neither ``summary`` nor ``whole``.

    Example:
        >>> from stages.training.rewards import make_reward_model_reward
        >>> length = make_reward_model_reward(lambda users, texts: [float(len(t)) for t in texts],
        ...                                   part="summary", name="helpfulness")
        >>> length(["<think> hm </think> Hello!"], prompts=["Say hello."])
        [6.0]
    """
    from data.templates import summary_of

    if part not in ("summary", "whole"):
        raise ValueError(f"reward model part must be 'summary' or 'whole', got {part!r}")

    def reward(completions: Sequence, prompts: Sequence | None = None, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        if part == "summary":
            texts = [summary_of(t) for t in texts]
        users = [prompt_text(p) for p in prompts] if prompts is not None else [""] * len(texts)
        return list(score(users, texts))

    reward.__name__ = reward.__qualname__ = name
    return reward


def for_task(task: str | tuple[str, ...], func: Callable[..., list]) -> Callable[..., list]:
    r"""Wraps a reward so that it scores only the rows of one ``task``, and answers None for the others.

    Stage 4 scores each row with its own rewards: the rule rewards on ``reasoning`` rows, the reward models
    on ``general`` ones. Column lists are subset to the rows that ``func`` scores.

    Args:
        task (`str` or `tuple[str, ...]`):
            The ``task`` column value(s) whose rows ``func`` scores; a row without one is ``reasoning``.
        func (`Callable[..., list]`):
            The reward function, called with the completions first.

    Returns:
        `Callable[..., list]`: the routed reward, under ``func``'s ``__name__``.

    Example:
        >>> from stages.training.rewards import for_task, format_reward
        >>> routed = for_task("reasoning", format_reward)
        >>> routed(["<think> a </think> <answer> 1 </answer>"] * 2, task=["reasoning", "general"])
        [1.0, None]
    """
    tasks_wanted = (task,) if isinstance(task, str) else tuple(task)

    def routed(completions: Sequence, **kwargs) -> list:
        n = len(completions)
        tasks = [t or "reasoning" for t in _column(kwargs, "task", n)]
        idx = [i for i in range(n) if tasks[i] in tasks_wanted]
        out: list = [None] * n
        if idx:
            sub = {k: [v[i] for i in idx] if isinstance(v, list | tuple) and len(v) == n else v
                   for k, v in kwargs.items()}
            for i, value in zip(idx, func([completions[i] for i in idx], **sub), strict=True):
                out[i] = value
        return out

    routed.__name__ = routed.__qualname__ = getattr(func, "__name__", "reward")
    return routed
