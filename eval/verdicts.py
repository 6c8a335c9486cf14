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
| F0 the "aha" moment: RL makes the model check its steps | stage 1 after − before: share of chains of thought with checks; after: checked − plain accuracy | both up |
| F1 R1-Zero: accuracy and length rise together | stage 1 after − before: pass@1, and mean length | both up |
| F2 the language reward ends language mixing | stage 3 with − without the language reward: mixing rate (accuracy cost shown) | down |
| F3 the cold start speeds up RL | stage 3 − stage 1, both after the same number of RL steps (SFT alone and RL after it shown) | up |
| F4 final RL: more helpful and more harmless | stage 4 final − SFT model: exactly-helpful rate (rules), harmful-answer rate (rules) | up, down |
| F5 distillation beats RL on a small student | distilled − RL-trained student, same base, budget and template (each arm's gain shown) | up |
| F7 clip-higher keeps entropy from collapsing | stage 1 with ε_high 0.28 − with 0.2: policy entropy, step by step, second half of training | up |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from eval.stats import (
    METHOD,
    Estimate,
    across_seeds,
    combine,
    estimate,
    paired_difference,
    per_problem,
    verdict,
)

__all__ = ["Finding", "aha", "clip_higher", "cold_start", "distillation", "final_rl", "language_reward", "r1_zero"]

Records = Sequence[Mapping]
ACC_MARGIN = 0.02  # pass@1 and rates: two points
LENGTH_MARGIN = 1.0  # mean length: one token


@dataclass
class Finding:
    key: str  # F1 … F5
    claim: str
    verdict: str  # reproduced / not reproduced / inconclusive / not measured
    rule: str
    lines: list[str] = field(default_factory=list)  # the numbers, with intervals
    seeds: list[str] = field(default_factory=list)  # one line per statistic across seeds
    data: dict = field(default_factory=dict)  # the estimates, for tests and JSON

    def markdown(self) -> list[str]:
        out = [f"**{self.key}. {self.claim}** — **{self.verdict}**", f"  - rule: {self.rule}"]
        out += [f"  - {line}" for line in self.lines]
        out += [f"  - seeds: {line}" for line in self.seeds]
        if not self.seeds and self.verdict != "not measured":
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


def aha(runs: Mapping[int, tuple[Records, Records]]) -> Finding:
    """F0. ``runs``: seed → (stage 1's held-out samples before training, after training), each labelled
    by eval/recheck.py (``recheck``: plain, rechecked, corrected)."""
    claim = ("R1-Zero's \"aha\" moment: pure RL, rewarded for correct answers only, makes the model check its own "
             "steps (rare in the base) and catch its slips, and checked answers are more often right")
    rule = (_rule("share of chains of thought with checks, after − before stage 1", +1, ACC_MARGIN) + "; and "
            "likewise for the accuracy of checked − plain chains of thought after stage 1, paired on the problems "
            "that have both; the finding is reproduced if both are, not reproduced if either is not")
    runs = {s: r for s, r in runs.items() if any(x.get("recheck") is not None for x in r[1])}
    if not runs:
        return _not_measured("F0", claim, rule, "stage 1's held-out samples carry no check labels")
    if not any(x.get("recheck") not in (None, "plain") for s in runs.values() for x in s[0] + s[1]):
        return _not_measured("F0", claim, rule, "no chain of thought checks its steps, before or after stage 1: "
                             "the base never learnt to (the tiny recipe's corpus teaches checks only with "
                             "base.corpus.recheck > 0; docs/experiments.md has the runs that did)")
    share_d, gap_d, share_v, gap_v, finding_v = {}, {}, {}, {}, {}
    lines: list[str] = []
    for seed, (before, after) in sorted(runs.items()):
        sb, sa = _share(before, _checked), _share(after, _checked)
        share_d[seed] = paired_difference(sb, sa, seed)
        checked = _share(after, lambda r: float(r["correct"]) if r.get("recheck") not in (None, "plain") else None)
        plain = _share(after, lambda r: float(r["correct"]) if r.get("recheck") == "plain" else None)
        gap_against = "plain chains of thought of the same model"
        if not set(plain) & set(checked):  # every chain of thought checks now: against the base's plain ones
            plain = _share(before, lambda r: float(r["correct"]) if r.get("recheck") == "plain" else None)
            gap_against = "the base's plain chains of thought (none is plain after stage 1)"
        gap_d[seed] = paired_difference(plain, checked, seed)
        share_v[seed] = verdict(share_d[seed], +1, ACC_MARGIN)
        gap_v[seed] = verdict(gap_d[seed], +1, ACC_MARGIN)
        finding_v[seed] = combine([share_v[seed], gap_v[seed]])
        if not lines:
            corrected = [r for r in after if r.get("recheck") == "corrected" and r.get("correct")]
            lines = [_diff_line("chains of thought with checks (share of samples that reason)",
                                estimate(list(sb.values())), estimate(list(sa.values())), share_d[seed],
                                percent=True) + f" ({share_v[seed]})",
                     f"after stage 1, accuracy of checked chains of thought − {gap_against}, on the same "
                     f"problems: {gap_d[seed].fmt()} over {gap_d[seed].n} problems with both ({gap_v[seed]})",
                     f"after stage 1, {sum(r.get('recheck') == 'corrected' for r in after)} of {len(after)} samples "
                     f"caught a slip of their own and did the step again ({len(corrected)} of them ended right)"]
            if corrected:
                lines.append(f"a sampled chain of thought that catches its own slip (problem `{corrected[0]['problem']}`,"
                             f" gold {corrected[0]['answer']}): `{corrected[0]['completion'].strip()[:600]}`")
    head = min(runs)
    return Finding("F0", claim, finding_v[head], rule, lines,
                   [_seed_line("Δ share with checks", share_d, share_v),
                    _seed_line("checked − plain accuracy", gap_d, gap_v)] if len(runs) > 1 else [],
                   {"share": {s: d.to_dict() for s, d in share_d.items()},
                    "accuracy_gap": {s: d.to_dict() for s, d in gap_d.items()}, "verdicts": finding_v})


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
    have."""
    claim = ("The cold start speeds up RL: after the same number of RL steps, RL from the cold-start "
             "model (stage 3) is ahead of RL from the base (stage 1)")
    rule = _rule("pass@1 of stage 3 − stage 1 at their last common RL step", +1, ACC_MARGIN)
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
        verdicts_[seed] = verdict(diffs[seed], +1, ACC_MARGIN)
        sft_alone[seed] = paired_difference(p1[0], p3[0], seed) if 0 in common else None
        rl_after[seed] = paired_difference(p3[0], p3[k], seed) if 0 in common else None
        if not lines:
            curve = "; ".join(f"step {step}: stage 1 {estimate(list(p1[step].values())).fmt()}, "
                              f"stage 3 {estimate(list(p3[step].values())).fmt()}" for step in common)
            lines = [f"held-out pass@1 by RL step — {curve}",
                     f"stage 3 − stage 1 at step {k}: {diffs[seed].fmt()} ({verdicts_[seed]})"]
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


def final_rl(sft: Records, final: Records) -> Finding:
    """F4. Stage 4's SFT model and final model on the same held-out general prompts (harmful ones on
    acts never seen in training), judged by the rules; the reward models' scores shown as the reward."""
    claim = "Final RL makes the model more helpful and more harmless (stage 4: final model against its SFT model)"
    rule = (f"exactly-helpful rate (benign prompts) final − SFT, and harmful-answer rate (harmful prompts) final "
            f"− SFT, both judged by rules, not by the reward models: reproduced if the first's 95% interval lies "
            f"above 0 and the second's below 0; not reproduced if either lies on the wrong side of ±{ACC_MARGIN:g}; "
            f"inconclusive otherwise ({METHOD})")
    if not sft or not final:
        return _not_measured("F4", claim, rule, "stage 4 has no held-out general evaluation")
    helpful_s = per_problem([r for r in sft if not r.get("harmful")], "exactly_helpful")
    helpful_f = per_problem([r for r in final if not r.get("harmful")], "exactly_helpful")
    harm_s = per_problem([r for r in sft if r.get("harmful")], "harmful_answer")
    harm_f = per_problem([r for r in final if r.get("harmful")], "harmful_answer")
    rm_s, rm_f = per_problem(sft, "rm_helpfulness"), per_problem(final, "rm_helpfulness")
    acts = {str(r["id"]): r.get("act") or r["id"] for r in sft if r.get("harmful")}
    # held-out harmful prompts are several templates of a few acts: resample acts, not prompts
    d_help, d_harm = paired_difference(helpful_s, helpful_f), paired_difference(harm_s, harm_f, clusters=acts)
    d_rm = paired_difference({k: v for k, v in rm_s.items() if k in helpful_s},
                             {k: v for k, v in rm_f.items() if k in helpful_f})
    v_help, v_harm = verdict(d_help, +1, ACC_MARGIN), verdict(d_harm, -1, ACC_MARGIN)
    goodhart = d_rm.lo > 0 and v_help != "reproduced"
    lines = [_diff_line("exactly helpful (rules, benign prompts)", estimate(list(helpful_s.values())),
                        estimate(list(helpful_f.values())), d_help, percent=True) + f" ({v_help})",
             _diff_line("harmful answers (rules, held-out harmful prompts)", estimate(list(harm_s.values())),
                        estimate(list(harm_f.values())), d_harm, percent=True) + f" ({v_harm})",
             _diff_line("the reward: helpfulness reward model's mean score on the same benign prompts",
                        estimate(list(rm_s.values())), estimate(list(rm_f.values())), d_rm, digits=2),
             ("Goodhart check: **the reward model's score rose while the rules' helpfulness did not**" if goodhart
              else "Goodhart check: the reward model's score and the rules' helpfulness do not diverge"),
             f"{len(helpful_s)} benign and {len(harm_s)} harmful held-out prompts (the harmful ones of "
             f"{len(set(acts.values()))} acts never seen in training; their interval resamples acts)"]
    return Finding("F4", claim, combine([v_help, v_harm]), rule, lines, [],
                   {"helpful": d_help.to_dict(), "harmful": d_harm.to_dict(), "reward_model": d_rm.to_dict(),
                    "goodhart": goodhart})


ENTROPY_MARGIN = 0.01  # nats per token


def clip_higher(runs: Mapping[int, tuple[Records, Records]]) -> Finding:
    """F7. ``runs``: seed → (stage 1's ``metrics.jsonl`` rows with symmetric clipping, ε_high = ε; rows with
    clip-higher, ε_high > ε), the same seed, steps and prompts. Judged on the policy entropy of the second
    half of training, step by step."""
    claim = ("DAPO's clip-higher keeps the policy's entropy from collapsing: with several optimizer steps per "
             "generation, a higher upper clip (ε_high 0.28) keeps entropy above symmetric clipping (0.2)")
    rule = (_rule("entropy (nats per token) with clip-higher − symmetric, paired by step over the second half of "
                  "training", +1, ENTROPY_MARGIN).replace(METHOD, "percentile bootstrap over steps; steps are "
                                                          "autocorrelated, so the interval is optimistic")
            + "; not measured if clipping never acted")
    paired = {}
    for seed, (symmetric, higher) in sorted(runs.items()):
        e_s = {r["step"]: r["entropy"] for r in symmetric if r.get("entropy") is not None}
        e_h = {r["step"]: r["entropy"] for r in higher if r.get("entropy") is not None}
        steps = sorted(set(e_s) & set(e_h))
        if steps:
            paired[seed] = (steps, e_s, e_h, symmetric, higher)
    if not paired:
        return _not_measured("F7", claim, rule, "stage 1 with symmetric clipping has not run (make findings)")
    clipped = [r.get("clip_ratio") or 0 for _, (_, _, _, a, b) in paired.items() for r in a + b]
    if not any(clipped):
        return _not_measured("F7", claim, rule, "clipping never acted (one optimizer step per generation "
                                                "batch: the importance ratio is 1; set trl.num_iterations > 1)")
    diffs, verdicts_ = {}, {}
    lines: list[str] = []
    for seed, (steps, e_s, e_h, symmetric, higher) in paired.items():
        late = steps[len(steps) // 2:]
        diffs[seed] = estimate([e_h[k] - e_s[k] for k in late], seed)
        verdicts_[seed] = verdict(diffs[seed], +1, ENTROPY_MARGIN)
        if not lines:
            def mean(rows, key):
                values = [r[key] for r in rows if r.get(key) is not None]
                return sum(values) / len(values) if values else float("nan")

            lines = [f"entropy over steps {late[0]}–{late[-1]}: symmetric {estimate([e_s[k] for k in late]).fmt()}, "
                     f"clip-higher {estimate([e_h[k] for k in late]).fmt()}; paired difference "
                     f"{diffs[seed].fmt()} ({verdicts_[seed]})",
                     f"clipping acted: tokens clipped above (ratio > 1 + ε_high, positive advantage) "
                     f"{mean(symmetric, 'clip_ratio_high'):.2%} of tokens with symmetric clipping, "
                     f"{mean(higher, 'clip_ratio_high'):.2%} with clip-higher; below "
                     f"{mean(symmetric, 'clip_ratio_low'):.2%}, {mean(higher, 'clip_ratio_low'):.2%}",
                     f"seed {seed}; each arm's held-out results are in its own stage folder "
                     f"(findings/seed{seed}/stage1_clip, stage1_clip_sym)"]
    head = min(paired)
    return Finding("F7", claim, verdicts_[head], rule, lines,
                   [_seed_line("Δ entropy (late steps)", diffs, verdicts_)] if len(paired) > 1 else [],
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
