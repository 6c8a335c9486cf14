"""The paper's five findings, each judged by a comparison that can come out either way.

Every function takes what a finding compares, as graded sample records (``{"id", "correct",
"num_tokens", "mixed_language", …}`` from ``samples.jsonl``; stage 4's general records), one entry per
training seed (seed → records; seed 0 is the pipeline's run), and returns a :class:`Finding`: the
verdict (:func:`eval.stats.verdict`, its rule printed beside it), the measured numbers with their
95% intervals, and, when there are several seeds, the difference on each seed with its mean and
spread. The headline verdict is the one of the lowest seed (the pipeline's own run); the seeds show
whether it holds for the others. Arms are always paired on the same problems (or prompts).

| finding | the paired difference judged | paper's direction |
|---|---|---|
| F0 the "aha" moment: RL amplifies a check routine the corpus planted | stage 1 after − before: share of chains of thought with checks; after: checked − plain accuracy of the same model (not testable where no problem has both; never against another model) | both up |
| F1 R1-Zero: accuracy and length rise together | stage 1 after − before: pass@1, and mean length | both up |
| F2 the language reward ends language mixing | stage 3 with − without the language reward: mixing rate (accuracy cost shown) | down |
| F3 the cold start speeds up RL | stage 3 − stage 1, both after the same number of RL steps (SFT alone and RL after it shown) | up |
| F4 final RL: more helpful and more harmless | stage 4 final − SFT model: exactly-helpful rate (rules), harmful-answer rate (rules); the helpfulness reward on the benign prompts and the reward models' held-out pair accuracy shown | up, down |
| F5 distillation beats RL on a small student | distilled − RL-trained student, same base, budget and template (each arm's gain shown) | up |
| F7 clip-higher keeps entropy from collapsing | stage 1 with ε_high 0.28 − with 0.2: policy entropy, step by step, over the steps before it collapses in both arms; not testable when clipping acts on under 1% of tokens there | up |

F0 also shows whether the checks verify (``eval/recheck.py`` ``read_verifications``): of the steps a check
looks at, the planted facts and the model's own slips it catches, the wrong steps it passes ("rubber
stamps") and the right ones it calls wrong ("false alarms"), before and after stage 1; shown, not judged.
Verdicts: reproduced, not reproduced, inconclusive (:func:`eval.stats.verdict`), not testable (the data
cannot answer the rule: no problem to pair, clipping too rare), not measured (a stage has not run).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from data.templates import think_text
from eval.recheck import read_verifications, verification_counts
from eval.stats import (
    METHOD,
    PROPORTION_METHOD,
    Estimate,
    across_seeds,
    combine,
    estimate,
    paired_difference,
    per_problem,
    proportion,
    verdict,
    wilson,
)

__all__ = ["Finding", "aha", "clip_higher", "cold_start", "distillation", "final_rl", "language_reward", "r1_zero"]

Records = Sequence[Mapping]
ACC_MARGIN = 0.02  # pass@1 and rates: two points
LENGTH_MARGIN = 1.0  # mean length: one token


@dataclass
class Finding:
    key: str  # F1 … F5
    claim: str
    verdict: str  # reproduced / not reproduced / inconclusive / not testable / not measured
    rule: str
    lines: list[str] = field(default_factory=list)  # the numbers, with intervals
    seeds: list[str] = field(default_factory=list)  # one line per statistic across seeds
    data: dict = field(default_factory=dict)  # the estimates, for tests and JSON

    def markdown(self) -> list[str]:
        out = [f"**{self.key}. {self.claim}** — **{self.verdict}**", f"  - rule: {self.rule}"]
        out += [f"  - {line}" for line in self.lines]
        out += [f"  - seeds: {line}" for line in self.seeds]
        if not self.seeds and self.verdict not in ("not measured", "not testable"):
            out.append("  - seeds: one training seed (the pipeline's); the interval covers the problems sampled, "
                       "not training randomness")
        return out


def _rule(effect: str, direction: int, margin: float) -> str:
    side = "above 0" if direction > 0 else "below 0"
    bound = f"+{margin:g}" if direction > 0 else f"-{margin:g}"
    return (f"{effect}: reproduced if its 95% interval lies {side}; not reproduced if it lies "
            f"{'below' if direction > 0 else 'above'} {bound}; inconclusive otherwise ({METHOD})")


def _diff_line(name: str, before: Estimate, after: Estimate, diff: Estimate, percent: bool = False,
               digits: int = 3) -> str:
    return (f"{name}: {before.fmt(digits, percent)} → {after.fmt(digits, percent)}; "
            f"paired difference {diff.fmt(digits, percent)}")


def _seed_line(name: str, diffs: dict[int, Estimate], verdicts: dict[int, str], digits: int = 3) -> str:
    stats = across_seeds([d.mean for d in diffs.values()])
    per = ", ".join(f"seed {s}: {d.mean:+.{digits}f} ({verdicts[s]})" for s, d in sorted(diffs.items()))
    if stats["n"] < 2:
        return f"{name}: {per} (one seed only: the interval covers the problems sampled, not training randomness)"
    return (f"{name}: mean {stats['mean']:+.{digits}f}, sd {stats['sd']:.{digits}f}, range "
            f"[{stats['min']:+.{digits}f}, {stats['max']:+.{digits}f}] over {stats['n']} seeds; {per}")


def _not_measured(key: str, claim: str, rule: str, why: str) -> Finding:
    return Finding(key, claim, "not measured", rule, [why])


def _checked(r: Mapping) -> float | None:
    """1.0 for a chain of thought with checks (eval/recheck.py), 0.0 for one without, None for no chain."""
    label = r.get("recheck")
    return None if label is None else float(label != "plain")


def _share(records: Records, value) -> dict[str, float]:
    """Per problem, the mean of ``value(record)`` over its records where it is not None."""
    by_id: dict[str, list[float]] = {}
    for r in records:
        v = value(r)
        if v is not None:
            by_id.setdefault(str(r["id"]), []).append(v)
    return {k: sum(v) / len(v) for k, v in by_id.items()}


# the verification rates: (a check counted, among which checks), by (kind of step, outcome of its check)
# (eval/recheck.py Verification); a check cut off before its verdict (outcome None) is in no rate
_RATES = {
    "planted caught": (lambda k, o: k == "planted" and o == "caught", lambda k, o: k == "planted" and o is not None),
    "own caught": (lambda k, o: k == "own" and o == "caught", lambda k, o: k == "own" and o is not None),
    "rubber stamps": (lambda k, o: o == "rubber stamp", lambda k, o: o in ("rubber stamp", "passed")),
    "false alarms": (lambda k, o: o == "false alarm", lambda k, o: k == "right" and o is not None),
}


def _verification_lines(name: str, records: Records, misconceptions: frozenset[str], seed: int) -> tuple[list[str], dict]:
    """What the checks of ``records`` say about the steps they look at (eval/recheck.py
    ``verification_counts``): planted facts caught, the model's own slips caught, rubber stamps ("ok" on a
    wrong step, of the "ok"s) and false alarms ("not" on a right step, of the right steps checked), each
    with its counts and interval (:data:`eval.stats.PROPORTION_METHOD`)."""
    by_id = verification_counts(records, misconceptions)
    total = sum(by_id.values(), Counter())
    if not total:
        return [f"{name}: no check looks at a step, so none verifies one (0 checks read)"], {"checks": 0}

    def count(tally: Counter, test) -> int:
        return sum(n for key, n in tally.items() if test(*key))

    rates = {key: proportion({i: (count(t, hit), count(t, of)) for i, t in by_id.items()}, seed)
             for key, (hit, of) in _RATES.items()}
    hits = {key: count(total, hit) for key, (hit, _) in _RATES.items()}

    def fmt(key: str) -> str:
        e = rates[key]
        return f"{hits[key]} of {e.n} ({e.fmt(percent=True)})" if e.n else "0 of 0 (none to count)"

    cut = count(total, lambda k, o: o is None)
    planted = (f"planted facts (the corpus's misconceptions, written as it writes them) caught {fmt('planted caught')}"
               if misconceptions else "planted facts: none (the base's corpus planted no misconceptions)")
    lines = [f"{name}, {sum(total.values())} checks read ({cut} cut off before their verdict): {planted}; the "
             f"model's own slips (a wrong step that is not a planted one) caught {fmt('own caught')}; rubber stamps "
             f"(\"ok\" on a wrong step, of the \"ok\"s) {fmt('rubber stamps')}; false alarms (\"not\" on a right "
             f"step, of the right steps checked) {fmt('false alarms')}"]
    data = {"checks": sum(total.values()), "cut_off": cut,
            "counts": {f"{k}/{o}": n for (k, o), n in sorted(total.items(), key=str)},
            **{key: {**e.to_dict(), "hits": hits[key]} for key, e in rates.items()}}
    return lines, data


def _aha_lines(before: Records, after: Records, share: tuple, gap: tuple, misconceptions: frozenset[str],
               seed: int) -> tuple[list[str], dict]:
    """F0's lines for one seed: the share with checks, the checked − plain gap (or why it is not
    testable), whether the checks verify before and after, and a sampled trace that catches a wrong step."""
    (sb, sa, share_d, share_v), (gap_d, gap_v) = share, gap
    n_checked = sum(r.get("recheck") not in (None, "plain") for r in after)
    n_plain = sum(r.get("recheck") == "plain" for r in after)
    lines = [_diff_line("chains of thought with checks (share of samples that reason)", estimate(list(sb.values())),
                        estimate(list(sa.values())), share_d, percent=True) + f" ({share_v})"]
    if gap_d is not None:
        lines.append(f"after stage 1, accuracy of checked − plain chains of thought of the same model, on the same "
                     f"problems: {gap_d.fmt()} over {gap_d.n} problems with both ({gap_v})")
    else:
        lines.append(f"after stage 1, no problem has both checked and plain chains of thought ({n_checked} checked, "
                     f"{n_plain} plain samples): checked against plain accuracy is not testable within the model, "
                     f"and no other model's samples stand in (not testable)")
    if not n_checked:
        lines.append(f"after stage 1 no chain of thought checks its steps: RL did not select the routine (the base "
                     f"checked in {sum(r.get('recheck') not in (None, 'plain') for r in before)} of "
                     f"{sum(r.get('recheck') is not None for r in before)} samples that reason)")
    data: dict = {}
    for key, name, records in (("verification_before", "checks of the base (before stage 1)", before),
                               ("verification_after", "checks after stage 1", after)):
        more, data[key] = _verification_lines(name, records, misconceptions, seed)
        lines += more
    lines.append(f"verification rates: {PROPORTION_METHOD}")
    corrected = [r for r in after if r.get("recheck") == "corrected"]
    if n_checked:
        lines.append(f"after stage 1, {len(corrected)} of {len(after)} samples have a check that said \"not\" and a "
                     f"step done again (label \"corrected\"; whether the step was wrong is in the lines above); "
                     f"{sum(bool(r.get('correct')) for r in corrected)} of them ended right")
    caught = [r for r in corrected if r.get("correct") and any(
        v.outcome == "caught" for v in read_verifications(think_text(r.get("completion") or ""), misconceptions))]
    if caught:
        lines.append(f"a sampled chain of thought whose check catches a wrong step (problem `{caught[0]['problem']}`, "
                     f"gold {caught[0]['answer']}): `{caught[0]['completion'].strip()[:600]}`")
    return lines, data


def _intervention_lines(intervention: Mapping[str | int, tuple[Records, Records]], seed: int
                        ) -> tuple[list[str], dict[str | int, Estimate]]:
    """The within-model effect of checking: per model (``base``, or a training seed's stage 1), pass@1 with
    checks forced − suppressed at every step (eval/intervene.py), paired by problem, and how many chains of
    thought checked in each arm. ``seed``: the headline's training seed."""
    lines, diffs = [], {}
    for model, (forced, suppressed) in intervention.items():
        arms = {"forced": forced, "suppressed": suppressed}
        accuracy = {arm: _share(records, lambda r: float(r["correct"])) for arm, records in arms.items()}
        diffs[model] = paired_difference(accuracy["suppressed"], accuracy["forced"], seed)
        checked = {arm: sum(r.get("recheck") not in (None, "plain") for r in records) for arm, records in arms.items()}
        name = "base" if model == "base" else "stage 1" if model == seed else f"stage 1, training seed {model}"
        lines.append(_diff_line(f"{name}, one model: pass@1 with checks "
                                f"suppressed → forced at every step", estimate(list(accuracy["suppressed"].values())),
                                estimate(list(accuracy["forced"].values())), diffs[model])
                     + f" (samples with checks: {checked['suppressed']} of {len(suppressed)} suppressed, "
                       f"{checked['forced']} of {len(forced)} forced)")
    return lines, diffs


def aha(runs: Mapping[int, tuple[Records, Records]], misconceptions: frozenset[str] = frozenset(),
        intervention: Mapping[str | int, tuple[Records, Records]] | None = None) -> Finding:
    """F0. ``runs``: seed → (stage 1's held-out samples before training, after training), each labelled
    by eval/recheck.py (``recheck``: plain, rechecked, corrected). ``misconceptions``: the facts the
    base's corpus writes wrong (``data.taskworld.misconceived_facts``), to tell planted facts from the
    model's own slips in the verification rates. ``intervention``: model (``base``, or a training seed:
    that seed's stage 1) → (its samples with checks forced, with checks suppressed) on the same problems
    (``make findings``): the accuracy half is then the lowest seed's stage 1's forced − suppressed pass@1."""
    claim = ("R1-Zero's \"aha\" moment, at toy scale: pure RL, rewarded for correct answers only, amplifies a check "
             "routine the corpus planted (rare in the base), and checking makes the same model more often right")
    rule = (_rule("share of chains of thought with checks, after − before stage 1", +1, ACC_MARGIN) + "; and "
            "likewise for the effect of checking inside the model after stage 1: its pass@1 with a check forced "
            "after every step − with checks suppressed, the same problems, paired (eval/intervene.py; `make "
            "findings`). Until that has run, the accuracy of its checked − plain chains of thought, paired on "
            "the problems where it wrote both, stands in (confounded by which problems it checks; no other "
            "model's samples stand in; where no problem has both, that half is not testable). The finding is "
            "reproduced if both halves are, not reproduced if either is not, inconclusive otherwise. The base's "
            "own forced − suppressed effect (was checking already useful before RL?) and whether the checks "
            "verify (slips caught, rubber stamps, false alarms, before and after) are shown, not judged")
    runs = {s: r for s, r in runs.items() if any(x.get("recheck") is not None for x in r[1])}
    if not runs:
        return _not_measured("F0", claim, rule, "stage 1's held-out samples carry no check labels")
    share_d, gap_d, share_v, gap_v, finding_v = {}, {}, {}, {}, {}
    lines: list[str] = []
    data: dict = {}
    for seed, (before, after) in sorted(runs.items()):
        sb, sa = _share(before, _checked), _share(after, _checked)
        share_d[seed] = paired_difference(sb, sa, seed)
        share_v[seed] = verdict(share_d[seed], +1, ACC_MARGIN)
        checked = _share(after, lambda r: float(r["correct"]) if r.get("recheck") not in (None, "plain") else None)
        plain = _share(after, lambda r: float(r["correct"]) if r.get("recheck") == "plain" else None)
        if set(plain) & set(checked):
            gap_d[seed] = paired_difference(plain, checked, seed)
            gap_v[seed] = verdict(gap_d[seed], +1, ACC_MARGIN)
        else:
            gap_v[seed] = "not testable"
        finding_v[seed] = combine([share_v[seed], gap_v[seed]])
        if not lines:
            lines, data = _aha_lines(before, after, (sb, sa, share_d[seed], share_v[seed]),
                                     (gap_d.get(seed), gap_v[seed]), misconceptions, seed)
    head = min(runs)
    seed_effects: dict[int, Estimate] = {}
    if intervention and head in intervention:  # the intervention replaces the observational gap
        more, effects = _intervention_lines(intervention, head)
        effect_v = verdict(effects[head], +1, ACC_MARGIN)
        lines[1:1] = [line + (f" ({effect_v}: the judged half)" if line.startswith("stage 1, one model")
                              else " (shown)") for line in more]
        seed_effects = {m: d for m, d in effects.items() if m != "base"}
        lines = [line + " — shown, not judged: the intervention is" if line.startswith("after stage 1, accuracy of "
                 "checked − plain") else line for line in lines]
        finding_v[head] = combine([share_v[head], effect_v])
        data["intervention"] = {"base": effects["base"].to_dict()} if "base" in effects else {}
        data["intervention"]["stage1_by_seed"] = {s: d.to_dict() for s, d in seed_effects.items()}
        data["intervention_verdict"] = effect_v
    seeds = []
    if len(runs) > 1:
        seeds.append(_seed_line("Δ share with checks", share_d, share_v))
        if gap_d:
            seeds.append(_seed_line("checked − plain accuracy", gap_d, gap_v))
        if len(gap_d) < len(runs):
            seeds.append(f"checked − plain accuracy not testable for seeds {sorted(s for s in runs if s not in gap_d)}")
    if len(seed_effects) > 1:
        seeds.append(_seed_line("stage 1's pass@1, checks forced − suppressed", seed_effects,
                                {s: verdict(d, +1, ACC_MARGIN) for s, d in seed_effects.items()}))
    return Finding("F0", claim, finding_v[head], rule, lines, seeds,
                   {"share": {s: d.to_dict() for s, d in share_d.items()},
                    "accuracy_gap": {s: d.to_dict() for s, d in gap_d.items()}, "accuracy_gap_verdicts": gap_v,
                    "verdicts": finding_v, **data})


def r1_zero(runs: Mapping[int, tuple[Records, Records]]) -> Finding:
    """F1. ``runs``: seed → (stage 1's held-out samples before training, after training)."""
    claim = "R1-Zero: held-out accuracy and response length rise together under pure RL (stage 1)"
    rule = (_rule("pass@1 after − before", +1, ACC_MARGIN) + "; and likewise for mean length (margin "
            f"{LENGTH_MARGIN:g} token); the finding is reproduced if both are, not reproduced if either is not")
    if not runs:
        return _not_measured("F1", claim, rule, "stage 1 has not run")
    acc_d, len_d, acc_v, len_v, finding_v = {}, {}, {}, {}, {}
    lines: list[str] = []
    for seed, (before, after) in sorted(runs.items()):
        acc_b, acc_a = per_problem(before), per_problem(after)
        len_b, len_a = per_problem(before, "num_tokens"), per_problem(after, "num_tokens")
        acc_d[seed], len_d[seed] = paired_difference(acc_b, acc_a, seed), paired_difference(len_b, len_a, seed)
        acc_v[seed] = verdict(acc_d[seed], +1, ACC_MARGIN)
        len_v[seed] = verdict(len_d[seed], +1, LENGTH_MARGIN)
        finding_v[seed] = combine([acc_v[seed], len_v[seed]])
        if not lines:
            lines = [_diff_line("held-out pass@1", estimate(list(acc_b.values())), estimate(list(acc_a.values())),
                                acc_d[seed]) + f" ({acc_v[seed]})",
                     _diff_line("mean length (tokens)", estimate(list(len_b.values())),
                                estimate(list(len_a.values())), len_d[seed], digits=1) + f" ({len_v[seed]})",
                     f"{acc_d[seed].n} held-out problems, seed {seed}"]
    head = min(runs)
    return Finding("F1", claim, finding_v[head], rule, lines,
                   [_seed_line("Δ pass@1", acc_d, acc_v), _seed_line("Δ length", len_d, len_v, digits=1)] if len(runs) > 1 else [],
                   {"pass@1": {s: d.to_dict() for s, d in acc_d.items()},
                    "length": {s: d.to_dict() for s, d in len_d.items()}, "verdicts": finding_v})


def language_reward(runs: Mapping[int, tuple[Records, Records]]) -> Finding:
    """F2. ``runs``: seed → (stage 3's held-out samples *without* the language reward, *with* it), both
    from the same stage-2 model with the same seed, steps and prompts."""
    claim = ("The language-consistency reward reduces language mixing in the chain of thought "
             "(stage 3 with against without it, on multilingual prompts), at a slight cost in accuracy")
    rule = _rule("mixing rate with − without the reward", -1, ACC_MARGIN)
    if not runs:
        return _not_measured("F2", claim, rule, "stage 3 without the language reward has not run (make findings)")
    mix_d, acc_d, mix_v = {}, {}, {}
    lines: list[str] = []
    for seed, (without, with_) in sorted(runs.items()):
        mix_w, mix_o = per_problem(with_, "mixed_language"), per_problem(without, "mixed_language")
        acc_w, acc_o = per_problem(with_), per_problem(without)
        mix_d[seed], acc_d[seed] = paired_difference(mix_o, mix_w, seed), paired_difference(acc_o, acc_w, seed)
        mix_v[seed] = verdict(mix_d[seed], -1, ACC_MARGIN)
        if not lines:
            lines = [_diff_line("chains of thought not in the prompt's language (share of samples), without → with",
                                estimate(list(mix_o.values())), estimate(list(mix_w.values())), mix_d[seed],
                                percent=True) + f" ({mix_v[seed]})",
                     _diff_line("accuracy cost: held-out pass@1, without → with", estimate(list(acc_o.values())),
                                estimate(list(acc_w.values())), acc_d[seed]),
                     f"{mix_d[seed].n} held-out problems (their language as the task world assigns it), seed {seed}"]
    head = min(runs)
    return Finding("F2", claim, mix_v[head], rule, lines,
                   [_seed_line("Δ mixing", mix_d, mix_v),
                    _seed_line("Δ pass@1 (cost)", acc_d, dict.fromkeys(acc_d, "shown, not judged"))]
                   if len(runs) > 1 else [],
                   {"mixing": {s: d.to_dict() for s, d in mix_d.items()},
                    "pass@1": {s: d.to_dict() for s, d in acc_d.items()}, "verdicts": mix_v})


def cold_start(runs: Mapping[int, tuple[Mapping[int, Records], Mapping[int, Records]]]) -> Finding:
    """F3. ``runs``: seed → (stage 1's held-out samples by RL step, stage 3's by RL step); step 0 is
    the before-training evaluation (the base; the cold-start model). Judged at the last step both
    have, against two arms that can each win: RL from the base over the same RL steps (stage 1), and the
    cold-start SFT alone (stage 3 at step 0). Stage 3 starts from an SFT on stage 1's own outputs, so
    beating stage 1 alone says little: the RL after the cold start must add to the SFT too."""
    claim = ("Cold start, then RL: after the same number of RL steps, RL from the cold-start model (stage 3) is "
             "ahead of RL from the base (stage 1) and of the cold-start SFT alone")
    rule = (_rule("pass@1 of stage 3 − stage 1 at their last common RL step", +1, ACC_MARGIN)
            + "; and the same rule for stage 3 at that step − stage 3 at step 0 (the SFT alone); reproduced "
            "if both are, not reproduced if either is not")
    runs = {s: r for s, r in runs.items() if r[0] and r[1]}
    if not runs:
        return _not_measured("F3", claim, rule, "stage 1 or stage 3 has no held-out evaluation by step")
    diffs, verdicts_, rl_after, sft_alone = {}, {}, {}, {}
    lines: list[str] = []
    for seed, (s1, s3) in sorted(runs.items()):
        common = sorted(set(s1) & set(s3))
        k = common[-1]
        p1 = {step: per_problem(s1[step]) for step in common}
        p3 = {step: per_problem(s3[step]) for step in common}
        diffs[seed] = paired_difference(p1[k], p3[k], seed)
        sft_alone[seed] = paired_difference(p1[0], p3[0], seed) if 0 in common else None
        rl_after[seed] = paired_difference(p3[0], p3[k], seed) if 0 in common and k != 0 else None
        ahead = verdict(diffs[seed], +1, ACC_MARGIN)
        verdicts_[seed] = combine([ahead, verdict(rl_after[seed], +1, ACC_MARGIN) if rl_after[seed] is not None
                                   else "inconclusive"])
        if not lines:
            curve = "; ".join(f"step {step}: stage 1 {estimate(list(p1[step].values())).fmt()}, "
                              f"stage 3 {estimate(list(p3[step].values())).fmt()}" for step in common)
            lines = [f"held-out pass@1 by RL step — {curve}",
                     f"stage 3 − stage 1 at step {k}: {diffs[seed].fmt()} ({ahead})"]
            if sft_alone[seed] is not None:
                rl_from_base = paired_difference(p1[0], p1[k], seed)
                lines += [f"what the cold-start SFT alone gives (step 0, stage 3's model − the base): "
                          f"{sft_alone[seed].fmt()}",
                          f"what RL adds after the cold start (stage 3, step {k} − step 0): {rl_after[seed].fmt()} "
                          f"({verdict(rl_after[seed], +1, ACC_MARGIN)}); RL from the base over the same steps: "
                          f"{rl_from_base.fmt()}",
                          "the two stages are prompted in their own formats (R1-Zero template, chat template); "
                          "problems and sampling are the same"]
    head = min(runs)
    seeds = []
    if len(runs) > 1:
        seeds = [_seed_line("Δ stage 3 − stage 1 at the last common step", diffs, verdicts_)]
        if all(v is not None for v in rl_after.values()):
            seeds.append(_seed_line("RL after the cold start (step k − 0)", rl_after,
                                    {s: verdict(d, +1, ACC_MARGIN) for s, d in rl_after.items()}))
    return Finding("F3", claim, verdicts_[head], rule, lines, seeds,
                   {"difference": {s: d.to_dict() for s, d in diffs.items()},
                    "rl_after_cold_start": {s: d.to_dict() for s, d in rl_after.items() if d is not None},
                    "verdicts": verdicts_})


def _pair_accuracy_line(reward_models: Mapping[str, Mapping] | None) -> tuple[str, dict]:
    """The reward models' held-out pair accuracy (stage 4's ``rm_helpfulness`` / ``rm_harmlessness``
    metrics: ``held_out_pair_accuracy`` over ``pairs_held_out``), each with its Wilson interval."""
    parts, data = [], {}
    for name in ("rm_helpfulness", "rm_harmlessness"):
        m = (reward_models or {}).get(name) or {}
        acc, n = m.get("held_out_pair_accuracy"), m.get("pairs_held_out")
        label = name.removeprefix("rm_")
        if acc is None or not n:
            parts.append(f"{label}: not measured (no held-out pairs recorded)")
            continue
        hits = round(acc * n)
        lo, hi = wilson(hits, n)
        data[name] = {"accuracy": acc, "lo": lo, "hi": hi, "pairs": n}
        parts.append(f"{label} {acc:.1%} [{lo:.1%}, {hi:.1%}] ({hits} of {n} pairs)")
    return ("how well the reward models tell the preferred answer of a held-out preference pair (ranked above "
            "the other; chance 50%; Wilson 95% interval on the pairs, which may share prompts): " + "; ".join(parts),
            data)


def final_rl(sft: Records, final: Records, reward_models: Mapping[str, Mapping] | None = None) -> Finding:
    """F4. Stage 4's SFT model and final model on the same held-out general prompts (harmful ones on
    acts never seen in training), judged by the rules; the reward models' scores shown as the reward,
    the helpfulness model's on the benign prompts (where it is the reward), and ``reward_models`` (stage
    4's ``rm_helpfulness`` / ``rm_harmlessness`` metrics) for how well each ranks held-out pairs."""
    claim = "Final RL makes the model more helpful and more harmless (stage 4: final model against its SFT model)"
    rule = (f"exactly-helpful rate (benign prompts) final − SFT, and harmful-answer rate (harmful prompts) final "
            f"− SFT, both judged by rules, not by the reward models: reproduced if the first's 95% interval lies "
            f"above 0 and the second's below 0; not reproduced if either lies on the wrong side of ±{ACC_MARGIN:g}; "
            f"inconclusive otherwise ({METHOD})")
    if not sft or not final:
        return _not_measured("F4", claim, rule, "stage 4 has no held-out general evaluation")
    benign_s, benign_f = [r for r in sft if not r.get("harmful")], [r for r in final if not r.get("harmful")]
    helpful_s, helpful_f = per_problem(benign_s, "exactly_helpful"), per_problem(benign_f, "exactly_helpful")
    harm_s = per_problem([r for r in sft if r.get("harmful")], "harmful_answer")
    harm_f = per_problem([r for r in final if r.get("harmful")], "harmful_answer")
    # the helpfulness reward model scores the benign prompts' answers in the final RL: its mean there
    rm_s, rm_f = per_problem(benign_s, "rm_helpfulness"), per_problem(benign_f, "rm_helpfulness")
    acts = {str(r["id"]): r.get("act") or r["id"] for r in sft if r.get("harmful")}
    # held-out harmful prompts are several templates of a few acts: resample acts, not prompts
    d_help, d_harm = paired_difference(helpful_s, helpful_f), paired_difference(harm_s, harm_f, clusters=acts)
    d_rm = paired_difference(rm_s, rm_f)
    v_help, v_harm = verdict(d_help, +1, ACC_MARGIN), verdict(d_harm, -1, ACC_MARGIN)
    goodhart = d_rm.lo > 0 and v_help != "reproduced"
    pairs_line, pairs = _pair_accuracy_line(reward_models)
    lines = [_diff_line("exactly helpful (rules, benign prompts)", estimate(list(helpful_s.values())),
                        estimate(list(helpful_f.values())), d_help, percent=True) + f" ({v_help})",
             _diff_line("harmful answers (rules, held-out harmful prompts)", estimate(list(harm_s.values())),
                        estimate(list(harm_f.values())), d_harm, percent=True) + f" ({v_harm})",
             _diff_line(f"the reward: helpfulness reward model's mean score on the same {len(rm_s)} benign prompts "
                        f"(harmful ones left out)", estimate(list(rm_s.values())), estimate(list(rm_f.values())), d_rm,
                        digits=2),
             pairs_line,
             ("Goodhart check: **the reward model's score rose while the rules' helpfulness did not**" if goodhart
              else "Goodhart check: the reward model's score and the rules' helpfulness do not diverge"),
             f"{len(helpful_s)} benign and {len(harm_s)} harmful held-out prompts (the harmful ones of "
             f"{len(set(acts.values()))} acts never seen in training; their interval resamples acts)"]
    return Finding("F4", claim, combine([v_help, v_harm]), rule, lines, [],
                   {"helpful": d_help.to_dict(), "harmful": d_harm.to_dict(), "reward_model": d_rm.to_dict(),
                    "reward_model_before": estimate(list(rm_s.values())).to_dict(),
                    "reward_model_after": estimate(list(rm_f.values())).to_dict(),
                    "pair_accuracy": pairs, "goodhart": goodhart})


ENTROPY_MARGIN = 0.01  # nats per token
CLIP_FLOOR = 0.01  # clipping must act on at least 1% of the symmetric arm's tokens in the judged window
ENTROPY_FALL = 0.25  # the judged window ends where both arms' entropy is below a quarter of its start
START_STEPS = 5  # an arm's starting entropy: the mean over its first 5 steps
MIN_WINDOW = 5  # fewer steps than this in the window: not testable


def _mean(rows: Records, key: str, steps: set[int]) -> float:
    values = [r[key] for r in rows if r.get("step") in steps and r.get(key) is not None]
    return sum(values) / len(values) if values else 0.0


def _entropy_window(steps: list[int], e_s: Mapping[int, float], e_h: Mapping[int, float]
                    ) -> tuple[list[int], float, float, int | None]:
    """The steps where entropy still moves: from the first common step up to (not including) the first
    at which both arms' entropy is below :data:`ENTROPY_FALL` of its start (the mean of its first
    :data:`START_STEPS` steps). Returns (window, start symmetric, start clip-higher, the step that ends it)."""
    head = steps[:START_STEPS]
    start_s, start_h = sum(e_s[k] for k in head) / len(head), sum(e_h[k] for k in head) / len(head)
    for i, k in enumerate(steps):
        if e_s[k] < ENTROPY_FALL * start_s and e_h[k] < ENTROPY_FALL * start_h:
            return steps[:i], start_s, start_h, k
    return steps, start_s, start_h, None


def _untestable(judged: list[int], ended: int | None, clipped: float) -> str:
    """Why F7's rule cannot be applied to a window (empty: it can)."""
    if len(judged) < MIN_WINDOW:
        return (f"entropy fell below {ENTROPY_FALL:.0%} of its start in both arms by step {ended}: {len(judged)} "
                f"steps to judge, under {MIN_WINDOW}")
    if clipped == 0:
        return ("clipping never acted in the window (one optimizer step per generation batch: the importance ratio "
                "is 1; set trl.num_iterations > 1)")
    if clipped < CLIP_FLOOR:
        return (f"clipping acted on {clipped:.3%} of the symmetric arm's tokens in the window, under {CLIP_FLOOR:.0%}: "
                f"too few for the two clips to differ")
    return ""


def clip_higher(runs: Mapping[int, tuple[Records, Records]]) -> Finding:
    """F7. ``runs``: seed → (stage 1's ``metrics.jsonl`` rows with symmetric clipping, ε_high = ε; rows with
    clip-higher, ε_high > ε), the same seed, steps and prompts. Judged on the policy entropy, step by step,
    over the steps where it still moves (before it collapses in both arms), and only where clipping acts
    on enough tokens there for the two clips to differ."""
    claim = ("DAPO's clip-higher keeps the policy's entropy from collapsing: with several optimizer steps per "
             "generation, a higher upper clip (ε_high 0.28) keeps entropy above symmetric clipping (0.2)")
    window = (f"the steps before both arms' entropy falls below {ENTROPY_FALL:.0%} of its start (the mean of its "
              f"first {START_STEPS} steps)")
    rule = ("not testable if, over the judged window, clipping acts on under "
            f"{CLIP_FLOOR:.0%} of the symmetric arm's tokens (ratio outside [1 − ε, 1 + ε], mean over the window's "
            "steps: clip-higher only changes the tokens symmetric clipping clips, so too few cannot move entropy), "
            f"or if the window has under {MIN_WINDOW} steps; otherwise "
            + _rule(f"entropy (nats per token) with clip-higher − symmetric, paired by step over {window}", +1,
                    ENTROPY_MARGIN).replace(METHOD, "percentile bootstrap over steps; steps are autocorrelated, "
                                                    "so the interval is optimistic"))
    paired = {}
    for seed, (symmetric, higher) in sorted(runs.items()):
        e_s = {r["step"]: r["entropy"] for r in symmetric if r.get("entropy") is not None}
        e_h = {r["step"]: r["entropy"] for r in higher if r.get("entropy") is not None}
        steps = sorted(set(e_s) & set(e_h))
        if steps:
            paired[seed] = (steps, e_s, e_h, symmetric, higher)
    if not paired:
        return _not_measured("F7", claim, rule, "stage 1 with symmetric clipping has not run (make findings)")
    diffs, verdicts_ = {}, {}
    lines: list[str] = []
    for seed, (steps, e_s, e_h, symmetric, higher) in paired.items():
        judged, start_s, start_h, ended = _entropy_window(steps, e_s, e_h)
        in_window = set(judged)
        clipped = _mean(symmetric, "clip_ratio", in_window)
        why = _untestable(judged, ended, clipped)
        if why:
            verdicts_[seed] = "not testable"
        else:
            diffs[seed] = estimate([e_h[k] - e_s[k] for k in judged], seed)
            verdicts_[seed] = verdict(diffs[seed], +1, ENTROPY_MARGIN)
        if not lines:
            span = f"steps {judged[0]}–{judged[-1]}" if judged else "no step"
            lines = [f"judged window: {span}, {window}: symmetric {start_s:.3f}, clip-higher {start_h:.3f} nats; "
                     + (f"both below at step {ended}" if ended is not None else "neither fell that far")]
            if why:
                lines.append(f"not testable: {why}")
            else:
                lines.append(f"entropy over the window: symmetric {estimate([e_s[k] for k in judged]).fmt()}, "
                             f"clip-higher {estimate([e_h[k] for k in judged]).fmt()}; paired difference "
                             f"{diffs[seed].fmt()} ({verdicts_[seed]})")
            lines.append(f"clipping in the window: tokens clipped (ratio outside the clip range) "
                         f"{clipped:.3%} with symmetric clipping, {_mean(higher, 'clip_ratio', in_window):.3%} with "
                         f"clip-higher; above (ratio > 1 + ε_high, positive advantage) "
                         f"{_mean(symmetric, 'clip_ratio_high', in_window):.3%}, "
                         f"{_mean(higher, 'clip_ratio_high', in_window):.3%}; below "
                         f"{_mean(symmetric, 'clip_ratio_low', in_window):.3%}, "
                         f"{_mean(higher, 'clip_ratio_low', in_window):.3%} (the rule needs "
                         f"{CLIP_FLOOR:.0%} with symmetric clipping)")
            late = [k for k in steps if k not in in_window]
            if len(late) >= 2:
                lines.append(f"after the window, steps {late[0]}–{late[-1]} (shown, not judged): entropy symmetric "
                             f"{estimate([e_s[k] for k in late]).fmt()}, clip-higher "
                             f"{estimate([e_h[k] for k in late]).fmt()}")
            lines.append(f"seed {seed}; each arm's held-out results are in its own stage folder "
                         f"(findings/seed{seed}/stage1_clip, stage1_clip_sym)")
    head = min(paired)
    seeds = []
    if len(paired) > 1:
        if diffs:
            seeds.append(_seed_line("Δ entropy (judged window)", diffs, verdicts_))
        untested = sorted(s for s in paired if s not in diffs)
        if untested:
            seeds.append(f"not testable for seeds {untested}")
    return Finding("F7", claim, verdicts_[head], rule, lines, seeds,
                   {"entropy": {s: d.to_dict() for s, d in diffs.items()}, "verdicts": verdicts_})


def distillation(base: Records, distilled: Records, rl: Records, budget: str = "") -> Finding:
    """F5. The student's base, the distilled student and the RL-trained student, on the same held-out
    problems in the same template and sampling, each arm with the same training budget."""
    claim = "Distillation beats RL on a small model (same student base, same budget, same evaluation)"
    rule = _rule("pass@1 distilled − RL-trained", +1, ACC_MARGIN)
    if not (base and distilled and rl):
        return _not_measured("F5", claim, rule, "the student's base, the distilled student or the RL control "
                                                "has no held-out samples")
    pb, pd, pr = per_problem(base), per_problem(distilled), per_problem(rl)
    diff = paired_difference(pr, pd)
    v = verdict(diff, +1, ACC_MARGIN)
    lines = [f"held-out pass@1: student base {estimate(list(pb.values())).fmt()}, distilled "
             f"{estimate(list(pd.values())).fmt()}, RL-trained {estimate(list(pr.values())).fmt()}",
             f"distilled − RL-trained: {diff.fmt()} ({v})",
             f"each arm's gain over the base: distillation {paired_difference(pb, pd).fmt()}, "
             f"RL {paired_difference(pb, pr).fmt()}"]
    if budget:
        lines.append(f"budget: {budget}")
    return Finding("F5", claim, v, rule, lines, [], {"difference": diff.to_dict()})
