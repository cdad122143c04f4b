"""The spread of the demo's accuracy over seeds and host profiles, side by side in one run: ``make run``'s whole
pipeline (``python -m pipeline run-local --no-resume``, the demo digits at the defaults) with each of ``--seeds``
seeds under each of ``--profiles``, the host profiles of ``make test PROFILE=...`` (their environment read from the
Makefile: ``make -s profile-env PROFILE=...``). A profile only makes this CPU choose as that kind of host would and
caps its instruction sets; it cannot lend it what it lacks (AMX kernels need an AMX CPU).

Prints each run's test accuracy (the evaluate step's, on the TFRecords), the SavedModel's on the test files as
clients send them, and each exported format's; then per profile and measure the lowest, mean and highest; then the
lowest over all runs and the widest gaps of the TFLite files below the SavedModel, each beside the test bound that
guards it (tests/conftest.py, tests/pipeline/test_local_run.py) and the margin left. The last line is a JSON object.

    .venv/bin/python bench/spread.py [--seeds 5] [--profiles noavx512,avx512bf16,amx]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from tests.conftest import DEMO_ACCURACY_BAR, FORMAT_GAP_BOUNDS  # noqa: E402

MEASURES = ("test_accuracy", "raw_files", "saved_model", "tflite_float", "tflite_int8")


def profile_env(profile: str) -> dict[str, str]:
    """The environment ``make test PROFILE=profile`` runs the suite in."""
    printed = subprocess.run(
        ["make", "-s", "--no-print-directory", "profile-env", f"PROFILE={profile}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(assignment.split("=", 1) for assignment in shlex.split(printed))


def demo_run(work_dir: str, seed: int, env: dict[str, str]) -> dict:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run-local", "--work-dir", work_dir, "--seed", str(seed), "--no-resume"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    if result.returncode:
        raise SystemExit(f"run-local --seed {seed} failed: {result.stderr.strip().splitlines()[-1:]}")
    with open(os.path.join(work_dir, "summary.json")) as handle:
        summary = json.load(handle)
    formats = {name: entry["test_accuracy"] for name, entry in summary["formats"].items()}
    return {
        "seed": seed,
        "precision": summary["training"]["precision"],
        "backend": summary["training"]["backend"],
        "test_accuracy": summary["test_accuracy"],
        "raw_files": summary["raw_files"]["test_accuracy"],
        **formats,
        "seconds": round(time.monotonic() - started, 1),
    }


def spread(values: list[float]) -> dict:
    return {"min": min(values), "mean": round(statistics.fmean(values), 4), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--profiles", default="noavx512,avx512bf16,amx")
    args = parser.parse_args()
    profiles = args.profiles.split(",")
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="spread-") as root:
        for profile in profiles:
            env = profile_env(profile)
            runs[profile] = []
            for seed in range(args.seeds):
                run = demo_run(os.path.join(root, f"{profile}-{seed}"), seed, env)
                runs[profile].append(run)
                print(
                    f"{profile:11s} seed {seed} ({run['backend']}, {run['precision']}): "
                    + ", ".join(f"{name} {run[name]:.3f}" for name in MEASURES)
                    + f"  {run['seconds']} s",
                    flush=True,
                )
    by_profile = {
        profile: {name: spread([run[name] for run in runs[profile]]) for name in MEASURES} for profile in profiles
    }
    print()
    for profile, measures in by_profile.items():
        print(
            f"{profile:11s} "
            + ", ".join(f"{name} {m['min']:.3f}/{m['mean']:.3f}/{m['max']:.3f}" for name, m in measures.items())
            + "  (min/mean/max)"
        )
    every = [run for profile_runs in runs.values() for run in profile_runs]
    lowest = min(min(run["test_accuracy"], run["saved_model"]) for run in every)
    gaps = {name: round(max(run["saved_model"] - run[name] for run in every), 4) for name in FORMAT_GAP_BOUNDS}
    bounds = {
        "demo_accuracy_bar": {
            "bound": DEMO_ACCURACY_BAR,
            "worst": lowest,
            "margin": round(lowest - DEMO_ACCURACY_BAR, 4),
        }
    }
    print(
        f"\nlowest test accuracy of {len(every)} runs: {lowest:.3f} (bar {DEMO_ACCURACY_BAR}, "
        f"margin {lowest - DEMO_ACCURACY_BAR:.3f})"
    )
    for name, gap in gaps.items():
        bound = FORMAT_GAP_BOUNDS[name]
        bounds[f"{name}_below_saved_model"] = {"bound": bound, "worst": gap, "margin": round(bound - gap, 4)}
        print(f"widest gap {name} below the SavedModel: {gap:.3f} (bound {bound}, margin {bound - gap:.3f})")
    print(
        json.dumps(
            {
                "cpu": platform.processor() or platform.machine(),
                "seeds": args.seeds,
                "profiles": by_profile,
                "bounds": bounds,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
