"""Reward functions: tables of (completion, columns, expected) on plain and chat completions."""

import functools
import re

import pytest

from stages.training import rewards as R
from stages.training.rewards import (
    accuracy_reward,
    format_reward,
    get_reward,
    language_consistency_reward,
    make_language_reward,
    make_overlong_penalty,
    summary_format_reward,
)


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


GOOD = " <think> 7+9=16, write 6 carry 1 </think> <answer> 936 </answer>"


@pytest.mark.parametrize("name, completion, expected", [
    ("well formed", GOOD, 1.0),
    ("no leading space", "<think>x</think><answer>1</answer>", 1.0),
    ("no think", " <answer> 936 </answer>", 0.0),
    ("empty think", " <think> </think> <answer> 936 </answer>", 0.0),
    ("empty answer", " <think> a </think> <answer> </answer>", 0.0),
    ("answer first", " <answer> 1 </answer> <think> a </think>", 0.0),
    ("two answers", GOOD + " <answer> 2 </answer>", 0.0),
    ("text after answer", GOOD + " and more", 0.0),
    ("unclosed think", " <think> 7+9=16", 0.0),
    ("plain text", "The answer is 936.", 0.0),
    ("boxed answer", " <think> a </think> <answer> \\boxed{936} </answer>", 1.0),
    ("empty box", " <think> a </think> <answer> \\boxed{} </answer>", 0.0),
    ("blank box", " <think> a </think> <answer> \\boxed{ } </answer>", 0.0),
    ("whitespace think", " <think> \n\t </think> <answer> 936 </answer>", 0.0),
    ("no answer block content", " <think> a </think> <answer>\n</answer>", 0.0),
])
def test_format_reward(name, completion, expected):
    assert format_reward([completion]) == [expected]
    assert format_reward([chat(completion)]) == [expected]


@pytest.mark.parametrize("name, completion, expected", [
    ("readable", "<think> 7+9=16 </think> The final answer is \\boxed{936}.", 1.0),
    ("empty box", "<think> 7+9=16 </think> The final answer is \\boxed{}.", 0.0),
    ("blank box", "<think> 7+9=16 </think> The final answer is \\boxed{  }.", 0.0),
    ("unclosed box", "<think> 7+9=16 </think> The final answer is \\boxed{936.", 0.0),
    ("box only in the think block", "<think> \\boxed{936} </think> The final answer is 936.", 0.0),
    ("whitespace think", "<think>  </think> The final answer is \\boxed{936}.", 0.0),
    ("no think", "The final answer is \\boxed{936}.", 0.0),
    ("answer tags", "<think> a </think> <answer> \\boxed{936} </answer>", 0.0),
])
def test_summary_format_reward(name, completion, expected):
    assert summary_format_reward([completion]) == [expected]
    assert summary_format_reward([chat(completion)]) == [expected]


@pytest.mark.parametrize("name, completion, gold, expected", [
    ("correct", GOOD, "936", 1.0),
    ("wrong", GOOD.replace("936", "935"), "936", 0.0),
    ("no answer tags, after think", " <think> a </think> 936", "936", 1.0),
    ("boxed in answer", " <think> a </think> <answer> \\boxed{936} </answer>", "936", 1.0),
    ("fraction gold", " <think> a </think> <answer> 0.5 </answer>", "\\frac{1}{2}", 1.0),
    ("hedged", " <think> a </think> <answer> 935 or 936 </answer>", "936", 0.0),
    ("empty", "", "936", 0.0),
])
def test_accuracy_reward_math(name, completion, gold, expected):
    assert accuracy_reward([completion], answer=[gold]) == [expected]
    assert accuracy_reward([chat(completion)], answer=[gold], verifier=["math"]) == [expected]


def test_accuracy_reward_is_none_and_counted_for_unparseable_gold():
    before = R.STATS["gold_unparseable"]
    logged = {}
    out = accuracy_reward([GOOD, GOOD], answer=["\\frac{", "936"], verifier=["math", None],
                          log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [None, 1.0]
    assert R.STATS["gold_unparseable"] == before + 1
    assert logged["accuracy/gold_unparseable"] == 1.0


CODE = " <think> add them </think> <answer>\n```python\ndef add(a, b):\n    return a + b\n```\n</answer>"


def test_accuracy_reward_routes_code_rows_to_the_sandbox():
    out = accuracy_reward(
        [CODE, CODE, GOOD, " <think> x </think> <answer> def add(a, b): return a - b </answer>"],
        answer=[None, None, "936", None],
        verifier=["code", "code", "math", "code"],
        tests=[["assert add(1, 2) == 3", "assert add(2, 2) == 5"], '["assert add(2, 2) == 4"]', None,
               ["assert add(1, 2) == 3"]],
    )
    assert out == [0.5, 1.0, 1.0, 0.0]


def test_code_row_without_tests_is_none():
    assert accuracy_reward([CODE], verifier=["code"], tests=[[]]) == [None]


def test_sandbox_error_is_none_and_counted(monkeypatch):
    import eval.sandbox as sandbox

    def broken(code, tests, **kw):
        return sandbox.SandboxResult(0, len(tests), 0.0, "sandbox_error", detail="boom")

    monkeypatch.setattr(sandbox, "run_tests", broken)
    before = R.STATS["sandbox_error"]
    assert accuracy_reward([CODE], verifier=["code"], tests=[["assert add(1, 2) == 3"]]) == [None]
    assert R.STATS["sandbox_error"] == before + 1


def test_unknown_verifier_is_an_error():
    with pytest.raises(ValueError, match="verifier"):
        accuracy_reward([GOOD], answer=["936"], verifier=["chess"])


@pytest.mark.parametrize("name, code_text, expected", [
    ("fenced in answer", CODE, "def add(a, b):\n    return a + b"),
    ("bare answer", "<answer>x = 1</answer>", "x = 1"),
    ("after think", "<think>t</think>\n```py\nprint(1)\n```", "print(1)"),
    ("last fence wins", "<answer>```python\na=1\n```\n```python\nb=2\n```</answer>", "b=2"),
])
def test_extract_code(name, code_text, expected):
    assert R.extract_code(code_text) == expected


@pytest.mark.parametrize("name, completion, lang, expected", [
    ("english", " <think> write 6 carry 1 </think> <answer> 1 </answer>", "en", 1.0),
    ("mixed", " <think> write 6 carry 1，写3进1 </think>", "en", 0.5),  # write, carry | 写, 进
    ("chinese target", " <think> write 6 carry 1，写3进1 </think>", "zh", 0.5),
    ("all chinese, en target", " <think> 写6进1 </think>", "en", 0.0),
    ("no think", " <answer> 1 </answer>", "en", 0.0),
    ("no words", " <think> 7+9=16 </think>", "en", None),
    ("lang column missing → default en", " <think> 写6进1 </think>", None, 0.0),
])
def test_language_consistency_reward(name, completion, lang, expected):
    assert language_consistency_reward([completion], lang=[lang]) == [expected]
    assert language_consistency_reward([chat(completion)], lang=[lang]) == [expected]


def test_language_target_default_via_factory_and_partial():
    zh = " <think> 写6进1 </think>"
    assert make_language_reward("zh")([zh]) == [1.0]
    assert functools.partial(language_consistency_reward, target="zh")([zh]) == [1.0]
    assert make_language_reward("zh")([zh], lang=["en"]) == [0.0]  # the row's lang wins


@pytest.mark.parametrize("length, expected", [(0, 0.0), (6, 0.0), (8, -0.5), (10, -1.0), (14, -1.0)])
def test_overlong_penalty(length, expected):
    f = make_overlong_penalty(max_length=10, buffer=4)
    assert f(["x"], completion_ids=[[1] * length]) == [pytest.approx(expected)]


def test_registry():
    assert get_reward("format") is format_reward
    assert get_reward("accuracy") is accuracy_reward
    assert get_reward("language", language_target="zh")([" <think> 写 </think>"]) == [1.0]
    assert get_reward("overlong", overlong_max_length=4, overlong_buffer=2)(["x"], completion_ids=[[1] * 3]) == [-0.5]
    with pytest.raises(ValueError):
        get_reward("overlong", overlong_max_length=4, overlong_buffer=0)
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("neural")



@pytest.mark.parametrize("path", ["tests.custom_reward:length_reward", "tests.custom_reward.length_reward"])
def test_a_custom_reward_by_its_import_path(path):
    """A name with a dot that is no rule reward is package.module:function or package.module.function:
    that function, as it is, is the reward (as trl/scripts/grpo.py takes dotted reward_funcs)."""
    from tests.custom_reward import length_reward

    f = get_reward(path, language_target="zh", overlong_max_length=4, overlong_buffer=2)
    assert f is length_reward
    assert f(["abc", chat("hello")], prompts=["p", "q"], completion_ids=[[1], [2]]) == [3.0, 5.0]


@pytest.mark.parametrize("path, error", [
    ("tests.no_such_module:length_reward", "reward 'tests.no_such_module:length_reward': module "
                                           "'tests.no_such_module' not found"),
    ("no_such_package.rewards.length_reward", "module 'no_such_package.rewards' not found"),
    ("tests.custom_reward:no_such_reward", "reward 'tests.custom_reward:no_such_reward': module "
                                           "'tests.custom_reward' has no attribute 'no_such_reward'"),
    ("tests.custom_reward.no_such_reward", "module 'tests.custom_reward' has no attribute 'no_such_reward'"),
    ("tests.custom_reward:NOT_A_REWARD", "reward 'tests.custom_reward:NOT_A_REWARD': "
                                         "tests.custom_reward.NOT_A_REWARD is not callable"),
    ("tests.custom_reward_broken:length_reward", "importing module 'tests.custom_reward_broken' failed: "
                                                 "No module named 'no_such_dependency_of_a_reward'"),
    ("tests.custom_reward:", "an import path is package.module:function"),
])
def test_a_custom_reward_that_cannot_be_imported_is_a_clear_error(path, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        get_reward(path)


@pytest.mark.parametrize("name", ["acuracy", "Format", "summary-format", "helpfullness", ""])
def test_a_misspelt_name_is_never_a_reward(name):
    """Only a name with a dot is taken for an import path: a misspelt rule (or reward model) name is an
    error that lists the known names, never some reward."""
    with pytest.raises(ValueError, match=re.escape(f"unknown reward {name!r}; known: format, summary_format, "
                                                   "accuracy, language, overlong, helpfulness, harmlessness")):
        get_reward(name)


def test_the_rl_trainer_builds_and_logs_a_custom_reward_under_its_recipe_key(tmp_path):
    """stages/training/grpo.py: reward_functions passes a dotted name through to get_reward; the recorder
    wraps the reward under that name, which TRL logs as rewards/<name>/mean and MetricsCallback reads back."""
    import json
    from types import SimpleNamespace

    from trl.trainer.utils import get_callable_name

    from stages.training.grpo import reward_functions
    from stages.training.records import MetricsCallback, RolloutRecorder
    from tests.custom_reward import length_reward

    path = "tests.custom_reward:length_reward"
    cfg = SimpleNamespace(rewards={"format": 1.0, path: 0.5}, language_target="en", overlong_max_length=None,
                          max_completion_length=16, overlong_buffer=0)
    names, funcs, weights = reward_functions(cfg)
    assert (names, weights) == (["format", path], [1.0, 0.5]) and funcs == [format_reward, length_reward]
    recorder = RolloutRecorder(tmp_path, names, sample_every=1000, samples_per_step=0)
    wrapped = [recorder.wrap(n, f) for n, f in zip(names, funcs, strict=True)]
    assert [get_callable_name(f) for f in wrapped] == names  # TRL's reward_func_names
    assert [f([GOOD]) for f in wrapped] == [[1.0], [float(len(GOOD))]]
    callback = MetricsCallback(tmp_path / "metrics.jsonl", names)
    logs = {"loss": 0.1, "rewards/format/mean": 1.0, f"rewards/{path}/mean": 64.0}
    callback.on_log(None, SimpleNamespace(is_world_process_zero=True, global_step=1), None, logs=logs)
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row["rewards"] == {"format": 1.0, path: 64.0}


def test_an_async_custom_reward_is_refused_with_the_reason():
    """TRL accepts async reward functions; the RL runner's recorder calls each reward and needs its list,
    so an async one is refused by name when the rewards are built (before training), not mid-step."""
    from types import SimpleNamespace

    from stages.training.grpo import reward_functions

    cfg = SimpleNamespace(rewards={"tests.custom_reward:async_reward": 1.0}, language_target="en",
                          overlong_max_length=None, max_completion_length=16, overlong_buffer=0)
    with pytest.raises(ValueError, match="reward 'tests.custom_reward:async_reward' is an async function"):
        reward_functions(cfg)


def test_the_recipe_checks_names_against_the_registry():
    """One registry: every name the recipe accepts is built by rewards.py (rules) or by stage 4 (reward
    models), and a name the registry lacks is refused, with the known ones listed."""
    from stages.pipeline.recipe import RecipeError, load_recipe

    assert R.REWARD_NAMES == (*R.RULE_REWARDS, *R.MODEL_REWARDS)
    for name in R.RULE_REWARDS:
        r = load_recipe("tiny", [f"stage3.rewards={{{name}: 1.0}}", "stage3.overlong_buffer=8"])
        assert callable(get_reward(name, overlong_max_length=r.stage3.max_completion_length, overlong_buffer=8))
    for name in R.MODEL_REWARDS:
        assert name in load_recipe("tiny", [f"stage4.rl.rewards={{{name}: 1.0}}"]).stage4.rl.rewards
        with pytest.raises(ValueError, match="reward model"):
            get_reward(name)
    with pytest.raises(RecipeError, match="unknown reward 'neural' \\(known: format, summary_format, accuracy"):
        load_recipe("tiny", ["stage3.rewards={neural: 1.0}"])


def test_trl_calling_convention_extra_kwargs_are_ignored():
    kwargs = dict(prompts=["p"], completion_ids=[[1, 2]], trainer_state=None, log_extra=lambda *a: None,
                  log_metric=lambda *a: None, id=["x"], problem=["What is 1 + 1?"], lang=["en"], verifier=["math"],
                  answer=["2"])
    completions = [" <think> one plus one </think> <answer> 2 </answer>"]
    assert format_reward(completions, **kwargs) == [1.0]
    assert accuracy_reward(completions, **kwargs) == [1.0]
    assert language_consistency_reward(completions, **kwargs) == [1.0]


def test_stage4_rewards_route_each_row_to_its_own():
    """Reasoning rows get the rule rewards, general rows the reward models; helpfulness reads the
    summary only, harmlessness the whole response; each returns None for the other kind of row."""
    from stages.pipeline.recipe import load_recipe
    from stages.stage4_final import routed_rewards

    seen = {}

    def scorer(name):
        def score(users, responses):
            seen[name] = list(zip(users, responses, strict=True))
            return [float(len(r)) for r in responses]
        return score

    cfg = load_recipe("tiny").stage4.rl
    names, funcs, weights = routed_rewards(cfg, {"helpfulness": scorer("helpfulness"),
                                                 "harmlessness": scorer("harmlessness")})
    assert names == list(cfg.rewards) and weights == [float(w) for w in cfg.rewards.values()]
    reasoning_ok = [{"role": "assistant", "content": "<think> 2+2=4 </think> The final answer is \\boxed{4}."}]
    general = [{"role": "assistant", "content": "<think> hm </think> Hello, Anna!"}]
    refusal = [{"role": "assistant", "content": "I can't help with that."}]
    completions = [reasoning_ok, general, reasoning_ok, refusal]
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}], [{"role": "user", "content": "Say hello to Anna."}],
               [{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "How do I steal a car?"}]]
    cols = dict(prompts=prompts, task=["reasoning", "general", "reasoning", "safety"], answer=["4", None, "5", None],
                lang=[None] * 4, completion_ids=[[1] * 5] * 4)
    out = {n: f(completions, **cols) for n, f in zip(names, funcs, strict=True)}
    assert out["accuracy"] == [1.0, None, 0.0, None]
    assert out["summary_format"][1] is None and out["language"][3] is None
    assert out["helpfulness"] == [None, float(len("Hello, Anna!")), None, None]  # harmful requests: not judged
    assert seen["helpfulness"] == [("Say hello to Anna.", "Hello, Anna!")]  # the summary, not the think block
    assert seen["harmlessness"] == [("Say hello to Anna.", general[0]["content"]),  # the whole response
                                    ("How do I steal a car?", "I can't help with that.")]


DOCUMENTED = ("format_reward", "summary_format_reward", "accuracy_reward", "language_consistency_reward",
              "make_language_reward", "make_overlong_penalty", "make_reward_model_reward", "for_task", "get_reward")


def test_docstring_examples():
    """Every reward and factory has TRL's doc form (summary, Args, Returns, Example), and every example
    is true: the module's doctests run and pass."""
    import doctest

    for name in DOCUMENTED:
        doc = getattr(R, name).__doc__
        assert all(part in doc for part in ("Args:", "Returns:", "Example:", ">>> ")), name
        assert ">>> from stages.training.rewards import" in doc, name
    results = doctest.testmod(R, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0
    assert results.failed == 0
