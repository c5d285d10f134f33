"""The throughput benchmark: arms' overrides, the measured window, the report; end to end on CartPole."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import REPO, assert_no_leftovers, compose_config
from ga3c.tools.bench import arm_overrides, markdown, measure, ratios


def bench_config(*overrides: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="bench", overrides=[*overrides, "output_dir=/tmp/ga3c-unused"])


def test_bench_config_has_every_training_key():
    cfg = bench_config("game=pong", "net=large")
    assert cfg.game.name == "pong" and cfg.net.hidden == 512 and cfg.algo.name == "ga3c"
    assert list(cfg.bench.arms) == ["ceiling", "a3c", "ga3c"]
    assert cfg.bench.seconds_per_arm > 0
    assert compose_config("algo=ceiling").algo.name == "ceiling"


def test_arm_overrides_same_for_every_arm_but_algo_and_a3c_agents(tmp_path):
    cfg = bench_config("game=pong", "bench.seconds_per_arm=60", "bench.warmup_seconds=15", "bench.a3c_agents=3")
    user = ["game=pong", "net=small", "agents=16"]
    arms = {arm: arm_overrides(cfg, arm, user, tmp_path / arm) for arm in ("ceiling", "a3c", "ga3c")}
    for arm, overrides in arms.items():
        assert f"algo={arm}" in overrides
        # a safety limit only (15 s warm-up + 60 s measured + start-up grace): the bench stops each arm itself
        assert f"trainer.max_time=00:00:0{(75 + cfg.bench.startup_grace_seconds) // 60}:" in " ".join(overrides)
        assert "max_frames=null" in overrides and "net=small" in overrides
        assert f"hydra.run.dir={tmp_path / arm}" in overrides
    assert "agents=16" in arms["ga3c"] and "agents=16" in arms["ceiling"]
    assert "agents=3" in arms["a3c"] and "agents=16" not in arms["a3c"]


def _summary(wall, frames, trained, updates, status="running", **extra):
    return dict(summary=dict(wall_seconds=wall, frames=frames, trained_steps=trained, updates=updates,
                             status=status, agents=4, predictors=1, trainers=1, **extra),
                t=100.0 + wall, cpu={1: wall * 0.5, 2: wall * 1.0}, machine=(wall * 150.0, wall * 200.0),
                threads={"learner (main)": wall * 0.75, "predictor-0": wall * 0.25})


def test_measure_uses_the_window_after_warm_up():
    seen = [_summary(1, 100, 0, 0, pps=5.0), _summary(5, 1000, 200, 10, pps=50.0),
            _summary(7, 3000, 600, 30, pps=100.0), _summary(9, 5000, 1000, 50, pps=200.0),
            _summary(12, 5100, 1000, 50, status="finished", pps=1.0)]   # the final one covers the shutdown

    class NoGpu:
        def mean(self, start, end):
            return None

    m = measure("ga3c", seen, warm_from=4.0, gpu=NoGpu(), returncode=0, run_dir=REPO)
    assert m["seconds"] == 4.0                      # from wall 5 to wall 9, not the final summary
    assert m["fps"] == (5000 - 1000) / 4
    assert m["samples_per_s"] == 200.0 and m["tps"] == 10.0
    assert m["pps"] == 150.0                        # windows (5, 7] and (7, 9], equal length
    assert m["cpu_util"] == pytest.approx(1.5 / (os.cpu_count() or 1))  # 1.5 CPU-seconds per second
    assert m["machine_cpu_busy"] == pytest.approx(0.75)
    assert m["status"] == "finished" and m["gpu_util"] is None
    assert m["thread_cpu"] == pytest.approx({"learner (main)": 0.75, "predictor-0": 0.25})


def test_thread_cpu_seconds_reads_each_named_thread_of_a_process():
    """The run's threads carry their names to the OS, so the bench reads each one's CPU time from /proc."""
    import threading
    import time

    from ga3c.thread_names import name_os_thread
    from ga3c.tools.bench import thread_cpu_seconds

    stop = threading.Event()

    def spin():
        name_os_thread("predictor-7")
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        time.sleep(0.5)
        seconds = thread_cpu_seconds(os.getpid())
    finally:
        stop.set()
        thread.join()
    assert seconds["predictor-7"] > 0.05 and "learner (main)" in seconds, seconds


def test_report_has_ratios_and_time_shares():
    results = {"ceiling": dict(label="env-only ceiling", fps=4000.0, pps=0.0, tps=0.0, samples_per_s=0.0),
               "a3c": dict(label="A3C (CPU)", fps=1000.0, pps=250.0, tps=50.0, samples_per_s=250.0,
                           a3c_env_share=0.2, a3c_forward_share=0.3, a3c_train_share=0.4, a3c_sync_share=0.05),
               "ga3c": dict(label="GA3C", fps=2000.0, pps=500.0, tps=10.0, samples_per_s=750.0,
                            predictor_busy_share=0.8, predictor_compute_share=0.5, trainer_busy_share=0.1)}
    r = ratios(results)
    assert r["ga3c_over_a3c_samples_per_s"] == 3.0 and r["ga3c_over_ceiling_fps"] == 0.5
    md = markdown(results, dict(game="pong", net="small", command="python -m ga3c.tools.bench", machine="test",
                                seconds_per_arm=60, warmup_seconds=15, date="today"))
    assert "| GA3C / A3C, training samples/s | 3.00 |" in md
    assert "| GA3C / env-only ceiling, env frames/s | 0.50 |" in md
    assert "50 % forward pass (compute), 30 % IPC" in md and "20 % waiting" in md
    assert "training (forward, backward, shared update) 40 %" in md


@pytest.mark.slow
def test_bench_runs_end_to_end_on_cartpole(tmp_path):
    out = tmp_path / "bench"
    env = dict(os.environ, GA3C_TEST_MARKER=str(out))
    result = subprocess.run([sys.executable, "-m", "ga3c.tools.bench", "game=cartpole", "bench.seconds_per_arm=4",
                             "bench.warmup_seconds=2", "agents=4", "wandb.mode=offline", f"hydra.run.dir={out}"],
                            cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "bench.json").read_text())
    assert list(report["arms"]) == ["ceiling", "a3c", "ga3c"]
    for arm, m in report["arms"].items():
        assert m["returncode"] == 0 and m["status"] == "finished", (arm, m)
        assert m["seconds"] > 0 and m["fps"] > 0, (arm, m)
        assert 0 < m["cpu_util"] <= 1.05, (arm, m)
    assert report["arms"]["a3c"]["samples_per_s"] > 0 and report["arms"]["ga3c"]["samples_per_s"] > 0
    assert report["arms"]["ceiling"]["samples_per_s"] == 0
    assert report["arms"]["a3c"]["agents"] == (os.cpu_count() or 1)   # one A3C agent per core
    assert report["ratios"]["ga3c_over_a3c_samples_per_s"] > 0
    md = (out / "bench.md").read_text()
    assert "| GA3C / A3C, training samples/s |" in md and "## Where the time goes" in md
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((out / "wandb").glob("offline-run-*")), "the bench's W&B run"
    # A3C and GA3C write the same summary keys (A3C adds its own time shares)
    a3c = json.loads((out / "a3c" / "summary.json").read_text())
    ga3c = json.loads((out / "ga3c" / "summary.json").read_text())
    assert set(ga3c) - {"video"} <= set(a3c), set(ga3c) - set(a3c)
    assert_no_leftovers(str(out))
