"""Evaluating a checkpoint (python -m ga3c.tools.play) and the training-time gameplay video."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import pytest
import torch

from ga3c.tools.play import PlayError, main, parse_args
from helpers import REPO, assert_no_leftovers, read_summary, run_train


def play(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "ga3c.tools.play", *args], cwd=REPO, capture_output=True, text=True,
                            timeout=timeout, env=dict(os.environ, **(env or {})))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def play_here(capsys, *args: str) -> str:
    """ga3c.tools.play in this process (fast); returns what it printed."""
    assert main(list(args)) == 0
    return capsys.readouterr().out


def mp4_frames(path: Path) -> int:
    reader = imageio.get_reader(str(path))
    try:
        return sum(1 for _ in reader)
    finally:
        reader.close()


def check_table(stdout: str, scores: dict) -> None:
    """The printed summary row is the statistics of the printed episode scores."""
    episodes = [e["score"] for e in scores["episodes"]]
    assert scores["score_mean"] == pytest.approx(statistics.fmean(episodes))
    assert scores["score_median"] == pytest.approx(statistics.median(episodes))
    assert (scores["score_min"], scores["score_max"]) == (min(episodes), max(episodes))
    assert "| episodes | mean | median | min | max | std |" in stdout
    row = f"| {len(episodes)} | {statistics.fmean(episodes):.2f} | {statistics.median(episodes):.2f} | "
    assert row in stdout, stdout
    for i, score in enumerate(episodes):
        assert f"| {i + 1} | {score:g} |" in stdout


@pytest.fixture
def untrained_run(tmp_path) -> Path:
    """A run directory as train.py leaves it (.hydra/overrides.yaml, checkpoints/last.ckpt), with an
    untrained CartPole network: fast, and enough to test the plumbing."""
    from ga3c.networks import MLPActorCritic

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- game=cartpole\n- hydra.run.dir=somewhere\n")
    (run / "checkpoints").mkdir()
    model = MLPActorCritic(obs_shape=(4,), num_actions=2, hidden=[64, 64])
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "global_step": 7},
               run / "checkpoints" / "last.ckpt")
    return run


def test_play_untrained_cartpole_checkpoint_writes_mp4_and_table(untrained_run, capsys):
    stdout = play_here(capsys, f"ckpt_path={untrained_run / 'checkpoints' / 'last.ckpt'}", "episodes=3",
                       "greedy=true", "wandb.mode=disabled")
    out = untrained_run / "play-greedy"
    scores = json.loads((out / "scores.json").read_text())
    assert scores["game"] == "cartpole" and scores["greedy"] is True and scores["global_step"] == 7
    assert len(scores["episodes"]) == 3
    check_table(stdout, scores)
    best = scores["episodes"][scores["best_episode"] - 1]
    assert best["score"] == scores["score_max"]
    # CartPole gives +1 a step: the best episode's video has its reset frame plus one frame per step
    assert mp4_frames(out / "best_episode.mp4") == best["steps"] + 1
    assert not (out / ".episodes").exists()
    # no machine's paths: both relative to the folder scores.json is in
    assert scores["ckpt_path"] == "../checkpoints/last.ckpt" and scores["video"] == "best_episode.mp4"


def test_play_sampled_actions_max_steps_and_run_dir_argument(untrained_run, tmp_path, capsys):
    out = tmp_path / "eval"
    play_here(capsys, f"ckpt_path={untrained_run}", "episodes=2", "max_steps=5", f"output_dir={out}", "video=false",
         "wandb.mode=disabled")
    scores = json.loads((out / "scores.json").read_text())
    assert scores["greedy"] is False
    assert all(e["steps"] <= 5 for e in scores["episodes"])
    assert not (out / "best_episode.mp4").exists() and scores["video"] is None


def test_play_argument_errors(untrained_run, tmp_path, capsys):
    for argv, message in (([], "ckpt_path is required"), (["ckpt_path=x", "episodes=0"], "episodes must be >= 1"),
                          (["ckpt_path=x", "greedy=maybe"], "greedy must be true or false"),
                          (["episodes"], "key=value")):
        with pytest.raises(PlayError, match=message):
            parse_args(argv)
    assert main([f"ckpt_path={tmp_path / 'nope.ckpt'}"]) == 2
    assert "no checkpoint file" in capsys.readouterr().err
    assert main([f"ckpt_path={untrained_run}", "game=pong", "net=mlp", "wandb.mode=disabled"]) == 2
    assert "net: an MLP needs vector observations" in capsys.readouterr().err
    assert main([f"ckpt_path={untrained_run}", "game=pong", "wandb.mode=disabled"]) == 2   # conv net, mlp weights
    assert "does not fit game=pong" in capsys.readouterr().err


@pytest.mark.slow
def test_trained_cartpole_checkpoint_plays_better_than_chance_with_training_video(tmp_path):
    """Train CartPole for real (with a training video every ~2 s), then evaluate its checkpoint with W&B offline."""
    run = tmp_path / "run"
    run_train(run, "game=cartpole", "max_frames=60000", "video.every_minutes=0.03", "video.max_steps=300",
              "wandb.mode=offline")
    assert read_summary(run)["status"] == "finished"
    videos = sorted((run / "videos").glob("*.mp4"))
    assert videos, "training wrote no gameplay video"
    assert all(mp4_frames(v) >= 2 for v in videos)
    assert_no_leftovers(str(run))
    result = play(f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "episodes=5", env={"WANDB_SILENT": "true"})
    out = run / "play-sampled"
    scores = json.loads((out / "scores.json").read_text())
    check_table(result.stdout, scores)
    assert mp4_frames(out / "best_episode.mp4") > 1
    # a uniformly random CartPole policy averages ~22 steps; 20k frames of training do far better
    assert scores["score_mean"] > 40, scores
    assert list((out / "wandb").glob("offline-run-*")), "play logs its results to W&B (offline here)"


def test_a_training_video_that_played_its_max_steps_is_kept_when_training_ends_meanwhile(tmp_path):
    """TrainingVideo keeps a video that reached video.max_steps even if the run ended while it was recorded; only
    one cut short by the end of training is dropped."""
    from types import SimpleNamespace

    from ga3c.networks import MLPActorCritic
    from ga3c.video import TrainingVideo

    game = dict(id="CartPole-v1", atari=False, frame_skip=1, max_episode_frames=None)
    # training ends (the stop event's nth check) once a 5-step video is whole, and on a long one's 3rd step
    for max_steps, stop_at, kept in ((5, 6, True), (10_000, 3, False)):
        video = TrainingVideo(SimpleNamespace(frames=lambda: 0), game, tmp_path / str(max_steps), 1.0,
                              max_steps=max_steps)
        model = MLPActorCritic((4,), 2, [8])
        calls = []
        video.stop.is_set = lambda: calls.append(1) or len(calls) >= stop_at   # noqa: B023 - used in this pass
        video._record(model, 0)
        assert bool(list((tmp_path / str(max_steps) / "videos").glob("*.mp4"))) is kept, (max_steps, kept)
        assert len(video.pending) == int(kept)
