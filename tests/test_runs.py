"""ga3c.tools.runs: the one reader of summary.json and metrics.jsonl, and its extract/plot commands."""
from __future__ import annotations

import json
import math
import subprocess
import sys

from helpers import REPO
from ga3c.tools.runs import extract, read_curve, read_metrics, read_summary


def write_run(run_dir, rows, summary=None):
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.write('{"wall_seconds": 9')   # cut short by a killed run
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))


def test_metrics_are_read_in_time_order_past_a_cut_line(tmp_path):
    write_run(tmp_path / "r", [dict(wall_seconds=10, frames=200, score_mean_100=None),
                               dict(wall_seconds=5, frames=100, score_mean_100=-20.0, **{"loss/entropy": 1.7})],
              summary=dict(status="finished"))
    rows = read_metrics(tmp_path / "r")
    assert [r["wall_seconds"] for r in rows] == [5, 10]
    curve = read_curve(tmp_path / "r")
    assert curve["frames"] == [100.0, 200.0] and curve["score_mean_100"][0] == -20.0
    assert math.isnan(curve["score_mean_100"][1]) and math.isnan(curve["loss/entropy"][1])
    assert read_summary(tmp_path / "r") == dict(status="finished")
    assert read_summary(tmp_path / "nothing") is None and read_metrics(tmp_path / "nothing") == []


def test_extract_and_plot_from_the_command_line(tmp_path):
    write_run(tmp_path / "r", [dict(wall_seconds=5 * i, frames=1000 * i, score_mean_100=-21 + i, **{"loss/entropy": 1.7})
                               for i in range(1, 6)])
    csv_path = tmp_path / "r.csv"
    done = subprocess.run([sys.executable, "-m", "ga3c.tools.runs", "extract", str(tmp_path / "r"), str(csv_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert read_curve(csv_path)["score_mean_100"] == [-20.0, -19.0, -18.0, -17.0, -16.0]
    assert extract(tmp_path / "r", tmp_path / "again.csv").read_text() == csv_path.read_text()
    png = tmp_path / "plot.png"
    done = subprocess.run([sys.executable, "-m", "ga3c.tools.runs", "plot", str(png), str(csv_path), str(tmp_path / "r")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and png.stat().st_size > 10_000, done.stderr
    bad = subprocess.run([sys.executable, "-m", "ga3c.tools.runs", "extract", str(tmp_path / "nope"), str(csv_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"ga3c.tools.runs: error: {tmp_path / 'nope'} has no metrics.jsonl"]


def test_compare_sets_runs_side_by_side_by_time_and_by_frames(tmp_path):
    # a fast run (1,000 frames/s) and a slow one (500 frames/s), the slow one stopped at 30 s
    write_run(tmp_path / "fast", [dict(wall_seconds=10 * i, frames=10_000 * i, score_mean_100=float(i),
                                       **{"loss/entropy": 1.0}) for i in range(1, 7)])
    write_run(tmp_path / "slow", [dict(wall_seconds=10 * i, frames=5_000 * i, score_mean_100=float(10 * i))
                                  for i in range(1, 4)])
    extract(tmp_path / "slow", tmp_path / "slow.csv")
    done = subprocess.run([sys.executable, "-m", "ga3c.tools.runs", "compare", str(tmp_path / "fast"),
                           str(tmp_path / "slow.csv"), "--minutes", "0.5,1", "--frames", "15000"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    head, _, fast, slow = done.stdout.strip().splitlines()
    assert head.split(" | ")[1:4] == ["@ 0.5 min", "@ 1 min", "@ 0.015 M frames"]
    assert fast.split(" | ")[1:] == ["3.0", "6.0", "1.0", "6.0", "0.06 M", "1,000", "1.00 |"]
    assert slow.split(" | ")[1:] == ["30.0", "—", "30.0", "30.0", "0.01 M", "500", "— |"]   # no 1-min score
    bad = subprocess.run([sys.executable, "-m", "ga3c.tools.runs", "compare", str(tmp_path / "fast"), "--frames", "2M"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--frames" in bad.stderr
