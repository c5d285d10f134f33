"""End to end: real ROMs, real agent processes, a real offline W&B run directory."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time

import pytest
import torch

from helpers import (REPO, assert_no_leftovers, read_summary, run_train, train_command, wait_until)
from wandb_records import history_keys

SUMMARY_KEYS = {"frames", "episodes", "updates", "wall_seconds", "fps", "pps", "tps", "samples_per_s",
                "score_mean_100", "policy_lag_mean", "agents", "predictors", "trainers"}
SCORE_METRICS = {"score_mean_100", "episode_length_mean_100"}  # logged once episodes end
WANDB_METRICS = {"fps", "pps", "tps", "samples_per_s", "loss/policy_loss", "loss/value_loss", "loss/entropy", "grad_norm", "lr", "prediction_queue_depth",
                 "training_queue_depth", "prediction_batch_mean", "training_batch_mean", "policy_lag_mean", "agents",
                 "predictors", "trainers"}


def wandb_history_keys(run_dir, wanted=WANDB_METRICS) -> set[str]:
    """Which of `wanted` the offline W&B run logged as history metrics (its records parsed; no network)."""
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline W&B run, found {runs}"
    logged = set().union(*(history_keys(p) for p in runs[0].glob("*.wandb")))
    return wanted & logged


@pytest.mark.slow
def test_cartpole_learns_to_475(tmp_path):
    run_train(tmp_path, "game=cartpole", "stop_score=475", "trainer.max_time=00:00:04:00", "wandb.mode=disabled",
              timeout=330)
    summary = read_summary(tmp_path)
    assert summary["score_mean_100"] >= 475, summary
    assert summary["stop_reason"].startswith("score_mean_100 reached")
    assert summary["episodes"] >= 100
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_cartpole_holds_what_it_learned(tmp_path):
    """Learning that holds: CartPole's preset trained past 475 and kept training for several hundred more updates
    stays at or above 475 (its rolling-100 once fell from 500 to 9 for good, the policy's entropy at 0), and the
    monitor raised no collapse warning after it got there."""
    run_train(tmp_path, "game=cartpole", "max_frames=null", "trainer.max_time=00:00:01:20", "wandb.mode=disabled",
              timeout=200)
    windows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    reached = next((i for i, m in enumerate(windows) if m["score_mean_100"] >= 475), None)
    assert reached is not None, [round(m["score_mean_100"], 1) for m in windows]
    after = windows[reached:]
    assert after[-1]["updates"] - after[0]["updates"] >= 500, "too few updates after 475 to show it holds"
    assert min(m["score_mean_100"] for m in after) >= 475, [round(m["score_mean_100"], 1) for m in after]
    assert not any(m["warning"] for m in after), [m["warning"] for m in after if m["warning"]]
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_cartpole_learns_to_475_with_vtrace(tmp_path):
    run_train(tmp_path, "game=cartpole", "learner.correction=vtrace", "stop_score=475", "trainer.max_time=00:00:04:00",
              "wandb.mode=disabled", timeout=330)
    summary = read_summary(tmp_path)
    assert summary["score_mean_100"] >= 475, summary
    assert 0 < summary["vtrace_rho_mean"] <= 1.0   # the corrected learner really ran
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("game, net", [("pong", "small"), ("boxing", "large")])
def test_atari_smoke(tmp_path, game, net):
    run_train(tmp_path, f"game={game}", f"net={net}", "agents=4", "predictors=2", "trainers=2", "max_frames=6000", "training_min_batch=20")
    summary = read_summary(tmp_path)
    assert SUMMARY_KEYS <= set(summary), SUMMARY_KEYS - set(summary)
    assert summary["status"] == "finished" and summary["stop_reason"].startswith("reached max_frames")
    # stops promptly: the watchdog checks every 0.25 s, so at most about a second's worth of frames past the limit
    assert 6000 <= summary["frames"] < 6000 + max(4 * 4 * 40, summary["fps_run_mean"])
    assert summary["updates"] > 0 and summary["trained_steps"] > 0
    assert (summary["agents"], summary["predictors"], summary["trainers"]) == (4, 2, 2)
    assert summary["produced_steps"] == summary["trained_steps"] + summary["discarded_steps"]  # nothing lost
    assert summary["wall_seconds"] > 0 and summary["fps_run_mean"] > 0
    assert 0 <= summary["policy_lag_mean"] < 100
    assert math.isfinite(summary["loss/loss"]) and summary["grad_norm"] >= 0
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == summary["updates"]
    assert any(k.startswith("model.") for k in checkpoint["state_dict"])
    missing = WANDB_METRICS - wandb_history_keys(tmp_path)
    assert not missing, f"metrics missing from the W&B run: {missing}"
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_sigint_mid_run_stops_cleanly_with_a_final_checkpoint(tmp_path):
    env = dict(os.environ, GA3C_TEST_MARKER=str(tmp_path))
    process = subprocess.Popen(train_command(tmp_path, "agents=4", "max_frames=null", "wandb.mode=offline"),
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        started = wait_until(lambda: (tmp_path / "summary.json").exists()
                             and json.loads((tmp_path / "summary.json").read_text())["updates"] > 0, 120)
        assert started, "the run never started training"
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        process.wait(timeout=30)
        assert_no_leftovers(str(tmp_path), timeout=max(0.5, 10 - (time.monotonic() - sent)))
        assert time.monotonic() - sent < 10, "processes took longer than 10 s to go"
    finally:
        if process.poll() is None:
            process.kill()
    output = process.stdout.read()
    assert process.returncode == 0, output[-3000:]
    summary = read_summary(tmp_path)
    assert summary["status"] == "finished" and summary["stop_reason"] == "SIGINT"
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == summary["updates"]


@pytest.mark.slow
def test_resume_continues_counters_optimizer_and_wandb_run(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    run_train(first, "game=cartpole", "max_frames=15000")
    before = read_summary(first)
    checkpoint = first / "checkpoints" / "last.ckpt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["optimizer_states"] and state["optimizer_states"][0]["state"]
    run_train(second, "game=cartpole", "max_frames=30000", f"ckpt_path={checkpoint}")
    after = read_summary(second)
    assert after["frames"] >= 30000 and after["episodes"] > before["episodes"]
    assert after["updates"] > before["updates"] and after["wall_seconds"] > before["wall_seconds"]
    resumed = torch.load(second / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    run_ids = lambda d: {p.name.rsplit("-", 1)[1] for p in (d / "wandb").glob("offline-run-*")}  # noqa: E731
    assert run_ids(first) == run_ids(second), "the resumed run must continue the same W&B run id"
    assert resumed["global_step"] == after["updates"]
    # The first window's rates count only this run's updates: the learner's version is the checkpoint's from
    # the start (Lightning restores global_step only after on_fit_start), not 0 until the first update.
    window = json.loads((second / "metrics.jsonl").read_text().splitlines()[0])
    resumed_from = next(v for k, v in state["callbacks"].items() if "RunState" in k)
    seconds = window["wall_seconds"] - resumed_from["wall_seconds"]   # the window's length: it began at the resume
    assert window["updates"] >= state["global_step"]
    assert window["tps"] * seconds == pytest.approx(window["updates"] - state["global_step"], abs=0.5), window
    assert wandb_history_keys(first, SCORE_METRICS) == SCORE_METRICS
    assert_no_leftovers(str(tmp_path))
