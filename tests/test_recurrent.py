"""The recurrent policy (net=lstm) through the whole pipeline: agents, shared memory (each agent's state beside
its observations), predictors, trainers, the learner's unroll, V-trace; and the A3C baseline with it."""
from __future__ import annotations

import json
import math

import pytest

from helpers import assert_no_leftovers, read_summary, run_train

RECALL = "game.id=ga3c.probe_envs:CueRecall-v0"   # 4 rounds: a remembering policy scores 4, chance is 1


def window_rhos(run_dir) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["vtrace_rho_mean"] for r in rows if isinstance(r.get("vtrace_rho_mean"), float)
            and not math.isnan(r["vtrace_rho_mean"])]


@pytest.mark.slow
def test_net_lstm_learns_the_recall_probe_and_the_feed_forward_net_cannot(tmp_path):
    run_train(tmp_path / "lstm", "game=cue", RECALL, "net=lstm", "stop_score=3.8", "max_frames=200000",
              "wandb.mode=disabled", timeout=240)
    summary = read_summary(tmp_path / "lstm")
    assert summary["score_mean_100"] >= 3.8 and summary["stop_reason"].startswith("score_mean_100 reached"), summary
    # Resumed from its checkpoint, the recurrent net goes on remembering: over 300+ new episodes (about 3 score
    # windows; a net that lost its weights or its state handling drops to chance, 1) and on the checkpoint's counts.
    resumed = tmp_path / "lstm-resumed"
    run_train(resumed, "game=cue", RECALL, "net=lstm", f"ckpt_path={tmp_path / 'lstm' / 'checkpoints' / 'last.ckpt'}",
              f"max_frames={summary['frames'] + 10_000}", "wandb.mode=disabled", timeout=240)
    again = read_summary(resumed)
    assert again["status"] == "finished" and again["frames"] >= summary["frames"] + 10_000, again
    assert again["episodes"] - summary["episodes"] >= 300, (summary["episodes"], again["episodes"])
    assert again["score_mean_100"] >= 3.5, again
    run_train(tmp_path / "ff", "game=cue", RECALL, "max_frames=30000", "wandb.mode=disabled", timeout=240)
    assert read_summary(tmp_path / "ff")["score_mean_100"] < 1.6   # chance: the cue has left the frame stack
    assert_no_leftovers(str(tmp_path / "lstm"))


@pytest.mark.slow
def test_the_learners_unroll_replays_what_the_agents_acted_through_count_changes_and_a_replacement(tmp_path):
    """With the model held still (lr 1e-12), the learner's unroll of each rollout from its start state must give
    every action the very log-probability the predictor acted with: V-trace's clipped ratios are then all 1.
    They are not if a state is not carried from step to step, not zeroed where an episode begins, or paired with
    another rollout; here while the auto-tuner adds and removes agents and a failed agent is replaced."""
    run_train(tmp_path, "game=cartpole", "game.id=tests.faults:Faulty-v0", "net=lstm", "net.core=32", "net.hidden=32", "net.init=torch",
              "learner.optimizer.lr=1e-12", "learner.correction=vtrace", "autotune=ga3c", "autotune.wait_seconds=1", "autotune.period_seconds=2",
              "predictors=1", "trainers=1", "autotune.max_predictors=1", "autotune.max_trainers=1",  # every step moves N_A
              "max_frames=60000", "wandb.mode=disabled", "log.every_seconds=1",  # >= 5 windows on a fast host
              env={"GA3C_FAULT_MARKER": str(tmp_path / "fault-fired"), "GA3C_FAULT_STEP": "60"}, timeout=240)
    summary = read_summary(tmp_path)
    assert summary["agent_restarts"] == 1 and summary["status"] == "finished", summary
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len({r["agents"] for r in rows}) > 1, "the auto-tuner changed no count"
    rhos = window_rhos(tmp_path)
    assert len(rhos) >= 5 and min(rhos) > 0.9999, rhos
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_a3c_with_net_lstm_learns_the_recall_probe(tmp_path):
    run_train(tmp_path, "game=cue", RECALL, "net=lstm", "algo=a3c", "stop_score=3.5", "max_frames=60000",
              "wandb.mode=disabled", timeout=240)
    summary = read_summary(tmp_path)
    assert summary["score_mean_100"] >= 3.5, summary
    assert_no_leftovers(str(tmp_path))
