"""The device check in CPU mode: every step runs, one table and a manifest come out (on a lent GPU the same
command with the defaults fills the table in about 8 minutes)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO, assert_no_leftovers


@pytest.mark.slow
def test_device_check_runs_every_step_and_writes_one_table(tmp_path):
    out = tmp_path / "check"
    result = subprocess.run(
        [sys.executable, "-m", "ga3c.tools.device_check", "game=cartpole", "agents=4", "device_check.nets=[mlp]",
         "device_check.bench_arms=[ceiling,ga3c]",
         "device_check.bench_seconds=2", "device_check.bench_warmup_seconds=1", "device_check.learner_updates=2",
         "device_check.learning_seconds=4", "bench.learner.batch_sizes=[16]", "bench.learner.prediction_batch_sizes=[4]",
         "bench.learner.warmup_updates=1", "wandb.mode=disabled", f"hydra.run.dir={out}"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "device_check.json").read_text())["steps"]
    assert list(report) == ["bench-mlp", "learn-defaults", "learn-sample_reuse"]
    bench = report["bench-mlp"]
    assert list(bench["arms"]) == ["ceiling", "ga3c"]   # A3C's arm is the bench's own, tested there
    assert all(m["fps"] > 0 and m["returncode"] == 0 for m in bench["arms"].values()), bench["arms"]
    training = next(iter(bench["learner"]["training"].values()))
    assert training["syncs"] == 0 and bench["learner"]["prediction"]["4"]["syncs"] == 1
    for arm in ("learn-defaults", "learn-sample_reuse"):
        assert report[arm]["returncode"] == 0 and report[arm]["summary"]["frames"] > 0, report[arm]
    md = (out / "device_check.md").read_text()
    assert "| bench-mlp | GA3C |" in md and "| learn-sample_reuse | finished |" in md
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tool"] == "ga3c.tools.device_check" and manifest["host"]["cores"] >= 1
    assert_no_leftovers(str(out))
