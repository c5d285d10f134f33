"""The learning benchmark: thresholds and medians on made-up curves; end to end on CartPole, two arms."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from ga3c.config import validate
from helpers import CONF, REPO, assert_no_leftovers, compose_config
from ga3c.tools.learncurve import (analyze, finished, first_reach, markdown, max_time, median, median_curve,
                             move_aside)


def write_run(run_dir, rows):
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for wall, frames, score in rows:
            f.write(json.dumps(dict(wall_seconds=wall, frames=frames, score_mean_100=score, policy_lag_mean=2.0)) + "\n")
        f.write('{"wall_seconds": 9')  # a line cut short by a killed run is skipped
    (run_dir / "summary.json").write_text(json.dumps(dict(status="finished", fps_run_mean=100.0, policy_lag_mean=2.0)))


def test_first_reach_and_median_count_never_as_slowest():
    curve = dict(wall_seconds=[5, 10, 15], frames=[100, 200, 300], score=[math.nan, -5.0, 1.0])
    assert first_reach(curve, -10) == (10, 200) and first_reach(curve, 0) == (15, 300)
    assert first_reach(curve, 18) == (math.inf, math.inf)
    assert median([30.0, math.inf, 10.0]) == 30.0          # 2 of 3 seeds got there
    assert median([30.0, math.inf, math.inf]) == math.inf  # only 1 of 3: the median never did
    assert max_time(30) == "00:00:30:00" and max_time(0.25) == "00:00:00:15" and max_time(90) == "00:01:30:00"


def test_the_median_curve_holds_an_ended_seed_at_its_last_score():
    """Seeds end a little apart: past the first end, the median must not become whichever seed runs longest."""
    import numpy as np

    seeds = [dict(wall_seconds=[0, 10, 20], score=[math.nan, -20.0, 15.0]),
             dict(wall_seconds=[0, 10, 21], score=[math.nan, -20.0, 19.0]),
             dict(wall_seconds=[0, 10, 22], score=[math.nan, -20.0, 19.5])]
    middle = median_curve(seeds, "wall_seconds", np.array([0.0, 10.0, 22.0]))
    assert np.isnan(middle[0]) and middle[1] == -20.0
    assert middle[2] == pytest.approx(19.0)   # the median of 15, 19 and 19.5; not seed 2's 19.5 alone


def test_only_a_run_that_ended_on_the_same_budget_is_kept(tmp_path):
    def run(name, **summary):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
        return tmp_path / name

    on_time = dict(status="finished", stop_reason="trainer.max_time")
    assert finished(run("a", wall_seconds=3590.0, **on_time), 60)
    assert not finished(run("b", wall_seconds=902.0, **on_time), 60)    # a 15-minute look where 60 are asked
    assert not finished(run("c", wall_seconds=3590.0, status="finished", stop_reason="SIGINT"), 60)
    assert not finished(run("d", wall_seconds=3590.0, status="failed", stop_reason="trainer.max_time"), 60)
    assert not finished(tmp_path / "missing", 60)
    assert move_aside(tmp_path / "b") == tmp_path / "b.earlier-1" and not (tmp_path / "b").exists()
    run("b", wall_seconds=1.0)
    assert move_aside(tmp_path / "b") == tmp_path / "b.earlier-2"
    assert move_aside(tmp_path / "missing") is None


def test_analyze_and_table(tmp_path):
    write_run(tmp_path / "a" / "seed0", [(5, 1000, -21.0), (10, 2000, -10.0), (20, 4000, 5.0)])
    write_run(tmp_path / "a" / "seed1", [(5, 1000, -21.0), (10, 2000, -18.0), (20, 4000, -12.0)])
    runs = {"a": {0: tmp_path / "a" / "seed0", 1: tmp_path / "a" / "seed1"}}
    results = analyze(runs, [-15.0, 0.0])
    arm = results["arms"]["a"]
    assert arm["seeds"][0]["reach"]["-15.0"] == (10, 2000) and arm["seeds"][1]["reach"]["-15.0"] == (20, 4000)
    assert arm["median_reach"]["-15.0"] == (15, 3000)
    assert arm["median_reach"]["0.0"][0] == math.inf   # one seed of two: not the median
    assert arm["median_final_score"] == pytest.approx(-3.5)
    table = markdown(results, "t")
    assert "| a | 0 | 0.2 min / 0.00 M" in table and "**—" in table
    # whether a run holds what it learned: the lowest score after its first reach of the top threshold
    write_run(tmp_path / "b" / "seed0", [(5, 1000, 100.0), (10, 2000, 480.0), (15, 3000, 9.0), (20, 4000, 490.0)])
    collapsed = analyze({"b": {0: tmp_path / "b" / "seed0"}}, [475.0])
    assert collapsed["arms"]["b"]["seeds"][0]["lowest_after_top"] == 9.0
    assert "| 490.00 | 490.00 | 9.00 |" in markdown(collapsed, "t")
    assert "| **490.00** | | **9.00** |" in markdown(collapsed, "t")   # the worst seed's, on the median row
    assert math.isnan(arm["seeds"][1]["lowest_after_top"])   # never reached 0: nothing to hold


@pytest.mark.slow
def test_learncurve_end_to_end_on_cartpole_two_arms(tmp_path):
    out = tmp_path / "lc"
    command = [sys.executable, "-m", "ga3c.tools.learncurve", "game=cartpole", "seeds=1", "minutes=0.25",
               "learncurve.arms=[ga3c,a3c]", "wandb.mode=offline", f"hydra.run.dir={out}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("learncurve.md", "learncurve.png", "learncurve.json", "curves.csv"):
        assert (out / name).stat().st_size > 0, name
    results = json.loads((out / "learncurve.json").read_text())
    assert set(results["arms"]) == {"ga3c", "a3c"} and results["thresholds"] == [475.0]
    for arm in ("ga3c", "a3c"):
        seed = results["arms"][arm]["seeds"]["0"]
        assert seed["frames"] > 1000 and seed["final_score"] > 9   # CartPole's random policy scores ~20
    assert "algo=a3c" in (out / "a3c" / "seed0" / ".hydra" / "overrides.yaml").read_text()
    assert list((out / "wandb").glob("offline-run-*")), "the benchmark's own W&B run"
    # a second call finds the finished runs and only analyses them again
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "not run again" in again.stdout + again.stderr
    assert_no_leftovers(str(tmp_path))


def test_a_list_of_seeds_adds_those_seeds_only_and_records_where_each_ran(tmp_path):
    # seeds=[3]: a fourth seed of a study whose first three ran elsewhere; analyze_only reads it without training
    write_run(tmp_path / "ga3c" / "seed3", [(60, 1e4, 20.0), (120, 2e4, 480.0)])
    host = dict(cpu_model="Intel(R) Xeon(R) Processor", cores=2, native_bf16=True)
    (tmp_path / "ga3c" / "seed3" / "manifest.json").write_text(json.dumps(dict(commit="abc1234", host=host)))
    done = subprocess.run([sys.executable, "-m", "ga3c.tools.learncurve", "game=cartpole", "seeds=[3]", "minutes=2",
                           "learncurve.analyze_only=true", "wandb.mode=disabled", f"hydra.run.dir={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "learncurve.json").read_text())
    assert list(results["arms"]["ga3c"]["seeds"]) == ["3"] and not (tmp_path / "ga3c" / "seed0").exists()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["seeds"] == [3] and manifest["run_commits"] == {"ga3c": {"3": "abc1234"}}
    assert manifest["run_hosts"] == {"ga3c": {"3": host}}
    assert "(1 seed, 2 min each)" in (tmp_path / "learncurve.md").read_text()


def test_seeds_is_a_count_or_a_list_of_seed_numbers():
    # what seeds may not be (0, [], [1, 1], [-1], ...) is tests/test_validation.py's, from ga3c/schema.py's Seeds
    from ga3c.tools.learncurve import seed_numbers

    assert seed_numbers(3) == [0, 1, 2] and seed_numbers(OmegaConf.create([4, 2])) == [2, 4]


def test_bad_arm_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ga3c.tools.learncurve", "learncurve.arms=[nope]",
                           f"hydra.run.dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "learncurve.arms: unknown arm" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_interrupting_the_study_stops_its_run_and_starts_no_other(tmp_path):
    import signal
    import time

    out = tmp_path / "lc"
    process = subprocess.Popen([sys.executable, "-m", "ga3c.tools.learncurve", "game=cartpole", "seeds=2", "minutes=5",
                                "wandb.mode=disabled", f"hydra.run.dir={out}"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               # started as `nohup ... &` starts it: SIGINT ignored from the start
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 120
        while not (out / "ga3c" / "seed0" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads((out / "ga3c" / "seed0" / "summary.json").read_text())
    assert summary["stop_reason"] == "SIGINT" and summary["status"] == "finished"   # stopped gracefully
    assert not (out / "ga3c" / "seed1").exists()                                     # and nothing after it
    assert_no_leftovers(str(tmp_path))
    # run again: the interrupted seed is kept aside, not reused, and run anew
    again = subprocess.run([sys.executable, "-m", "ga3c.tools.learncurve", "game=cartpole", "seeds=1", "minutes=0.1",
                            "wandb.mode=disabled", f"hydra.run.dir={out}"], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "kept as" in again.stdout + again.stderr
    kept = json.loads((out / "ga3c" / "seed0.earlier-1" / "summary.json").read_text())
    assert kept["stop_reason"] == "SIGINT"
    assert json.loads((out / "ga3c" / "seed0" / "summary.json").read_text())["stop_reason"] == "trainer.max_time"
    assert_no_leftovers(str(tmp_path))


def test_every_arm_in_conf_makes_a_valid_train_config():
    """An arm is a list of train.py overrides (conf/learncurve.yaml): each composes and validates, so a typo in one
    fails here, not an hour into a study."""
    arms = OmegaConf.load(CONF / "learncurve.yaml").learncurve.arm_overrides
    assert {"ga3c", "a3c", "lstm_stack1", "small_stack1"} <= set(arms)
    for arm, overrides in arms.items():
        cfg = compose_config("game=pong", *overrides)
        validate(cfg)
        assert cfg.game.name == "pong", arm
