"""Outputs the Hugging Face hub understands, written from the manifests.

- :func:`write_model_card`: every stage's checkpoint gets a ``README.md`` (written before the manifest
  hashes the checkpoint, so the card is part of what the manifest verifies): the stage and its parent,
  the recipe and its hash, the data used and what was dropped, the held-out results with 95% intervals,
  and the commands that reproduce it.
- :func:`export_datasets`: the curated sets a stage produced (the cold start; stage 4's rejection
  samples, SFT mix and preference pairs) as folders ``<stage>/datasets/<set>/`` that
  ``datasets.load_dataset(folder)`` reads: the rows (a hard link to the stage's own file, no copy) and a
  dataset card whose YAML header names the files.
- :func:`push`: uploads a stage's checkpoint (with its card) and its datasets with ``huggingface_hub``.
  Off unless asked: ``r1 push`` or the recipe's ``hub.push_to_hub``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from data.jsonl import atomic_write_text, read_jsonl_tolerant
from eval.stats import METHOD, estimate, per_problem
from stages.pipeline.manifest import Manifest

log = logging.getLogger("r1")

DATASETS_DIR = "datasets"

# stage → (set name, the stage's file, what it is)
CURATED_SETS: dict[str, list[tuple[str, str, str]]] = {
    "stage2": [("cold_start", "cold_start.jsonl",
                "the cold-start set: stage 1's correct, readable, one-language answers (plus any user set), "
                "rewritten as a think block and a summary; stage 2 fine-tunes the base on it")],
    "stage4": [("rejection_samples", "reasoning_sft.jsonl",
                "stage 3's answers kept by rejection sampling (correct; no mixed language, long paragraphs or "
                "code blocks)"),
               ("sft_mix", "sft_mix.jsonl", "the SFT mix: the rejection samples and the non-reasoning rows"),
               ("preference_helpfulness", "rm_helpfulness_pairs.jsonl",
                "the helpfulness reward model's preference pairs (chosen, rejected; `split`: train or held_out)"),
               ("preference_harmlessness", "rm_harmlessness_pairs.jsonl",
                "the harmlessness reward model's preference pairs (chosen, rejected; `split`: train or held_out)")],
}

DESCRIPTIONS = {
    "base": "the base model (the tiny recipe's is released with the repository, pretrained on its synthetic corpus)",
    "stage1": "R1-Zero: GRPO from the base with rule rewards only (format and correctness), R1-Zero template",
    "stage2": "cold start: SFT of the base on readable long chains of thought built from R1-Zero's answers",
    "stage3": "reasoning RL: GRPO from stage 2 with correctness, format and language-consistency rewards",
    "stage4": "rejection-sampling SFT of the base, then RL for all scenarios (rule rewards on reasoning, "
              "helpfulness and harmlessness reward models on general prompts)",
    "distill": "distillation: SFT of a small student on stage 4's curated set",
    "distill_rl": "the control of distillation: stage-1 RL on the student's base",
}


def _front_matter(fields: dict) -> str:
    """A YAML header (the hub reads it); values are JSON, which YAML reads as they are."""
    return "---\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items()) + "---\n"


def _evaluation(manifest: Manifest, checkpoint: Path) -> tuple[dict, Path]:
    """(the held-out evaluation of the checkpoint, the folder of its graded samples): the base's probe,
    a distilled student's evaluation, or the stage's "after" evaluation."""
    stage_dir, metrics = manifest.path.parent, manifest.data["metrics"]
    if manifest.stage == "base":
        return metrics.get("probe") or {}, stage_dir / "probe"
    if manifest.stage == "distill":  # the checkpoint is <stage>/<student>/sft
        student = Path(checkpoint).parent.name
        return (metrics.get("students") or {}).get(student, {}).get("eval") or {}, stage_dir / student / "eval"
    return metrics.get("eval_after") or {}, stage_dir / "eval_after"


def _results(manifest: Manifest, checkpoint: Path) -> list[str]:
    ev, folder = _evaluation(manifest, checkpoint)
    if not ev:
        return ["No held-out evaluation was recorded for this stage."]
    records = read_jsonl_tolerant(folder / "samples.jsonl")
    k = ev.get("k")
    r1_zero = manifest.stage in ("base", "stage1")
    lines = [f"Held-out evaluation ({ev.get('problems')} problems × {k} samples, temperature "
             f"{ev.get('temperature')}, top-p {ev.get('top_p')}; "
             f"{'the R1-Zero template' if r1_zero else 'the chat template'}):", "",
             "| metric | value |", "|---|---|"]
    if records:
        lines.append(f"| pass@1 (95% interval) | {estimate(list(per_problem(records).values())).fmt()} |")
    else:
        lines.append(f"| pass@1 | {ev.get('pass@1', 0):.3f} |")
    for key in (f"cons@{k}", f"pass@{k}", "format_rate", "readable_rate", "language_mix_rate", "mean_length_tokens"):
        if ev.get(key) is not None:
            lines.append(f"| {key} | {ev[key]:.3f} |")
    return [*lines, "", f"Interval: {METHOD}."]


def _data(manifest: Manifest) -> list[str]:
    rows = manifest.data["inputs"].get("data") or []
    if not rows:
        return ["No training data recorded."]
    out = ["| data | source | rows used | rows dropped |", "|---|---|---|---|"]
    for d in rows:
        dropped = ", ".join(f"{k}: {v}" for k, v in (d.get("rows_skipped") or {}).items() if v) or "none"
        out.append(f"| {d['name']} | `{d['source']}` | {d['rows_used']} | {dropped} |")
    return out


def model_card(manifest: Manifest, checkpoint: Path) -> str:
    """The README.md of a stage's checkpoint, from its manifest."""
    d = manifest.data
    stage, recipe = d["stage"], d["recipe_name"]
    parent = d.get("parent")
    base = (d.get("recipe") or {}).get("base", {}).get("pretrained")
    header = {"library_name": "transformers", "pipeline_tag": "text-generation",
              "tags": ["r1-pipeline", "deepseek-r1", "reasoning", stage]}
    if base and not Path(base).exists():
        header["base_model"] = base
    make = "distill-rl" if stage == "distill_rl" else stage
    commit = d.get("git_commit")
    lines = [
        _front_matter(header),
        f"# {recipe} / {stage}", "",
        f"{DESCRIPTIONS.get(stage, stage)[:1].upper()}{DESCRIPTIONS.get(stage, stage)[1:]}. Made by r1-pipeline; "
        "this card is written from the stage's manifest.", "",
        "| | |", "|---|---|",
        f"| stage | `{stage}` |",
        f"| parent | {'`' + parent['stage'] + '` (manifest sha256 `' + parent['manifest_sha256'][:16] + '…`)' if parent else 'none'} |",
        f"| recipe | `{recipe}`, hash `{d['recipe_hash'][:16]}…` (the resolved recipe is in `manifest.json`) |",
        f"| code | git commit `{commit or 'unknown'}` |",
        f"| libraries | {', '.join(f'{k} {v}' for k, v in (d.get('libraries') or {}).items() if v)} |",
        "", "## Data", "", *_data(manifest),
        "", "## Results", "", *_results(manifest, checkpoint),
        "", "## Reproduce", "", "```bash",
        *([f"git checkout {commit}"] if commit else []),
        f"make {make} RECIPE={recipe}        # after its parent stages; `make pipeline` runs every stage in order",
        "```", "",
        "The stage's manifest (`manifest.json` in the stage folder; `r1_manifest.json` beside this card when "
        "pushed) records the resolved recipe, the parent, the inputs, every metric and the hashes of these files.", "",
    ]
    return "\n".join(lines)


def write_model_card(checkpoint: Path, manifest: Manifest) -> Path:
    path = Path(checkpoint) / "README.md"
    atomic_write_text(path, model_card(manifest, checkpoint))
    return path


def dataset_card(stage: str, recipe: str, name: str, description: str, splits: dict[str, str], rows: int) -> str:
    header = {"configs": [{"config_name": "default",
                           "data_files": [{"split": split, "path": file} for split, file in splits.items()]}],
              "tags": ["r1-pipeline", "deepseek-r1", stage]}
    return "\n".join([_front_matter(header), f"# {recipe} / {stage} / {name}", "", f"{description.capitalize()}.", "",
                      f"{rows} rows, JSON Lines. Load it with `datasets.load_dataset(\"<this folder>\")`; the stage's "
                      "`manifest.json` records how it was made.", ""])


def _link(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)  # the same bytes, no copy
    except OSError:
        shutil.copyfile(source, target)


def export_datasets(stage_dir: Path, manifest: Manifest) -> list[Path]:
    """``<stage>/datasets/<set>/`` for each curated set the stage wrote (those of :data:`CURATED_SETS`):
    the rows and a dataset card."""
    out = []
    for name, file, description in CURATED_SETS.get(manifest.stage, []):
        source = Path(stage_dir) / file
        if not source.is_file():
            continue
        folder = Path(stage_dir) / DATASETS_DIR / name
        folder.mkdir(parents=True, exist_ok=True)
        rows = read_jsonl_tolerant(source)
        _link(source, folder / "data.jsonl")
        splits = {"train": "data.jsonl"}
        atomic_write_text(folder / "README.md", dataset_card(manifest.stage, manifest.data["recipe_name"], name,
                                                             description, splits, len(rows)))
        out.append(folder)
    return out


def hub_api():
    """``huggingface_hub.HfApi()`` (the tests put a recorder in its place: no test calls the hub)."""
    from huggingface_hub import HfApi

    return HfApi()


def push(stage_dir: Path, repo_id: str, *, private: bool = True, datasets: bool = True, api=None) -> list[str]:
    """Upload a complete stage's checkpoint (with its model card) and its manifest (``r1_manifest.json``) to
    the model repo ``repo_id``, and each of its curated sets to the dataset repo ``<repo_id>-<set>``;
    returns the repos written. Refuses a stage that is not complete or whose checkpoint no longer matches
    its manifest."""
    m = Manifest.load(Path(stage_dir))
    if m.status != "complete" or not m.checkpoint:
        raise ValueError(f"{m.path}: stage {m.stage!r} is {m.status!r} with checkpoint {m.checkpoint!r}: "
                         "only a complete stage with a local checkpoint can be pushed")
    bad = m.verify_checkpoint()
    if bad:
        raise ValueError(f"{m.path}: the checkpoint no longer matches its manifest ({', '.join(bad[:3])}); not pushed")
    api = api or hub_api()
    api.create_repo(repo_id, private=private, exist_ok=True)
    message = f"r1-pipeline {m.data['recipe_name']}/{m.stage} (recipe {m.data['recipe_hash'][:12]})"
    api.upload_folder(folder_path=str(m.checkpoint), repo_id=repo_id, commit_message=message)
    api.upload_file(path_or_fileobj=str(m.path), path_in_repo="r1_manifest.json", repo_id=repo_id,
                    commit_message=message)  # the provenance the card cites
    pushed = [repo_id]
    for folder in sorted((Path(stage_dir) / DATASETS_DIR).glob("*")) if datasets else []:
        dataset_repo = f"{repo_id}-{folder.name.replace('_', '-')}"
        api.create_repo(dataset_repo, repo_type="dataset", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=dataset_repo, repo_type="dataset",
                          commit_message=f"r1-pipeline {m.data['recipe_name']}/{m.stage}/{folder.name}")
        pushed.append(dataset_repo)
    log.info("pushed %s to the hub: %s", m.stage, ", ".join(pushed))
    return pushed
