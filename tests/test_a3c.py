"""The CPU A3C baseline: shared optimizer state, checkpoints GA3C loads, learning CartPole, clean stops."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import gymnasium as gym
import pytest
import torch
import torch.multiprocessing as mp
from hydra.utils import instantiate

from helpers import (REPO, assert_no_leftovers, compose_config, read_summary, run_train, train_command,
                      wait_until)
from ga3c.algos.a3c_monitor import A3CMonitor
from ga3c.algos.a3c_model import lightning_checkpoint, share_optimizer_state
from ga3c.algos.a3c_agent import STATS, S
from ga3c.config import usable_cores
from ga3c.learner import Learner, RMSpropTF
from ga3c.networks import ConvActorCritic, MLPActorCritic
from ga3c.runtime import parse_max_time

# What every run writes in summary.json, GA3C or A3C (ga3c.monitor.Monitor._metrics and write_summary).
SUMMARY_KEYS = {"frames", "episodes", "updates", "wall_seconds", "fps", "pps", "tps", "samples_per_s",
                "score_mean_100", "episode_length_mean_100", "prediction_batch_mean", "training_batch_mean",
                "prediction_queue_depth", "training_queue_depth", "batch_queue_depth", "predictor_busy_share",
                "predictor_compute_share", "trainer_busy_share", "learner_busy_share", "agents", "predictors", "trainers", "lr",
                "produced_steps", "rollouts", "trained_steps", "discarded_steps", "agent_restarts",
                "policy_lag_mean", "in_flight_steps", "status", "stop_reason", "fps_run_mean",
                "samples_per_s_run_mean", "loss/loss", "loss/policy_loss", "loss/value_loss", "loss/entropy"}


# --- units -----------------------------------------------------------------------------------------------
def test_shared_rmsprop_tf_state_starts_at_one_in_shared_memory():
    model = ConvActorCritic((4, 84, 84), 6, [16, 32], [8, 4], [4, 2], 256)
    optimizer = RMSpropTF(model.parameters(), lr=1e-3)
    states = share_optimizer_state(optimizer)
    assert len(states) == len(list(model.parameters()))
    for p, state in zip(model.parameters(), states):
        assert state["square_avg"].is_shared()
        assert state["square_avg"].shape == p.shape
        assert torch.all(state["square_avg"] == 1.0)  # TF1's accumulator starts at 1
        assert optimizer.state[p] is state


def test_shared_adam_state_leaves_parameters_unchanged():
    model = MLPActorCritic((4,), 2, [8])
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    states = share_optimizer_state(optimizer)
    for p, b, state in zip(model.parameters(), before, states):
        assert torch.equal(p, b)
        assert p.grad is None
        assert state["exp_avg"].is_shared() and state["exp_avg_sq"].is_shared() and state["step"].is_shared()


def _hogwild_child(model, states):
    """A child's optimizer over the shared parameters and statistics (what an A3C agent does)."""
    optimizer = RMSpropTF(model.parameters(), lr=0.5)
    for p, state in zip(model.parameters(), states):
        optimizer.state[p] = state
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()


def test_child_update_reaches_the_shared_model_and_statistics():
    model = MLPActorCritic((4,), 2, [8])
    model.share_memory()
    optimizer = RMSpropTF(model.parameters(), lr=0.5)
    states = share_optimizer_state(optimizer)
    before = [p.detach().clone() for p in model.parameters()]
    process = mp.get_context("spawn").Process(target=_hogwild_child, args=(model, states))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    # square_avg = 0.99 * 1 + 0.01 * 1 = 1; step = lr * g / sqrt(1 + eps) with eps = 0.1
    expected = 0.5 / math.sqrt(1.1)
    for p, b, state in zip(model.parameters(), before, states):
        torch.testing.assert_close(b - p.detach(), torch.full_like(p, expected))
        torch.testing.assert_close(state["square_avg"], torch.ones_like(p))


def test_checkpoint_loads_into_learner_and_its_optimizer():
    model = MLPActorCritic((4,), 2, [8])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    share_optimizer_state(optimizer)
    counters = dict(frames=10, produced_steps=10, episodes=1, rollouts=2, trained_steps=10, discarded_steps=0,
                    agent_restarts=0)
    checkpoint = lightning_checkpoint(model, optimizer, counters, 3.0, 2, "abc")
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda params: torch.optim.Adam(params, lr=1e-3))
    learner.load_state_dict(checkpoint["state_dict"])  # strict: every key of the Learner, nothing else
    for a, b in zip(learner.model.parameters(), model.parameters()):
        assert torch.equal(a, b)
    learner.configure_optimizers().load_state_dict(checkpoint["optimizer_states"][0])
    assert checkpoint["callbacks"]["RunState"]["counters"] == counters
    assert checkpoint["pytorch-lightning_version"]


def test_a3c_losses_are_the_windows_mean_over_every_update(tmp_path):
    """The agents add each update's losses to running sums; a window reports their mean over its updates (one
    agent's last 5-step rollout, reported before, was mostly reward-free: value loss ~0 in 9 windows of 10)."""
    stats = torch.zeros(2, len(STATS), dtype=torch.float64)
    agents = type("Agents", (), dict(count=2, restarts=0, spec=dict(beta=0.01), snapshot=lambda self: dict(
        zip(STATS, stats.sum(0).tolist()))))()
    optimizer = torch.optim.SGD(MLPActorCritic((4,), 2, [8]).parameters(), lr=0.1)
    monitor = A3CMonitor(compose_config("algo=a3c", "game=cartpole"), tmp_path, agents, optimizer, {}, 0, 1)
    for agent, value_losses in ((0, [0.0, 0.0, 0.0]), (1, [4.0])):  # 4 updates: mean 1.0, the last one 4.0
        for value_loss in value_losses:
            stats[agent, S["value_loss_sum"]] += value_loss
            stats[agent, S["entropy_sum"]] += 0.5
            stats[agent, S["updates"]] += 1
            stats[agent, S["trained_steps"]] += 5
    m = monitor.window(agents.snapshot(), monitor.last_time + 1.0)
    assert m["loss/value_loss"] == 1.0 and m["loss/entropy"] == 0.5 and m["batch_size"] == 5.0 and m["tps"] == 4.0
    stats[1, S["value_loss_sum"]] += 2.0
    stats[1, S["updates"]] += 1
    stats[1, S["trained_steps"]] += 3
    m = monitor.window(agents.snapshot(), monitor.last_time + 1.0)   # only the new update counts
    assert m["loss/value_loss"] == 2.0 and m["batch_size"] == 3.0
    m = monitor.window(agents.snapshot(), monitor.last_time + 1.0)   # no update in this window
    assert math.isnan(m["loss/value_loss"]) and m["tps"] == 0.0


def test_parse_max_time():
    assert parse_max_time(None) is None
    assert parse_max_time("00:00:01:30") == 90.0
    assert parse_max_time("01:00:00:00") == 86400.0
    assert parse_max_time({"minutes": 2}) == 120.0
    assert parse_max_time(12) == 12.0
    with pytest.raises(ValueError, match="DD:HH:MM:SS"):
        parse_max_time("90s")


def test_a3c_config_composes():
    cfg = compose_config("algo=a3c", "game=cartpole")
    assert cfg.algo.name == "a3c"
    assert cfg.agents == usable_cores()   # one worker per core, as Mnih et al. (GA3C: 8 a core on a CPU)
    assert compose_config("algo=a3c", "agents=3").agents == 3
    assert compose_config("agents=3", "algo=a3c").agents == 3  # a command-line count wins in any order
    cfg = compose_config()
    assert cfg.algo.name == "ga3c"  # GA3C stays the default


# --- end to end ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a3c_learns_cartpole(tmp_path):
    """Rolling-100 >= 475 on CartPole with the game's preset at 8 agents (Adam 1e-3, t_max 16): the run stops
    itself at the score. Bound: 4 minutes of training (about a minute on an idle 2-core machine)."""
    run_dir = tmp_path / "a3c"
    started = time.monotonic()
    run_train(run_dir, "algo=a3c", "game=cartpole", "agents=8", "++stop_score=475", "trainer.max_time=00:00:04:00",
              "wandb.mode=offline", timeout=420)
    summary = read_summary(run_dir)
    print(f"A3C CartPole: {summary['score_mean_100']:.1f} after {summary['wall_seconds']:.0f} s, "
          f"{summary['frames']} frames (process wall {time.monotonic() - started:.0f} s)")
    assert summary["status"] == "finished"
    assert summary["score_mean_100"] >= 475, summary["stop_reason"]
    assert summary["stop_reason"].startswith("score_mean_100 reached")
    assert SUMMARY_KEYS <= set(summary), SUMMARY_KEYS - set(summary)
    assert summary["agents"] == 8 and summary["predictors"] == 0 and summary["trainers"] == 0
    assert summary["trained_steps"] + summary["discarded_steps"] == summary["produced_steps"]
    assert summary["updates"] == summary["rollouts"] > 0
    assert summary["prediction_batch_mean"] == 1.0
    assert summary["samples_per_s_run_mean"] > 0 and summary["fps_run_mean"] > 0
    assert list((run_dir / "wandb").glob("offline-run-*")), "no W&B run"
    assert (run_dir / "metrics.jsonl").read_text().count("\n") >= 2
    windows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for m in (m for m in windows if m["tps"] > 0):   # each window's mean losses over its updates
        assert 0 < m["loss/entropy"] <= math.log(2) + 1e-6 and math.isfinite(m["loss/value_loss"]), m
    # the checkpoint: Learner loads its weights; the greedy policy of those weights balances the pole
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    cfg = compose_config("algo=a3c", "game=cartpole")
    model = instantiate(cfg.net, obs_shape=(4,), num_actions=2)
    learner = Learner(model, instantiate(cfg.learner.optimizer))
    learner.load_state_dict(checkpoint["state_dict"])
    assert checkpoint["callbacks"]["RunState"]["counters"]["frames"] == summary["frames"]
    # The checkpoint holds trained weights, not the initial ones. The critic is the steady witness: after 475-step
    # episodes it values a start state near the discounted return (~1 / (1 - 0.99) = 100), an untrained critic near
    # 0. The policy is not held to 475: the score is the mean of the last 100 episodes, the checkpoint the last
    # weights, and A3C's CartPole policy swings within seconds (runs that stopped at 476.7 saved weights whose greedy
    # policy balanced 159-212 steps over 10 starts in one, 12-96 in another), so it is only held above chance.
    env = gym.make("CartPole-v1")
    lengths, start_values = [], []
    for seed in range(123, 133):
        obs, _ = env.reset(seed=seed)
        steps, done = 0, False
        with torch.no_grad():
            start_values.append(float(learner.model(torch.as_tensor(obs).unsqueeze(0))[1]))
            while not done:
                logits, _ = learner.model(torch.as_tensor(obs).unsqueeze(0))
                obs, _, terminated, truncated, _ = env.step(int(logits.argmax()))
                steps, done = steps + 1, terminated or truncated
        lengths.append(steps)
    assert min(start_values) >= 20, f"the checkpoint's critic values start states at {start_values}"
    untrained = instantiate(cfg.net, obs_shape=(4,), num_actions=2)
    with torch.no_grad():
        assert abs(float(untrained(torch.as_tensor(obs).unsqueeze(0))[1])) < 5  # the bar above is far from init
    assert sum(lengths) / len(lengths) >= 25, f"the checkpoint's greedy policy balanced the pole {lengths} steps"
    assert_no_leftovers(str(run_dir))


@pytest.mark.slow
def test_ga3c_resumes_from_an_a3c_checkpoint(tmp_path):
    """A GA3C run takes an A3C checkpoint (weights, optimizer, counters) through ckpt_path."""
    a3c_dir, ga3c_dir = tmp_path / "a3c", tmp_path / "ga3c"
    run_train(a3c_dir, "algo=a3c", "game=cartpole", "agents=2", "max_frames=3000", "wandb.mode=disabled",
              timeout=240)
    a3c = read_summary(a3c_dir)
    assert a3c["frames"] >= 3000 and a3c["status"] == "finished"
    run_train(ga3c_dir, "algo=ga3c", "game=cartpole", "agents=2", f"max_frames={a3c['frames'] + 3000}",
              f"ckpt_path={a3c_dir / 'checkpoints' / 'last.ckpt'}", "wandb.mode=disabled", timeout=240)
    ga3c = read_summary(ga3c_dir)
    assert ga3c["status"] == "finished"
    assert ga3c["frames"] >= a3c["frames"] + 3000      # counting went on from the A3C run's frames
    assert ga3c["episodes"] > a3c["episodes"]
    assert_no_leftovers(str(a3c_dir))
    assert_no_leftovers(str(ga3c_dir))


@pytest.mark.slow
def test_a3c_stops_cleanly_on_sigterm_and_resumes(tmp_path):
    """SIGTERM: final checkpoint and summary, no process left; ckpt_path resumes the counters."""
    import os

    run_dir = tmp_path / "a3c"
    env = dict(os.environ, GA3C_TEST_MARKER=str(run_dir))
    process = subprocess.Popen(train_command(run_dir, "algo=a3c", "game=cartpole", "agents=2", "max_frames=null",
                                             "wandb.mode=disabled", "learner.correction=vtrace"), cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: (run_dir / "summary.json").exists() and read_summary(run_dir)["frames"] > 500,
                          timeout=180), "no progress"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output[-3000:]
    assert "learner.correction=vtrace does not apply" in output   # said once, not silently ignored
    summary = read_summary(run_dir)
    assert summary["status"] == "finished" and summary["stop_reason"] == "SIGTERM"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert_no_leftovers(str(run_dir))
    resumed_dir = tmp_path / "resumed"
    run_train(resumed_dir, "algo=a3c", "game=cartpole", "agents=2", f"max_frames={summary['frames'] + 1000}",
              f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", "wandb.mode=disabled", timeout=240)
    resumed = read_summary(resumed_dir)
    assert resumed["frames"] >= summary["frames"] + 1000
    assert resumed["updates"] > summary["updates"]
    assert_no_leftovers(str(resumed_dir))


def test_a3c_bad_checkpoint_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.ckpt"
    bad.write_text("not a checkpoint")
    result = subprocess.run([sys.executable, str(REPO / "train.py"), "algo=a3c", "game=cartpole",
                             f"ckpt_path={bad}", f"hydra.run.dir={tmp_path / 'run'}", "wandb.mode=disabled"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "not a readable checkpoint" in result.stderr


def test_a3c_workers_follow_ga3cs_schedules_over_the_same_samples():
    """A3C's workers warm the learning rate up, decay it and anneal beta as GA3C's learner does, counted in
    trained samples over GA3C's batch (an A3C update trains one rollout, a GA3C update a batch)."""
    from ga3c.algos.a3c_agent import schedule_at

    spec = dict(beta=0.01, warmup_updates=1000, lr_decay_updates=0, lr_final_scale=0.0, beta_decay_updates=2000,
                beta_final=0.001, beta_decay_start=1000, samples_per_update=128)
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda params: torch.optim.SGD(params, lr=0.1), beta=0.01,
                      warmup_updates=1000, beta_decay_updates=2000, beta_final=0.001, beta_decay_start=1000)
    for update in (0, 499, 1000, 2000, 5000):
        scale, beta = schedule_at(spec, update * 128)
        assert scale == pytest.approx(learner.lr_scale(update)) and beta == pytest.approx(learner.beta_at(update))
    assert schedule_at(spec, 499 * 128)[0] == pytest.approx(0.5)
    assert schedule_at(dict(beta=0.02), 10**6) == (1.0, 0.02)   # no schedule: constant lr and beta
