"""The whole pipeline learns what it sees: probe games (ga3c/probe_envs.py) through agents, shared memory,
predictors, trainers and the learner, within seconds; and the same games with one part shifted by one step
(tests/faults.py, as a misalignment bug would) never get past chance."""
from __future__ import annotations

import pytest

from helpers import assert_no_leftovers, read_summary, run_train

LEARNED, CHANCE_CEILING = 18, 9   # of 20 steps per episode; a random policy scores 5


@pytest.mark.slow
@pytest.mark.parametrize("game_id, learner", [
    ("ga3c.probe_envs:CueNow-v0", ()), ("ga3c.probe_envs:CueStack-v0", ()),
    # each batch trained 3 times with PPO's clipped surrogate (the later passes are off-policy: the ratio must
    # be taken against the behaviour policy each sample was acted with)
    ("ga3c.probe_envs:CueStack-v0", ("learner.epochs=3", "learner.ppo_clip=0.2"))])
def test_pipeline_learns_the_cue_it_sees(tmp_path, game_id, learner):
    """CueNow: the rewarded cue is in the newest frame. CueStack: only in a frame 2 steps back, with a fresh
    distractor cue in the newest: it is learned only if the stack arrives whole and in step with the actions."""
    run_train(tmp_path, "game=cue", f"game.id={game_id}", f"stop_score={LEARNED}", "max_frames=150000",
              "wandb.mode=disabled", *learner, timeout=240)
    summary = read_summary(tmp_path)
    assert summary["score_mean_100"] >= LEARNED, summary
    assert summary["stop_reason"].startswith("score_mean_100 reached")
    if learner:
        assert 0 <= summary["ppo_clipped_share"] <= 1
        assert summary["updates"] >= 3 * summary["trained_steps"] / 256   # 3 updates per batch of at most 256
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("part", ["Obs", "Reward", "Action"])
def test_a_one_step_misalignment_never_gets_past_chance(tmp_path, part):
    """The same game, 5x the frames the aligned pipeline needs, with observations, rewards or actions one step
    late: the probe has teeth."""
    run_train(tmp_path, "game=cue", f"game.id=tests.faults:CueLate{part}-v0", "max_frames=25000",
              "wandb.mode=disabled", timeout=240)
    summary = read_summary(tmp_path)
    assert summary["episodes"] >= 500 and summary["score_mean_100"] <= CHANCE_CEILING, summary


def test_the_recall_probe_hides_its_cue_from_the_frame_stack():
    """CueRecall (the probe for a recurrent policy): at every decision step the frame stack is blank, so a
    feed-forward policy is at chance (rounds / actions = 1 of 4), while a policy that remembers the cue scores 4."""
    import gymnasium as gym
    import numpy as np

    import ga3c.probe_envs  # noqa: F401  registers the probe ids
    from ga3c.tools.suite import random_play

    env = gym.make("ga3c.probe_envs:CueRecall-v0")
    obs, _ = env.reset(seed=0)
    remembered, total, decisions, done = None, 0.0, 0, False
    while not done:
        if obs[-1].any():
            remembered = int(np.argmax(obs[-1][:, 0]) // env.unwrapped.band)
        decision = env.unwrapped.steps % (env.unwrapped.delay + 2) == env.unwrapped.delay + 1
        if decision:
            assert not obs.any(), "the cue is still in the stack at a decision step"
            decisions += 1
        obs, reward, done, _, _ = env.step(remembered)
        total += reward
    assert (decisions, total) == (4, 4.0)
    chance = random_play(dict(name="recall", id="ga3c.probe_envs:CueRecall-v0", atari=False), episodes=400, seed=2)
    assert abs(chance["mean"] - 1.0) < 4 * chance["sem"]
