"""Stage manifests: one ``manifest.json`` per stage run, the links of the pipeline's chain.

A manifest says what a stage ran on (recipe, parent, input model and data), what it produced (checkpoint with
file hashes, metrics), how (library versions, commit, device) and when (start/end, every resume). Its
``status`` is ``running``, then ``complete`` (written last, after the checkpoint is written and hashed) or
``failed``. Every write is atomic, so a killed stage never looks complete. A child stage calls
:func:`require_parent`, which refuses a parent that is missing, unreadable, of the wrong stage, not
complete, or whose checkpoint no longer matches its recorded hashes. Paths inside the run folder are
recorded relative to the manifest's folder (:meth:`Manifest.resolve` opens them), so a copied run folder
still chains. Details: docs/architecture.md, stages/pipeline/manifest.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from data.jsonl import atomic_write_json
from stages.pipeline.common import is_main

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
STATUSES = ("running", "complete", "failed")
LIBRARIES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "math-verify", "vllm", "deepspeed")


class ManifestError(RuntimeError):
    """A manifest is missing, unreadable, or not fit to build on; the message says what to run."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


EVAL_OUTPUTS = "eval"  # `r1 eval --model <checkpoint>` writes its results in <checkpoint>/eval by default


def hash_checkpoint(directory: Path) -> dict[str, str]:
    """sha256 of every file in a checkpoint folder (relative path → hash), hidden files excluded."""
    directory = Path(directory)
    return {name: sha256_file(directory / name) for name in hash_checkpoint_names(directory)}


def hash_checkpoint_names(directory: Path) -> list[str]:
    """The files :func:`hash_checkpoint` hashes: every file, hidden ones excluded, relative paths."""
    directory = Path(directory)
    return [str(p.relative_to(directory)) for p in sorted(directory.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)]


def library_versions() -> dict[str, str | None]:
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    out["python"] = platform.python_version()
    return out


def git_commit() -> str | None:
    try:
        repo = Path(__file__).resolve().parents[2]
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor elsewhere): floating-point sums,
    and so a run's draws, can differ between CPUs (their kernels differ), so runs record it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info() -> dict[str, Any]:
    import torch

    info = {"host": socket.gethostname(), "platform": platform.platform(), "cpu": cpu_model(),
            "cpu_count": os.cpu_count(), "bf16_kernels": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
            "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


@dataclass
class Manifest:
    """A stage run's manifest, backed by ``<stage_dir>/manifest.json``."""

    path: Path
    data: dict[str, Any]

    # -- creation / loading -------------------------------------------------------------------

    @classmethod
    def start(cls, stage_dir: Path, stage: str, recipe, parent: Manifest | None = None,
              resumed: bool = False) -> Manifest:
        """Begin (or resume) a stage run: status ``running``, with recipe, parent and environment."""
        path = Path(stage_dir) / MANIFEST_NAME
        previous = cls.load(path) if resumed and path.exists() else None
        data = {
            "schema_version": SCHEMA_VERSION,
            "stage": stage,
            "status": "running",
            # the run folder, from this one: paths inside it are recorded relative to this folder
            "run_folder": os.path.relpath(recipe.stage_dir("base").parent.resolve(), Path(stage_dir).resolve()),
            "recipe_name": recipe.name,
            "recipe": recipe.to_dict(),
            "recipe_hash": recipe.hash(),
            "parent": None,
            "inputs": {"model": None, "data": []},
            "output": {"checkpoint": None, "files": {}},
            "metrics": {},
            "libraries": library_versions(),
            "git_commit": git_commit(),
            "device": device_info(),
            "started_at": now(),
            "ended_at": None,
            "error": None,
            "resumes": [],
        }
        if previous is not None:  # keep the original start and the history; record this resume
            data["started_at"] = previous.data.get("started_at", data["started_at"])
            data["resumes"] = previous.data.get("resumes", []) + [{"at": now(), "from_status": previous.status}]
            data["metrics"] = previous.data.get("metrics", {})
            data["inputs"] = previous.data.get("inputs", data["inputs"])
        m = cls(path, data)
        if parent is not None:
            data["parent"] = {"path": m.record(parent.path), "stage": parent.stage,
                              "manifest_sha256": sha256_file(parent.path),
                              "checkpoint": m.record(parent.checkpoint) if parent.checkpoint else None}
        m.save()
        return m

    @classmethod
    def load(cls, path: Path) -> Manifest:
        path = Path(path)
        if path.is_dir():
            path = path / MANIFEST_NAME
        if not path.is_file():
            raise ManifestError(f"{path}: no manifest")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ManifestError(f"{path}: manifest is not valid JSON ({e}); re-run that stage") from None
        if not isinstance(data, dict):
            raise ManifestError(f"{path}: manifest is not a JSON object; re-run that stage")
        for key in ("schema_version", "stage", "status"):
            if key not in data:
                raise ManifestError(f"{path}: manifest has no {key!r} field; re-run that stage")
        if type(data["schema_version"]) is not int or data["schema_version"] != SCHEMA_VERSION:
            raise ManifestError(f"{path}: schema_version {data['schema_version']!r} is not {SCHEMA_VERSION}")
        if data["status"] not in STATUSES:
            raise ManifestError(f"{path}: unknown status {data['status']!r}")
        problem = schema_problem(data)
        if problem:
            raise ManifestError(f"{path}: {problem}; re-run that stage (--restart)")
        m = cls(path, data)
        if m.checkpoint is not None and not m.inside_run_folder(m.checkpoint) and m.stage != "base":
            raise ManifestError(f"{path}: field 'output.checkpoint' ({data['output']['checkpoint']}) lies outside the "
                                "run folder: not followed; re-run that stage (--restart)")
        return m

    # -- accessors ----------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        return self.data["stage"]

    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def checkpoint(self) -> str | None:
        """The stage's checkpoint folder, as a path to open (None: none recorded)."""
        ckpt = self.data["output"]["checkpoint"]
        return None if ckpt is None else str(self.resolve(ckpt))

    @property
    def parent_path(self) -> Path | None:
        """The parent stage's manifest, as a path to open (None: no parent)."""
        parent = self.data.get("parent")
        return None if not parent else self.resolve(parent["path"])

    # -- paths --------------------------------------------------------------------------------

    def inside_run_folder(self, path: str | Path) -> bool:
        """Whether ``path`` lies in this manifest's run folder (``<run>/<stage>/manifest.json``)."""
        run = Path(self.path).resolve().parent.parent
        return run == Path(path).resolve() or run in Path(path).resolve().parents

    def resolve(self, recorded: str | Path) -> Path:
        """A recorded path as one to open: relative ones are relative to this manifest's folder."""
        return Path(self.path).parent / recorded if not Path(recorded).is_absolute() else Path(recorded)

    def record(self, path: str | Path) -> str:
        """``path`` as this manifest records it: relative to the manifest's folder when it lies inside the
        run folder, else absolute (a hub id, which names no local path, as it is)."""
        p = Path(path)
        if not p.exists() and not p.is_absolute():
            return str(path)  # a hub id
        here = Path(self.path).parent.resolve()
        run_folder = (here / self.data.get("run_folder", "..")).resolve()
        target = p.resolve()
        if target == run_folder or run_folder in target.parents:
            return os.path.relpath(target, here)
        return str(target)

    # -- updates (each one saved atomically) ----------------------------------------------------

    def save(self) -> None:
        """Write the manifest (the main process only: the others keep their copy in memory)."""
        if is_main():
            atomic_write_json(self.path, self.data, fault=f"write:{MANIFEST_NAME}:{self.data['status']}")

    def set_input_model(self, ref: str) -> None:
        p = Path(ref)
        self.data["inputs"]["model"] = {"ref": self.record(ref), "local": p.exists(),
                                        "files": hash_checkpoint(p) if p.is_dir() else None}
        self.save()

    def add_input_data(self, name: str, source: str, rows_used: int, skipped: dict[str, int] | None = None,
                       sha256: str | None = None) -> None:
        self.data["inputs"]["data"] = [d for d in self.data["inputs"]["data"] if d["name"] != name] + [{
            "name": name, "source": self.record(source) if Path(source).is_absolute() else source,
            "sha256": sha256, "rows_used": rows_used,
            "rows_skipped": skipped or {},
        }]
        self.save()

    def update_metrics(self, **metrics: Any) -> None:
        self.data["metrics"].update(metrics)
        self.save()

    def complete(self, checkpoint: Path | str | None) -> None:
        """Mark the stage complete: hash the checkpoint first, then write status last."""
        if checkpoint is not None and is_main():
            ckpt = Path(checkpoint)
            self.data["output"] = {"checkpoint": self.record(ckpt), "files": hash_checkpoint(ckpt)}
        self.data["status"] = "complete"
        self.data["ended_at"] = now()
        self.save()

    def fail(self, error: str) -> None:
        self.data["status"] = "failed"
        self.data["error"] = error
        self.data["ended_at"] = now()
        self.save()

    # -- checks -----------------------------------------------------------------------------

    def verify_checkpoint(self) -> list[str]:
        """Files of the recorded checkpoint that are missing, changed or not recorded (empty list: intact)."""
        ckpt = self.checkpoint  # (resolved)
        if ckpt is None:
            return []
        recorded = self.data["output"]["files"]
        if not Path(ckpt).is_dir():
            return [f"{ckpt} (the whole checkpoint folder is missing)"]
        problems = []
        for rel, digest in recorded.items():
            f = Path(ckpt) / rel
            if not f.is_file():
                problems.append(f"{rel} (missing)")
            elif sha256_file(f) != digest:
                problems.append(f"{rel} (changed)")
        # files added later, except what `r1 eval --model <checkpoint>` writes under eval/ (not loaded as the
        # model); looked for only inside the run folder (a registered base elsewhere: its recorded files only)
        listed = hash_checkpoint_names(Path(ckpt)) if self.inside_run_folder(ckpt) else recorded
        unrecorded = sorted(n for n in set(listed) - set(recorded) if not n.startswith(f"{EVAL_OUTPUTS}/"))
        return problems + [f"{rel} (not recorded in the manifest)" for rel in unrecorded]


def schema_problem(data: dict) -> str | None:
    """What in a parsed manifest breaks the shape every reader relies on, naming the field (None: fine).
    A complete stage with a checkpoint must record its files: an empty list would verify anything."""
    def kind(value) -> str:
        return "null" if value is None else type(value).__name__

    if not isinstance(data.get("stage"), str):
        return f"field 'stage' must be a string, got {kind(data.get('stage'))}"
    output = data.get("output")
    if not isinstance(output, dict):
        return f"field 'output' must be a mapping, got {kind(output)}"
    if not isinstance(output.get("checkpoint"), str | None):
        return f"field 'output.checkpoint' must be a path or null, got {kind(output.get('checkpoint'))}"
    files = output.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return f"field 'output.files' must be a mapping of file → sha256, got {kind(files)}"
    if data["status"] == "complete" and output.get("checkpoint") is not None and not files:
        return "field 'output.files' is empty for a complete stage with a checkpoint: nothing could be verified"
    for key in ("metrics", "inputs"):
        if not isinstance(data.get(key), dict):
            return f"field {key!r} must be a mapping, got {kind(data.get(key))}"
    if not isinstance(data.get("parent"), dict | None):
        return f"field 'parent' must be a mapping or null, got {kind(data.get('parent'))}"
    if not isinstance(data.get("resumes", []), list):
        return f"field 'resumes' must be a list, got {kind(data.get('resumes'))}"
    return _metric_problem(data["metrics"], "metrics")


# Metrics every reader formats as numbers (r1 status, the report): a value under one of these keys is a
# number or null, never a string or a bool
_NUMERIC_METRIC = re.compile(r"^(?:(?:pass|cons)@\d+|wall_seconds|seconds|k|problems|samples|steps|peak_rss_mb"
                             r"|mean_length_tokens|.*_rate|accuracy.*|temperature|top_p)$")


def _metric_problem(value, where: str) -> str | None:
    """The first metric, depth first, whose value is not a number where readers need one (None: none)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            at = f"{where}.{key}"
            if _NUMERIC_METRIC.match(str(key)) and not (inner is None or (isinstance(inner, int | float)
                                                                          and not isinstance(inner, bool))):
                return f"field {at!r} must be a number, got {type(inner).__name__} {inner!r:.40}"
            problem = _metric_problem(inner, at) if isinstance(inner, dict) else None
            if problem:
                return problem
    return None


def require_parent(stage_dir: Path, expected_stage: str, make_target: str) -> Manifest:
    """Load and check the manifest a child stage builds on, or raise with what to run instead."""
    path = Path(stage_dir) / MANIFEST_NAME
    hint = f"run `make {make_target}` (or `r1 {make_target}`) first"
    if not path.exists():
        raise ManifestError(f"{path}: parent stage {expected_stage!r} has no manifest; {hint}")
    try:
        m = Manifest.load(path)
    except ManifestError as e:
        raise ManifestError(f"{e}; {hint}") from None
    if m.stage != expected_stage:
        raise ManifestError(f"{path}: expected a {expected_stage!r} manifest, found stage {m.stage!r}")
    if m.status != "complete":
        raise ManifestError(f"{path}: parent stage {expected_stage!r} is {m.status!r}, not complete; "
                            f"{hint} (add RESUME=1 to resume it)")
    bad = m.verify_checkpoint()
    if bad:
        raise ManifestError(f"{path}: the checkpoint of {expected_stage!r} no longer matches its manifest: "
                            f"{', '.join(bad[:5])}; re-run `make {make_target}`")
    return m
