"""The findings can fail: fabricated runs that must come out reproduced, not reproduced and
inconclusive, for every finding; the report renders them, with intervals, and shows missing stages as
missing, never as zeros."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from data.taskworld import misconceived_facts
from eval import verdicts
from eval.stats import Estimate, estimate, paired_difference, proportion, verdict, wilson
from stages.commands.report import build_report
from stages.pipeline.manifest import Manifest
from stages.pipeline.recipe import load_recipe

K = 4
REPO = Path(__file__).resolve().parents[1]


def records(rates: list[float], key: str = "correct", seed: int = 0, **extra) -> list[dict]:
    """k samples per problem whose share of ``key`` true is the problem's rate (rounded to 1/k)."""
    rng = random.Random(seed)
    out = []
    for i, rate in enumerate(rates):
        hits = round(rate * K)
        flags = [True] * hits + [False] * (K - hits)
        rng.shuffle(flags)
        for s, flag in enumerate(flags):
            out.append({"id": f"p{i}", "sample": s, "correct": flag, "num_tokens": 20, "mixed_language": False,
                        key: flag, **extra})
    return out


def lengths(n: int, tokens: float) -> list[dict]:
    return [{"id": f"p{i}", "sample": s, "correct": False, "num_tokens": tokens} for i in range(n) for s in range(K)]


def with_lengths(recs: list[dict], tokens: float) -> list[dict]:
    return [{**r, "num_tokens": tokens} for r in recs]


N = 200
LOW, HIGH = [0.25] * N, [0.75] * N
# Noisy pairs: half the problems go up by a lot, half down by almost as much (a small mean difference
# with a wide interval): the honest outcome is "inconclusive".
NOISY_BEFORE = [0.5] * 40
NOISY_AFTER = [1.0 if i % 2 else 0.0 for i in range(40)]
NOISY_AFTER[0] = 1.0  # mean difference +0.025 over 40 problems


# -- the rule itself ---------------------------------------------------------------------------


def test_verdict_rule_has_three_outcomes():
    assert verdict(Estimate(0.1, 0.05, 0.15, 200)) == "reproduced"
    assert verdict(Estimate(-0.1, -0.15, -0.05, 200)) == "not reproduced"  # the opposite effect
    assert verdict(Estimate(0.0, -0.01, 0.01, 200)) == "not reproduced"  # no effect as large as the margin
    assert verdict(Estimate(0.02, -0.05, 0.09, 200)) == "inconclusive"
    assert verdict(Estimate(-0.1, -0.15, -0.05, 200), direction=-1) == "reproduced"  # a decrease wanted
    assert verdict(Estimate(0.0, float("nan"), float("nan"), 1)) == "inconclusive"


def test_wilson_and_pooled_proportions():
    lo, hi = wilson(141, 168)  # a textbook case: 83.9% of 168
    assert (round(lo, 3), round(hi, 3)) == (0.776, 0.887)
    assert wilson(1, 1)[0] == pytest.approx(0.2065, abs=1e-4) and wilson(0, 5) == (0.0, pytest.approx(0.4345, abs=1e-4))
    one = proportion({"p": (1, 1)})  # one event: wide, not [100%, 100%] as a bootstrap would say
    assert one.mean == 1.0 and one.lo < 0.25 and one.n == 1
    # the same pooled counts, spread evenly or bunched in a few problems: bunched is wider (clustering)
    even = proportion({f"p{i}": (1, 2) for i in range(50)})
    bunched = proportion({**{f"p{i}": (10, 10) for i in range(5)}, **{f"q{i}": (0, 10) for i in range(5)}})
    assert even.mean == bunched.mean == 0.5 and (bunched.hi - bunched.lo) > 2 * (even.hi - even.lo)
    assert proportion({"p": (0, 0)}).n == 0


def test_paired_difference_pairs_by_problem():
    before = {f"p{i}": i / 100 for i in range(100)}  # very different problems
    after = {k: v + 0.05 for k, v in before.items()}  # every one up by 0.05
    paired = paired_difference(before, after)
    assert paired.mean == pytest.approx(0.05) and paired.lo == pytest.approx(0.05) and paired.hi == pytest.approx(0.05)
    unpaired = estimate(list(after.values()))  # the spread between problems dwarfs the effect unpaired
    assert unpaired.hi - unpaired.lo > 0.05
    assert paired_difference(before, {"p1": 1.0}).n == 1  # only the problems both arms have


# -- every finding, three ways ----------------------------------------------------------------


def f1(before, after, len_before=20, len_after=40):
    return verdicts.r1_zero({0: (with_lengths(records(before), len_before), with_lengths(records(after), len_after))})


def test_f1_accuracy_and_length():
    assert f1(LOW, HIGH).verdict == "reproduced"
    assert f1(LOW, LOW).verdict == "not reproduced"  # accuracy flat
    assert f1(LOW, HIGH, 40, 20).verdict == "not reproduced"  # accuracy up, length down
    assert f1(NOISY_BEFORE, NOISY_AFTER).verdict == "inconclusive"
    assert verdicts.r1_zero({}).verdict == "not measured"


def mixing(rates):
    return records(rates, key="mixed_language")


def test_f2_language_reward():
    # (without, with): the reward should lower mixing
    assert verdicts.language_reward({0: (mixing(HIGH), mixing(LOW))}).verdict == "reproduced"
    assert verdicts.language_reward({0: (mixing(LOW), mixing(LOW))}).verdict == "not reproduced"
    assert verdicts.language_reward({0: (mixing(LOW), mixing(HIGH))}).verdict == "not reproduced"
    assert verdicts.language_reward({0: (mixing(NOISY_AFTER), mixing(NOISY_BEFORE))}).verdict == "inconclusive"
    finding = verdicts.language_reward({0: (mixing(HIGH), mixing(LOW))})
    assert any("accuracy cost" in line for line in finding.lines)


def curve(*rates_by_step):
    return {step: records(rates) for step, rates in rates_by_step}


def test_f3_cold_start_judged_against_rl_from_the_base_and_against_the_sft_alone():
    s1 = curve((0, LOW), (10, LOW), (40, LOW), (80, HIGH))
    rl_adds = curve((0, LOW), (10, LOW), (40, HIGH))  # RL after the cold start beats both arms
    assert verdicts.cold_start({0: (s1, rl_adds)}).verdict == "reproduced"
    # ahead of stage 1 all along, but only by the SFT's head start (stage 3 is trained on stage 1's own
    # outputs): RL adds nothing to the SFT alone, so the claim is not shown
    head_start = curve((0, HIGH), (10, HIGH), (40, HIGH))
    assert verdicts.cold_start({0: (s1, head_start)}).verdict == "not reproduced"
    assert verdicts.cold_start({0: (s1, curve((0, LOW), (10, LOW), (40, LOW)))}).verdict == "not reproduced"
    noisy = verdicts.cold_start({0: (curve((0, NOISY_BEFORE), (40, NOISY_BEFORE)),
                                     curve((0, NOISY_BEFORE), (40, NOISY_AFTER)))})
    assert noisy.verdict == "inconclusive"
    # judged at step 40 (the last step both have), not at stage 1's step 80
    late = verdicts.cold_start({0: (curve((0, LOW), (40, LOW), (80, [1.0] * N)), curve((0, LOW), (40, HIGH)))})
    assert late.verdict == "reproduced"
    # stage 1 catching up by step 40 is "not reproduced", however much RL added after the cold start
    assert verdicts.cold_start({0: (curve((0, LOW), (40, HIGH)), rl_adds)}).verdict == "not reproduced"
    finding = verdicts.cold_start({0: (s1, rl_adds)})
    text = "\n".join(finding.lines)
    assert "cold-start SFT alone" in text and "what RL adds after the cold start" in text
    assert "SFT alone" in finding.claim and "step 0 (the SFT alone)" in finding.rule


def general(helpful, harmful, rm):
    rows = []
    for i, (h, rate) in enumerate([(False, r) for r in helpful] + [(True, r) for r in harmful]):
        for s in range(K):
            hit = s < round(rate * K)
            rows.append({"id": f"g{i}", "harmful": h, "sample": s, "exactly_helpful": None if h else hit,
                         "harmful_answer": hit if h else False, "rm_helpfulness": rm, "rm_harmlessness": 0.0})
    return rows


def test_f4_judged_by_rules_with_a_goodhart_check():
    sft = general([0.25] * 100, [0.5] * 60, rm=0.0)
    assert verdicts.final_rl(sft, general([0.75] * 100, [0.0] * 60, rm=1.0)).verdict == "reproduced"
    assert verdicts.final_rl(sft, general([0.75] * 100, [0.5] * 60, rm=1.0)).verdict == "not reproduced"
    noisy = verdicts.final_rl(general([0.5] * 40, [0.5] * 40, 0.0), general(NOISY_AFTER, [0.5] * 40, 0.0))
    assert noisy.verdict in ("inconclusive", "not reproduced") and noisy.data["helpful"]["hi"] > 0.02
    goodhart = verdicts.final_rl(sft, general([0.25] * 100, [0.0] * 60, rm=2.0))
    assert goodhart.data["goodhart"] and any("rose while" in line for line in goodhart.lines)
    assert not verdicts.final_rl(sft, general([0.75] * 100, [0.0] * 60, rm=1.0)).data["goodhart"]


def test_f4_the_reward_is_the_benign_prompts_and_the_reward_models_are_scored():
    """The helpfulness reward's means cover the benign prompts it rewards, never the harmful ones (which
    the helpfulness model scores very differently); each reward model's held-out pair accuracy is shown
    with a Wilson interval, or said to be missing."""
    def scored(helpful_rm, harmful_rm):
        return [dict(r, rm_helpfulness=harmful_rm if r["harmful"] else helpful_rm)
                for r in general([0.25] * 100, [0.5] * 60, rm=0.0)]

    finding = verdicts.final_rl(scored(0.5, -3.0), scored(0.5, 3.0), {
        "rm_helpfulness": {"held_out_pair_accuracy": 141 / 168, "pairs_held_out": 168},
        "rm_harmlessness": {"held_out_pair_accuracy": 1.0, "pairs_held_out": 134}})
    assert finding.data["reward_model_before"]["mean"] == pytest.approx(0.5)  # all prompts would give -0.81
    assert finding.data["reward_model_after"]["mean"] == pytest.approx(0.5)  # all prompts would give +1.59
    reward = next(line for line in finding.lines if line.startswith("the reward:"))
    assert "0.50 [0.50, 0.50] → 0.50 [0.50, 0.50]" in reward and "100 benign prompts" in reward
    pairs = next(line for line in finding.lines if "held-out preference pair" in line)
    assert "helpfulness 83.9% [77.6%, 88.7%] (141 of 168 pairs)" in pairs
    assert "harmlessness 100.0% [97.2%, 100.0%] (134 of 134 pairs)" in pairs
    assert finding.data["pair_accuracy"]["rm_harmlessness"]["lo"] == pytest.approx(wilson(134, 134)[0])
    missing = verdicts.final_rl(scored(0.5, -3.0), scored(0.5, 3.0))
    assert "helpfulness: not measured" in next(line for line in missing.lines if "held-out preference pair" in line)


def test_f5_distillation_against_rl():
    base = records([0.1] * N)
    assert verdicts.distillation(base, records(HIGH), records(LOW)).verdict == "reproduced"
    assert verdicts.distillation(base, records(LOW), records(HIGH)).verdict == "not reproduced"
    assert verdicts.distillation(base, records(NOISY_AFTER), records(NOISY_BEFORE)).verdict == "inconclusive"
    finding = verdicts.distillation(base, records(HIGH), records(LOW), budget="60 optimizer steps each")
    assert any("gain over the base" in line for line in finding.lines)


def test_seeds_are_shown_beside_the_single_run_interval():
    runs = {s: (with_lengths(records(LOW, seed=s), 20), with_lengths(records(HIGH, seed=s), 40)) for s in (0, 1, 2)}
    finding = verdicts.r1_zero(runs)
    assert finding.verdict == "reproduced"
    assert any("over 3 seeds" in line and "sd" in line for line in finding.seeds)


# -- the report, end to end --------------------------------------------------------------------


def _stage(recipe, stage: str, parent=None, folder=None, **metrics) -> Manifest:
    m = Manifest.start(folder or recipe.stage_dir(stage), stage, recipe, parent=parent)
    m.update_metrics(wall_seconds=90.0, peak_rss_mb=512.0, **metrics)
    m.complete(None)
    return m


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _summary(rows):
    return {"pass@1": sum(r["correct"] for r in rows) / len(rows), "k": K, "cons@4": 0.5, "pass@4": 0.8,
            "mean_length_tokens": sum(r["num_tokens"] for r in rows) / len(rows), "language_mix_rate": 0.1,
            "temperature": 0.6, "top_p": 0.95}


def fixture_run(tmp_path, after_rates):
    r = load_recipe("tiny", [f"run_root={tmp_path}"])
    probe = with_lengths(records(LOW), 15)
    base = _stage(r, "base", probe={**_summary(probe), "temperature": 1.0})
    _write(r.stage_dir("base") / "probe" / "samples.jsonl", probe)
    before, after = with_lengths(records(LOW), 20), with_lengths(records(after_rates), 40)
    _write(r.stage_dir("stage1") / "eval_before" / "samples.jsonl", before)
    _write(r.stage_dir("stage1") / "eval_after" / "samples.jsonl", after)
    _stage(r, "stage1", base, eval_before=_summary(before), eval_after=_summary(after), train={"steps": 80},
           time_by_kind={"startup": 4.0, "training": 70.0, "sampling": 12.0, "grading": 3.0},
           threads={"threads": 1, "cores": 2, "chosen_by": "measured", "busy_elsewhere": 1.0},
           core_gflops={"start": 61.2, "end": 40.4})
    rows = [{"step": s, "accuracy": 0.2 + 0.01 * s, "mean_length": 30 + s, "format_rate": 0.9} for s in range(1, 11)]
    (r.stage_dir("stage1") / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return r.stage_dir("base").parent


def test_report_shows_measured_and_missing_stages_with_intervals(tmp_path):
    path = build_report(fixture_run(tmp_path, HIGH))
    text = path.read_text()
    results, minutes = text.split("Where the minutes go")
    table = {line.split(" | ")[0].strip("| "): line for line in results.splitlines() if line.startswith("| ")}
    stage1 = table["stage 1: R1-Zero (RL from the base)"]
    times = {line.split(" | ")[0].strip("| "): line for line in minutes.split("## Findings")[0].splitlines()
             if line.startswith("| ")}
    # stage | wall | startup | loading | sampling | grading | evaluation | training | ...: unmeasured kinds blank
    assert times["stage 1: R1-Zero (RL from the base)"].startswith(
        "| stage 1: R1-Zero (RL from the base) | 90 | 4 |  | 12 | 3 |  | 70 |")
    assert times["stage 1: R1-Zero (RL from the base)"].endswith("| 1 | 61 → 40 |")  # threads, core speed
    assert "| – | – |" in times["base model (probe, R1-Zero template)"]  # measured before timing: said so
    # the stages' sum: walls (90 + 90) and stage 1's startup (4), which its wall does not count
    assert times["total (wall + startup)"].startswith("| total (wall + startup) | 184 | 4 |  | 12 | 3 |  | 70 |")
    assert "| complete | 0.6 | 0.750 [0.750, 0.750] |" in stage1 and "1.5 min" in stage1
    assert "| 1.0 |" in table["base model (probe, R1-Zero template)"]  # the probe's own temperature
    for missing in ("stage 3: reasoning RL", "stage 4: rejection SFT + all-scenario RL", "distillation"):
        assert "| missing |" in table[missing] and "0.000" not in table[missing]
    assert "**F1. R1-Zero" in text and "— **reproduced**" in text and "rule:" in text
    assert "paired difference +0.500" in text or "paired difference 0.500" in text
    assert "**F2." in text and "not measured" in text  # no variant run: said so, not guessed
    assert "Training seeds measured: [0] (one seed: run `make findings` for more)" in text
    assert "seeds: one training seed (the pipeline's)" in text  # each verdict says whether it had seeds
    assert (path.parent / "stage1_curves.png").stat().st_size > 1000
    assert "distillation: missing" in text


def test_report_says_when_a_finding_does_not_reproduce(tmp_path):
    text = build_report(fixture_run(tmp_path, LOW)).read_text()
    assert "**F1. R1-Zero" in text and "— **not reproduced**" in text


def test_report_pairs_the_findings_seeds(tmp_path):
    run_dir = fixture_run(tmp_path, HIGH)
    r = load_recipe("tiny", [f"run_root={tmp_path}"])
    for seed, rates in ((1, HIGH), (2, [0.5] * N)):
        folder = run_dir / "findings" / f"seed{seed}" / "stage1"
        before, after = with_lengths(records(LOW, seed=seed), 20), with_lengths(records(rates, seed=seed), 40)
        _write(folder / "eval_before" / "samples.jsonl", before)
        _write(folder / "eval_after" / "samples.jsonl", after)
        _stage(r, "stage1", None, folder=folder, eval_before=_summary(before), eval_after=_summary(after),
               train={"steps": 80})
    text = build_report(run_dir).read_text()
    assert "Training seeds measured: [0, 1, 2]" in text and "over 3 seeds" in text
    # the headline numbers carry their seed spread, and the rest say they are one draw
    assert ("stage 1: R1-Zero (RL from the base): held-out pass@1 over 3 training seeds: mean 0.667, sd 0.144, "
            "range [0.500, 0.750] (seed 0: 0.750, seed 1: 0.750, seed 2: 0.500)") in text
    assert "Every other number in the table is one draw" in text
    stages = json.loads((run_dir / "report" / "summary.json").read_text())["stages"]
    assert stages["stage1"]["over_seeds"]["pass@1"] == [0.75, 0.75, 0.5] and stages["stage3"].get("over_seeds") is None
    spec = importlib.util.spec_from_file_location("readme_status", REPO / "scripts" / "readme_status.py")
    readme_status = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(readme_status)
    status = readme_status.render(json.loads((run_dir / "report" / "summary.json").read_text()), "runs/tiny")
    assert "| 0.750 [0.750, 0.750] | mean 0.667, range [0.500, 0.750], 3 seeds | 0.6 |" in status
    assert "| one draw |" in status  # the base's probe


def test_readme_status_is_made_from_the_report_and_checked_against_it(tmp_path):
    spec = importlib.util.spec_from_file_location("readme_status", REPO / "scripts" / "readme_status.py")
    readme_status = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(readme_status)
    run_dir = fixture_run(tmp_path, HIGH)
    build_report(run_dir)
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["stages"]["stage1"]["pass@1"]["mean"] == pytest.approx(0.75)
    assert summary["stages"]["stage3"] == {"status": "missing"}
    assert {f["key"]: f["verdict"] for f in summary["findings"]}["F1"] == "reproduced"
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{readme_status.BEGIN}\nold numbers\n{readme_status.END}\n\nrest\n")
    assert readme_status.main([str(run_dir), "--readme", str(readme), "--check"]) == 1  # stale
    assert readme_status.main([str(run_dir), "--readme", str(readme), "--write"]) == 0
    assert readme_status.main([str(run_dir), "--readme", str(readme), "--check"]) == 0
    text = readme.read_text()
    assert "| stage 1, R1-Zero | complete | 1.5 min | 0.750 [0.750, 0.750] | one draw | 0.6 |" in text and text.endswith("rest\n")
    readme.write_text(text.replace("0.750 [0.750", "0.760 [0.750"))  # a hand edit
    assert readme_status.main([str(run_dir), "--readme", str(readme), "--check"]) == 1


def test_the_readme_has_a_generated_status_section():
    text = (REPO / "README.md").read_text()
    assert "<!-- status:begin -->" in text and "<!-- status:end -->" in text
    assert "scripts/readme_status.py" in text.split("<!-- status:begin -->")[1].split("<!-- status:end -->")[0]


def test_clustered_resampling_is_wider_when_a_cluster_moves_together():
    before = {f"p{i}": 0.0 for i in range(60)}
    after = {f"p{i}": (1.0 if i < 20 else 0.0) for i in range(60)}  # one act of 20 prompts moved, the rest did not
    acts = {f"p{i}": f"act{i // 20}" for i in range(60)}
    plain, clustered = paired_difference(before, after), paired_difference(before, after, clusters=acts)
    assert plain.mean == clustered.mean
    assert (clustered.hi - clustered.lo) > 2 * (plain.hi - plain.lo)


CHECKED = " <think> 8+4=12 (check 12-4=8 ok) write 2 </think>"
PLAIN = " <think> 8+4=12 write 2 </think>"


def checks(rates_checked: list[float], acc_checked: float, acc_plain: float, seed: int | None = None,
           completion: str = CHECKED) -> list[dict]:
    """k samples per problem; a share of them with checks (labelled as eval/recheck.py would), each kind
    right at its own rate: exactly (rounded over the problem's samples of that kind), or at random with a
    ``seed``. A checked sample's chain of thought is ``completion``, a plain one's has no check."""
    rng = random.Random(seed)
    out = []
    for i, share in enumerate(rates_checked):
        n_checked = round(share * K)
        for s in range(K):
            kind = "rechecked" if s < n_checked else "plain"
            acc, rank, n = (acc_checked, s, n_checked) if kind != "plain" else (acc_plain, s - n_checked, K - n_checked)
            right = rng.random() < acc if seed is not None else rank < round(acc * n)
            out.append({"id": f"p{i}", "sample": s, "correct": right, "recheck": kind, "num_tokens": 20,
                        "completion": completion if kind != "plain" else PLAIN, "problem": "q", "answer": "12"})
    return out


def test_f0_aha_needs_more_checks_and_better_checked_answers():
    before = checks([0.0] * N, 0.5, 0.5)
    assert verdicts.aha({0: (before, checks([0.5] * N, 0.95, 0.4))}).verdict == "reproduced"
    some = checks([0.25] * N, 0.95, 0.4)  # a quarter checked in the base …
    assert verdicts.aha({0: (some, checks([0.25] * N, 0.95, 0.4))}).verdict == "not reproduced"  # … no more after
    assert verdicts.aha({0: (before, checks([0.5] * N, 0.4, 0.4))}).verdict == "not reproduced"  # checks do not help
    # on half the problems checked answers are all right and plain ones all wrong, on the other half the
    # reverse (one problem more of the first kind): a small mean gap with a wide interval
    mixed = [dict(r, correct=(r["recheck"] == "plain") != (int(r["id"][1:]) % 2 == 0 or r["id"] == "p1"))
             for r in checks([0.5] * 40, 1.0, 1.0)]
    noisy = verdicts.aha({0: (checks([0.0] * 40, 0.5, 0.5), mixed)})
    assert noisy.verdict == "inconclusive" and noisy.data["accuracy_gap"][0]["lo"] < 0 < noisy.data["accuracy_gap"][0]["hi"]
    assert verdicts.aha({0: ([{"id": "p", "correct": True}], [{"id": "p", "correct": True}])}).verdict == "not measured"


def test_f0_compares_checked_and_plain_within_one_model_only():
    """Every chain of thought checks after stage 1: no plain one of the same model is left, so the
    accuracy half is not testable and the finding inconclusive, whatever the base's plain ones scored (the
    base's accuracy against stage 1's is F1, not an effect of checking)."""
    after = checks([1.0] * N, 0.95, 0.4)
    for base_accuracy in (0.0, 0.5, 1.0):
        finding = verdicts.aha({0: (checks([0.25] * N, 0.5, base_accuracy), after)})
        assert finding.verdict == "inconclusive" and finding.data["accuracy_gap"] == {}
        assert finding.data["accuracy_gap_verdicts"][0] == "not testable"
        assert "not testable within the model" in finding.lines[1] and "base" not in finding.lines[1]
    # several seeds: the untestable half is said so, not averaged in
    two = verdicts.aha({s: (checks([0.25] * N, 0.5, 0.5), after) for s in (0, 1)})
    assert any("not testable for seeds [0, 1]" in line for line in two.seeds)


def test_f0_is_not_reproduced_when_rl_selects_no_checks():
    """Checks absent before and after stage 1 (the run of 66b0005): RL did not select the routine. That is
    "not reproduced", with the rates before and after and their intervals, never "not measured"."""
    never = verdicts.aha({0: (checks([0.0] * N, 0.5, 0.5), checks([0.0] * N, 0.9, 0.4))})
    assert never.verdict == "not reproduced"
    assert never.lines[0].startswith("chains of thought with checks (share of samples that reason): 0.0% [0.0%, 0.0%] "
                                     "→ 0.0% [0.0%, 0.0%]")
    assert any("RL did not select the routine" in line for line in never.lines)
    dropped = verdicts.aha({0: (checks([0.5] * N, 0.5, 0.5), checks([0.0] * N, 0.9, 0.4))})  # checks unlearnt
    assert dropped.verdict == "not reproduced" and dropped.data["share"][0]["hi"] < 0


def test_f0_shows_whether_the_checks_verify():
    """The verification rates read each check's step (eval/recheck.py): the issue's three examples, a
    right step passed, and their counts, before and after; a planted fact is one only when the base's
    corpus planted it."""
    traces = [" <think> 1-0=2 (check 2+0=2, not 1; wait, 1-0=1) write 1 </think>",  # planted, caught
              " <think> 18-6=9 (check 9+6=15 ok) write 9 </think>",  # own slip, rubber stamp
              " <think> 3+2=5 (check 5-2=3, not 2; wait, 2+2=4) write 5 </think>",  # right step, false alarm
              " <think> 8+4=12 (check 12-4=8 ok) write 2 </think>"]  # right step, passed
    after = [r for i, t in enumerate(traces) for r in checks([1.0] * 10, 0.9, 0.4, completion=t)
             if int(r["id"][1:]) % len(traces) == i]  # each trace on its own problems
    before = checks([0.0] * 10, 0.5, 0.5)
    finding = verdicts.aha({0: (before, after)}, misconceived_facts(0.15))
    got = finding.data["verification_after"]
    assert got["checks"] == 40 and got["counts"] == {"own/rubber stamp": 12, "planted/caught": 12,
                                                     "right/false alarm": 8, "right/passed": 8}
    assert (got["planted caught"]["hits"], got["planted caught"]["n"]) == (12, 12)
    assert (got["own caught"]["hits"], got["own caught"]["n"]) == (0, 12)
    assert (got["rubber stamps"]["hits"], got["rubber stamps"]["n"]) == (12, 20)  # of the "ok"s
    assert (got["false alarms"]["hits"], got["false alarms"]["n"]) == (8, 16)  # of the right steps checked
    assert got["rubber stamps"]["lo"] < 0.6 < got["rubber stamps"]["hi"]
    assert finding.data["verification_before"] == {"checks": 0}
    text = "\n".join(finding.lines)
    assert "rubber stamps (\"ok\" on a wrong step, of the \"ok\"s) 12 of 20 (60.0% [" in text
    assert "checks of the base (before stage 1): no check looks at a step" in text
    assert "`1-0=2" not in text or "catches a wrong step" in text
    unplanted = verdicts.aha({0: (before, after)}).data["verification_after"]  # no misconceptions: all slips own
    assert unplanted["counts"]["own/caught"] == 12 and "planted/caught" not in unplanted["counts"]


def entropy_rows(values: list[float], clip: float = 0.02) -> list[dict]:
    return [{"step": i + 1, "entropy": v, "clip_ratio": clip, "clip_ratio_high": clip / 2, "clip_ratio_low": clip / 2}
            for i, v in enumerate(values)]


def test_f7_clip_higher_keeps_entropy():
    falling = [0.5 - 0.005 * i for i in range(80)]  # symmetric clipping: entropy collapses
    kept = [0.5 - 0.001 * i for i in range(80)]
    assert verdicts.clip_higher({0: (entropy_rows(falling), entropy_rows(kept))}).verdict == "reproduced"
    assert verdicts.clip_higher({0: (entropy_rows(kept), entropy_rows(kept))}).verdict == "not reproduced"
    assert verdicts.clip_higher({0: (entropy_rows(kept), entropy_rows(falling))}).verdict == "not reproduced"
    wobbly = [k + 0.01 + (0.2 if i % 2 else -0.2) for i, k in enumerate(kept)]  # a small gain, steps far apart
    assert verdicts.clip_higher({0: (entropy_rows(kept), entropy_rows(wobbly))}).verdict == "inconclusive"
    never = verdicts.clip_higher({0: (entropy_rows(falling, clip=0.0), entropy_rows(kept, clip=0.0))})
    assert never.verdict == "not testable" and "never acted" in never.lines[1]
    assert verdicts.clip_higher({}).verdict == "not measured"


def test_f7_is_not_testable_when_clipping_is_rare():
    """The measured clip fraction of the run of 66b0005's findings (about 0.03% of tokens) is far under
    the rule's 1%: not testable, with the reason; the same entropy curves just above 1% are judged."""
    falling = [0.5 - 0.005 * i for i in range(80)]
    kept = [0.5 - 0.001 * i for i in range(80)]
    for clip, expected in ((0.0003, "not testable"), (0.0099, "not testable"), (0.0101, "reproduced"),
                           (0.05, "reproduced")):
        finding = verdicts.clip_higher({0: (entropy_rows(falling, clip), entropy_rows(kept, clip))})
        assert finding.verdict == expected, clip
    rare = verdicts.clip_higher({0: (entropy_rows(falling, 0.0003), entropy_rows(kept, 0.0003))})
    assert "clipping acted on 0.030% of the symmetric arm's tokens in the window, under 1%" in rare.lines[1]
    assert rare.data["entropy"] == {}


def test_f7_is_judged_where_entropy_moves():
    """Both arms collapse to the same floor by step 20 (as the tiny stage 1 does) and clip-higher keeps
    entropy higher before that: judged over the steps before the collapse, reproduced; steps 61-120, where
    both sit at the floor, would say "not reproduced". A collapse within the first steps leaves no window."""
    symmetric = [0.25 - 0.015 * i for i in range(15)] + [0.025] * 105
    higher = [0.25 - 0.008 * i for i in range(15)] + [0.13 - 0.02 * i for i in range(5)] + [0.025] * 100
    finding = verdicts.clip_higher({0: (entropy_rows(symmetric), entropy_rows(higher))})
    assert finding.verdict == "reproduced"
    assert finding.lines[0].startswith("judged window: steps 1–19,") and "both below at step 20" in finding.lines[0]
    assert any(line.startswith("after the window, steps 20–120 (shown, not judged)") for line in finding.lines)
    late = estimate([h - s for h, s in zip(higher[60:], symmetric[60:], strict=True)])
    assert verdict(late, +1, verdicts.ENTROPY_MARGIN) == "not reproduced"  # what the old window said
    floor = [0.25] + [0.001] * 50
    short = verdicts.clip_higher({0: (entropy_rows(floor), entropy_rows(floor))})
    assert short.verdict == "not testable" and "1 steps to judge, under 5" in short.lines[1]


def arm(accuracy: list[float], checked: bool) -> list[dict]:
    """An intervention arm's samples: each problem right at its rate (in quarters), every sample checked or none."""
    return [dict(r, recheck="rechecked" if checked else "plain") for r in records(accuracy)]


def test_f0_judges_checking_by_the_intervention_inside_one_model():
    """With checks forced and suppressed in the same model on the same problems (eval/intervene.py), that
    paired effect is F0's accuracy half, not the checked − plain gap of the model's own choices, which the
    problems it chose to check confound."""
    before, after = checks([0.0] * N, 0.5, 0.5), checks([0.5] * N, 0.95, 0.4)  # its own checks look great
    assert verdicts.aha({0: (before, after)}).verdict == "reproduced"  # without the intervention
    useless = {0: (arm([0.5] * N, True), arm([0.5] * N, False)),
               "base": (arm([0.25] * N, True), arm([0.25] * N, False))}
    finding = verdicts.aha({0: (before, after)}, intervention=useless)
    assert finding.verdict == "not reproduced" and finding.data["intervention_verdict"] == "not reproduced"
    assert finding.data["intervention"]["stage1_by_seed"][0]["mean"] == 0.0
    assert any(line.startswith("stage 1, one model: pass@1 with checks suppressed → forced at every step: 0.500")
               and "samples with checks: 0 of 800 suppressed, 800 of 800 forced" in line and "judged" in line
               for line in finding.lines), finding.lines
    assert any(line.startswith("base, one model") and line.endswith("(shown)") for line in finding.lines)
    assert any("shown, not judged: the intervention is" in line for line in finding.lines)
    helps = {0: (arm([0.75] * N, True), arm([0.25] * N, False))}
    assert verdicts.aha({0: (before, after)}, intervention=helps).verdict == "reproduced"
    # other training seeds' stage 1: shown per seed, the headline stays seed 0's
    seeded = verdicts.aha({0: (before, after)}, intervention={**helps, 2: useless[0]})
    assert seeded.verdict == "reproduced"
    assert any(line.startswith("stage 1, training seed 2, one model") and line.endswith("(shown)") for line in seeded.lines)
    assert any(line.startswith("stage 1's pass@1, checks forced − suppressed: mean +0.250") and
               "seed 0: +0.500 (reproduced), seed 2: +0.000 (not reproduced)" in line for line in seeded.seeds), seeded.seeds
    # the intervention cannot rescue a routine RL did not select
    assert verdicts.aha({0: (before, checks([0.0] * N, 0.5, 0.5))}, intervention=helps).verdict == "not reproduced"


def test_check_intervention_bans_the_right_tokens():
    """Suppressed: the tokens that open a check, everywhere. Forced: after a fact written outside a check,
    the tokens that end the step plainly (" write", "写"), and nothing else: a borrow's second fact can
    follow its first ("7-1=6, 16-7=9"); inside a check, or anywhere else, nothing is banned."""
    import torch

    from eval.intervene import CheckIntervention
    from stages.pipeline.common import load_tokenizer

    tok = load_tokenizer(str(REPO / "recipes" / "tiny" / "base"))
    texts = [tok.decode([i]) for i in range(len(tok))]

    def banned(mode: str, text: str) -> set[str]:
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        out = CheckIntervention(tok, mode)(ids, torch.zeros(1, len(tok)))
        return {texts[i] for i in torch.isinf(out[0]).nonzero()[:, 0].tolist()}

    everywhere = banned("suppressed", "<think>7+5=12 write 2")
    assert everywhere and all("(" in t or "（" in t for t in everywhere) and " (check " in everywhere
    for fact in ("<think>8+4=12", "<think>13-1-4=8", "<think>先算 67+20：7+0=7写7，6+2=8",
                 "<think>8+4=13 (check 13-4=9, not 8; wait, 8+4=12) write 2, 3+5=8"):
        plain = banned("forced", fact)
        assert plain and all(t.lstrip(" ,，").startswith(("write", "写")) for t in plain), (fact, plain)
        assert {" write ", "写"} & plain and " (check " not in plain and ", " not in plain and "8" not in plain
    for elsewhere in ("<think>8+4=12 (check 12-4=8", "<think>8+4=13 (check 13-4=9, not 8; wait, 8+4=12",
                      "<think>8+4=12 write 2", "<think>first 67+20:"):
        assert banned("forced", elsewhere) == set(), elsewhere
