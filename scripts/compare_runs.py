"""Are two runs of the pipeline the same computation? Stage by stage: the checkpoint's files (their hashes in
each manifest; the model card aside), every held-out sample file, and the held-out pass@1; then each run's
wall time.

    python scripts/compare_runs.py RUN_A RUN_B        # e.g. ../clone-a/runs/tiny ../clone-b/runs/tiny

For the reproducibility claim of the tiny default (``stages/pipeline/threads.py``: the parallel layout is the
recipe's, so a busy neighbour may slow a run but must not change a number): run ``make pipeline`` in two
fresh clones, one beside ``python3 -c "while True: pass"``, and compare. Exit status 1 if any stage
differs (a stage missing from either run is reported, not counted as a difference).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

STAGES = ["base", "stage1", "stage2", "stage3", "stage4", "distill", "distill_rl"]


def _manifest(run: Path, stage: str) -> dict | None:
    path = run / stage / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _samples(run: Path, stage: str) -> dict[str, str]:
    """Every held-out sample file of a stage (relative path → sha256)."""
    root = run / stage
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("samples.jsonl")) if ".prebuilt" not in p.parts}


def _model_files(m: dict) -> dict:
    """The checkpoint's file hashes, the model card left out: it names the parent manifest's hash, and a
    manifest records its run's own times."""
    return {k: v for k, v in (m["output"].get("files") or {}).items() if k != "README.md"}


def _pass1(m: dict) -> float | None:
    metrics = m.get("metrics", {})
    for key in ("eval_after", "probe"):
        if isinstance(metrics.get(key), dict) and "pass@1" in metrics[key]:
            return metrics[key]["pass@1"]
    return None


def compare(a: Path, b: Path) -> tuple[list[list[str]], bool]:
    rows, same_all = [], True
    for stage in STAGES:
        ma, mb = _manifest(a, stage), _manifest(b, stage)
        if ma is None or mb is None:
            rows.append([stage, "missing in " + ("A" if ma is None else "B"), "", "", "", ""])
            continue
        weights = _model_files(ma) == _model_files(mb)
        sa, sb = _samples(a, stage), _samples(b, stage)
        samples = sa == sb
        pa, pb = _pass1(ma), _pass1(mb)
        same = weights and samples and pa == pb
        same_all &= same
        wall = f"{ma['metrics'].get('wall_seconds', 0):.0f} / {mb['metrics'].get('wall_seconds', 0):.0f}"
        rows.append([stage, "identical" if same else "DIFFERENT", "same" if weights else "differ",
                     f"{len(sa)} files, " + ("same" if samples else f"{sum(sa.get(k) != sb.get(k) for k in sa | sb)} differ"),
                     "–" if pa is None else (f"{pa:.4f}" if pa == pb else f"{pa:.4f} / {pb:.4f}"), wall])
    return rows, same_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    args = parser.parse_args()
    rows, same = compare(args.run_a, args.run_b)
    header = ["stage", "verdict", "checkpoint files (card aside)", "held-out sample files", "held-out pass@1",
              "wall s (A / B)"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    total = [sum((_manifest(run, s) or {}).get("metrics", {}).get("wall_seconds", 0) for s in STAGES)
             for run in (args.run_a, args.run_b)]
    print(f"\nstage walls summed: A {total[0]:.0f} s, B {total[1]:.0f} s ({total[1] / max(total[0], 1e-9):.2f}×)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
