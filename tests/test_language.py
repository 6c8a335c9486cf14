"""eval/language.py: DeepSeek-R1's language consistency (fraction of target-language words)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from eval import language
from eval.language import dominant_language, is_mixed, language_counts, language_fraction, words_by_language

EN_TRACE = "7+9=16, write 6 carry 1; 4+8+1=13, write 3 carry 1; answer 936"
ZH_TRACE = "7+9=16，写6进1；4+8+1=13，写3进1；答案936"
# Switches midway: write, carry (en) | 写, 进, 答, 案 (zh)  ->  en 2/6, zh 4/6.
MIX_TRACE = "7+9=16, write 6 carry 1；4+8+1=13，写3进1；答案936"
EN_TEXT = ("Okay, so I need to add the units first. Seven plus nine is sixteen, so I write down six "
           "and carry the one. Then the tens give thirteen, and the final answer is nine hundred "
           "thirty-six.")
FR_TEXT = ("D'accord, il faut d'abord additionner les unités. Sept plus neuf font seize, donc "
           "j'écris six et je retiens un. Ensuite les dizaines donnent treize, et la réponse finale "
           "est neuf cent trente-six.")
DE_TEXT = ("Zuerst addiere ich die Einer. Sieben plus neun ergibt sechzehn, also schreibe ich sechs "
           "und merke mir die Eins. Die Antwort ist neunhundertsechsunddreißig.")


@pytest.mark.parametrize(
    ("text", "target", "expected"),
    [
        (EN_TRACE, "en", 1.0),
        (EN_TEXT, "en", 1.0),
        (ZH_TRACE, "en", 0.0),
        (ZH_TRACE, "zh", 1.0),
        (MIX_TRACE, "en", 2 / 6),
        (MIX_TRACE, "zh", 4 / 6),
        ("答えは936です。", "ja", 1.0),  # ideographs next to kana are Japanese
        ("答えは936です。", "zh", 0.0),
        ("정답은 936입니다", "ko", 1.0),
        ("Сначала складываем единицы, ответ 936.", "ru", 1.0),
        ("Сначала складываем единицы, ответ 936.", "en", 0.0),
        ("<think>写6进1</think> \\boxed{936}", "zh", 1.0),
        ("<think>\nWe get $\\frac{x}{2} + y = 3$, so x = 6.\n</think> \\boxed{6}", "en", 1.0),
        ("7+9=16, 6 1; 4+8+1=13 -> 936!", "en", None),
        ("", "zh", None),
        ("<think></think> $x^2 + y^2 = z^2$ \\(a+b\\) 3x + 2y = 10cm", "en", None),
    ],
)
def test_language_fraction_table(text, target, expected):
    got = language_fraction(text, target)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_words_of_the_mixed_trace():
    assert words_by_language(MIX_TRACE) == [
        ("write", "en"), ("carry", "en"), ("写", "zh"), ("进", "zh"), ("答", "zh"), ("案", "zh")]


def test_only_what_carries_no_language_is_neutral():
    """Tags of the template, LaTeX commands, single letters, letters glued to digits and two-letter
    variables in math are no words; words in code, backticks, math and other tags are."""
    text = ("<think>Let x = 3 and y2 = 4. ```python\nprint('hello world')\n``` then `foo_bar`, "
            "\\frac{a}{b} and $\\alpha + \\beta + ab$ give 2x.</think>")
    assert [w for w, _ in words_by_language(text)] == [
        "Let", "and", "python", "print", "hello", "world", "then", "foo", "bar", "and", "give"]


ZH_WORDS = "first add the units digits seven plus nine carry one"
# Chinese chains of thought that hide English words in markup; and an English one hiding Chinese
HIDDEN = {
    "backticks": f"好 `{ZH_WORDS}`",
    "code fence": f"好\n```\n{ZH_WORDS}\n```",
    "dollar math": f"好 ${ZH_WORDS}$",
    "double dollar math": f"好 $${ZH_WORDS}$$",
    "paren math": f"好 \\({ZH_WORDS}\\)",
    "bracket math": f"好 \\[{ZH_WORDS}\\]",
    "text in math": f"好 $\\text{{{ZH_WORDS}}}$",
    "invented tag": f"好 <scratch>{ZH_WORDS}</scratch>",
    "tag attributes": f'好 <note text="{ZH_WORDS}"/>',
    "unclosed math": f"好 \\({ZH_WORDS}",
}


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_words_hidden_in_markup_still_count(name):
    from stages.training.rewards import language_consistency_reward

    text = HIDDEN[name]
    assert language_fraction(text, "zh") < 0.5 and is_mixed(text, "zh"), name
    [reward] = language_consistency_reward([f"<think>{text}</think> <answer>5</answer>"], lang=["zh"])
    assert reward < 0.5
    english = "first add seven and nine, write six, carry one; `先加个位数字然后进位`"
    assert is_mixed(english, "en") and language_fraction(english, "en") < 0.7


def test_marking_up_is_linear_in_the_length():
    import time

    for text in ("\\(" * 100_000, "$" * 200_000, "a$b" * 70_000, "\\[$" * 70_000, "<x " * 70_000, "`" * 200_000):
        t0 = time.perf_counter()
        language_fraction(text, "en")
        assert time.perf_counter() - t0 < 2.0, text[:10]


def test_english_and_french_are_told_apart_by_lingua():
    assert language_fraction(FR_TEXT, "fr") >= 0.9
    assert language_fraction(EN_TEXT, "fr") <= 0.1
    # Target English: French counts as English unless French is a candidate.
    assert language_fraction(FR_TEXT, "en") == 1.0
    assert language_fraction(FR_TEXT, "en", candidates=["fr"]) <= 0.1
    mixed = EN_TEXT + " " + FR_TEXT
    assert 0.3 < language_fraction(mixed, "en", candidates=["fr"]) < 0.7
    assert is_mixed(mixed, "en", candidates=["fr"])
    assert language_fraction(DE_TEXT, "de") >= 0.9
    assert language_fraction(DE_TEXT, "es") <= 0.1
    assert dominant_language(FR_TEXT) == "fr"
    assert dominant_language(DE_TEXT) == "de"
    assert dominant_language(EN_TEXT) == "en"


def test_script_only_texts_never_touch_lingua(monkeypatch):
    def boom(*args):
        raise AssertionError("lingua used for a script-only text")

    monkeypatch.setattr(language, "_detect", boom)
    for text in (EN_TRACE, ZH_TRACE, MIX_TRACE, EN_TEXT, "答えは936です", "Ответ 936"):
        for target in ("en", "zh", "ja", "ru"):
            language_fraction(text, target)
            is_mixed(text, target)


def test_is_mixed():
    assert not is_mixed(EN_TRACE)
    assert not is_mixed(ZH_TRACE, "zh")
    assert is_mixed(ZH_TRACE)
    assert is_mixed(MIX_TRACE) and is_mixed(MIX_TRACE, "zh")
    assert not is_mixed(EN_TRACE + " 好")  # one stray foreign word in a short trace
    assert is_mixed(EN_TRACE + " 好的")  # two are mixing
    long_en = " ".join([EN_TEXT] * 3)
    assert not is_mixed(long_en + " 好的", threshold=0.05)  # 2 foreign of ~100 words: under 5%
    assert not is_mixed("1 + 1 = 2")
    assert is_mixed(EN_TRACE + " 好", min_foreign_words=1)


def test_dominant_language():
    assert dominant_language(EN_TRACE) == "en"
    assert dominant_language(ZH_TRACE) == "zh"
    assert dominant_language(MIX_TRACE) == "zh"
    assert dominant_language("答えは936です。") == "ja"
    assert dominant_language("정답은 936입니다") == "ko"
    assert dominant_language("Ответ 936") == "ru"
    assert dominant_language("3 + 4 = 7") is None


def test_unknown_language_raises():
    with pytest.raises(ValueError, match="'xx'"):
        language_fraction(EN_TRACE, "xx")
    with pytest.raises(ValueError, match="klingon"):
        is_mixed(EN_TRACE, "en", candidates=["klingon"])
    assert language_fraction(EN_TRACE, "EN") == 1.0  # codes are case-insensitive
    assert {"en", "zh", "ja", "ko", "ru", "fr", "de", "es"} <= language.SUPPORTED_LANGUAGES


def test_fast_path_agrees_with_word_list():
    texts = [EN_TRACE, ZH_TRACE, MIX_TRACE, EN_TEXT, "Ответ 936 и 写", "Ελληνικά και English 中文",
             "don't l'eau well-known x-ray I'm a b 2x x2 ab3", "שלום עולם مرحبا بالعالم नमस्ते"]
    for text in texts:
        assert language_counts(text) == Counter(label for _, label in words_by_language(text))


def test_throughput_of_script_only_texts():
    texts = [(EN_TRACE + ". ") * 4, (ZH_TRACE + "。") * 7, (MIX_TRACE + "。") * 5, EN_TEXT + " " + EN_TEXT[:120]]
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 0.3:
        for text in texts:
            language_fraction(text, "en")
            n += 1
    rate = n / (time.perf_counter() - start)
    print(f"language_fraction: {rate:.0f} texts/s on ~300-char script-only texts")
    assert rate > 1000  # measured ~15-30k/s on a 2-core dev machine; 1k/s is "thousands per minute" x 60
