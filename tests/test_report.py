"""python -m ga3c.report: HTML with PNG plots from run and multirun directories, offline."""
from __future__ import annotations

import base64
import csv
import json
import math
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from ga3c.report import build, find_runs, label_runs
from tests.conftest import REPO, assert_no_leftovers, read_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def report(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ga3c.report", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **(env or {})))


def check_html(html_path: Path, pngs: list[Path]) -> str:
    html = html_path.read_text()
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert "src='http" not in html and "src=\"http" not in html, "the report must not need the network"
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000, f"{png} is not a real plot"
        assert base64.b64encode(data).decode() in html, f"{png.name} is not embedded in the HTML"
    return html


def fake_run(path: Path, overrides: list[str], choices: dict, windows: list[dict], status: str = "finished") -> None:
    """A run directory with the files train.py writes: summary.json, metrics.jsonl and .hydra/."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (path / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n" + "".join(f"      {k}: {v}\n" for k, v in choices.items()))
    (path / ".hydra" / "config.yaml").write_text(f"seed: 0\ngame:\n  name: {choices['game']}\n"
                                                 f"wandb:\n  group: g1\n  project: ga3c\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    summary = dict(windows[-1], status=status, fps_run_mean=windows[-1]["frames"] / windows[-1]["wall_seconds"])
    (path / "summary.json").write_text(json.dumps(summary))


def windows_of(rng: random.Random, fps: float, n: int = 12, tuned: bool = False, batch: float = 32.0) -> list[dict]:
    out, frames, agents = [], 0, 8
    for i in range(n):
        frames += int(fps * 5 * rng.uniform(0.8, 1.2))
        if tuned and i % 3 == 2:
            agents += rng.choice([-1, 1, 2])
        out.append(dict(frames=frames, wall_seconds=5.0 * (i + 1), fps=fps * rng.uniform(0.8, 1.2),
                        pps=fps * rng.uniform(0.7, 1.0), tps=fps / batch * rng.uniform(0.8, 1.2),
                        score_mean_100=-21 + i * rng.uniform(0.5, 1.5) if i else math.nan,
                        training_batch_mean=batch * rng.uniform(0.9, 1.1), policy_lag_mean=rng.uniform(1, 4),
                        agents=agents, predictors=2, trainers=2 if not tuned else 2 + i % 2))
    return out


def test_report_from_synthetic_study_draws_every_plot(tmp_path):
    """A3C and GA3C, auto-tuned and fixed, two batch sizes: every plot has data and is drawn."""
    rng = random.Random(0)
    study = tmp_path / "multirun"
    specs = [("ga3c", "off", 32, 4000.0), ("ga3c", "ga3c", 32, 4500.0), ("a3c", "off", 32, 700.0),
             ("ga3c", "off", 128, 5000.0)]
    for i, (algo, tuner, batch, fps) in enumerate(specs):
        fake_run(study / str(i), [f"algo={algo}", f"autotune={tuner}", f"training_min_batch={batch}", "seed=0",
                                  "hydra.run.dir=x"],
                 dict(game="pong", net="small", algo=algo, autotune=tuner),
                 windows_of(rng, fps, tuned=tuner == "ga3c", batch=batch))
    (study / "0" / "wandb").mkdir()   # not a run: skipped
    out = tmp_path / "report"
    result = report(str(study), "-o", str(out), "--title", "synthetic study")
    assert result.returncode == 0, result.stdout + result.stderr
    names = {"score_vs_time", "score_vs_frames", "throughput", "autotune_counts", "policy_lag", "ga3c_vs_a3c"}
    pngs = sorted(out.glob("*.png"))
    assert {p.stem for p in pngs} == names
    html = check_html(out / "report.html", pngs)
    assert "synthetic study" in html and "Not drawn" not in html
    assert "varied keys: algo, autotune, training_min_batch" in result.stdout
    # runs.csv holds each run's numbers, computed from its own files
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert len(rows) == 4
    for row in rows:
        windows = [json.loads(line) for line in (Path(row["run"]) / "metrics.jsonl").read_text().splitlines()]
        assert float(row["tps"]) == pytest.approx(statistics.fmean(w["tps"] for w in windows[1:-1]))
        assert float(row["frames"]) == read_summary(Path(row["run"]))["frames"]
        assert row["label"].startswith(f"algo={row['algo']}, ")


def test_labels_group_seeds_and_ignore_paths(tmp_path):
    rng = random.Random(1)
    for i, (batch, seed) in enumerate([(16, 0), (16, 1), (64, 0), (64, 1)]):
        fake_run(tmp_path / str(i), [f"training_min_batch={batch}", f"seed={seed}", f"hydra.run.dir=/x/{i}",
                                     f"wandb.name=r{i}"], dict(game="cartpole", net="mlp"), windows_of(rng, 3000.0))
    runs = find_runs([tmp_path])
    assert label_runs(runs) == ["training_min_batch"]
    assert sorted(r.label for r in runs) == ["training_min_batch=16"] * 2 + ["training_min_batch=64"] * 2
    made = build([tmp_path], tmp_path / "out")
    assert any("Auto-tuned counts" in s for s in made["skipped"]) and any("GA3C vs A3C" in s for s in made["skipped"])


def test_report_without_runs_and_wandb_offline(tmp_path):
    empty = report(str(tmp_path))
    assert empty.returncode == 2 and "no run directories" in empty.stderr
    fake_run(tmp_path / "run", ["game=cartpole"], dict(game="cartpole", net="mlp"),
             windows_of(random.Random(2), 3000.0))
    offline = report(str(tmp_path / "run"), "--wandb-report", env={"WANDB_MODE": "offline"})
    assert offline.returncode == 0, offline.stderr
    assert "W&B is offline (WANDB_MODE=offline): no W&B Report published" in offline.stdout
    assert (tmp_path / "run" / "report" / "report.html").is_file()


@pytest.mark.slow
def test_two_job_cartpole_multirun_then_report(tmp_path):
    """A real multirun in one process (Hydra's basic launcher): two run directories, one W&B run each in
    the study's group, nothing left running; then the report from the multirun directory."""
    sweep_dir = tmp_path / "multirun"
    env = dict(os.environ, GA3C_TEST_MARKER=str(sweep_dir))
    result = subprocess.run([sys.executable, "train.py", "-m", "experiment=cartpole_demo", "max_frames=8000",
                             f"hydra.sweep.dir={sweep_dir}", "log.every_seconds=1", "log.progress=false",
                             "wandb.mode=offline"], cwd=REPO, capture_output=True, text=True, timeout=400, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    runs = [sweep_dir / "0", sweep_dir / "1"]
    ids = set()
    for run in runs:
        summary = read_summary(run)
        assert summary["status"] == "finished" and summary["frames"] >= 8000
        history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert len(history) >= 2 and history[-1]["frames"] == summary["frames"]
        [offline] = list((run / "wandb").glob("offline-run-*"))
        ids.add(offline.name)
        record = next(offline.glob("*.wandb")).read_bytes()
        for text in (b"cartpole_demo", b"game:cartpole", b"net:mlp", b"algo:ga3c", b"autotune:off"):
            assert text in record, f"{run}: W&B run lacks group/tag {text!r}"
    assert len(ids) == 2, "the second job must not reuse the first job's W&B run"
    assert_no_leftovers(str(sweep_dir))

    out = tmp_path / "report"
    made = report(str(sweep_dir), "-o", str(out))
    assert made.returncode == 0, made.stdout + made.stderr
    pngs = sorted(out.glob("*.png"))
    assert {"score_vs_time", "score_vs_frames", "throughput", "policy_lag"} <= {p.stem for p in pngs}
    html = check_html(out / "report.html", pngs)
    assert "training_min_batch=16" in html and "training_min_batch=64" in html
