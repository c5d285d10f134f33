"""The Atari games and the suite: every game file through the real ALE, game=atari for a game without a file,
FIRE on reset, random-play scoring, and the suite end to end on two tiny budgets."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf

from helpers import ATARI_GAMES, REPO, assert_no_leftovers, compose_config, read_summary, run_train
from ga3c.config import validate
from ga3c.env import make_env
from ga3c.tools.suite import game_row, included_row, markdown, random_play, score_at


def game_dict(*overrides: str) -> dict:
    cfg = compose_config(*overrides)
    validate(cfg)
    return OmegaConf.to_container(cfg.game, resolve=True)


@pytest.mark.parametrize("name", ATARI_GAMES)
def test_every_atari_game_runs_through_the_ale_with_the_shared_preprocessing(name):
    game = game_dict(f"game={name}")
    assert game["name"] == name and game["id"].startswith("ALE/") and game["atari"]
    assert game["frame_skip"] == 4 and game["terminal_on_life_loss"] and game["fire_on_reset"]
    assert game["thresholds"] == sorted(game["thresholds"]) and len(game["thresholds"]) >= 2
    assert game["anchors"]["a3c_4days"] is not None and game["anchors"]["human"] is not None
    env = make_env(game, seed=0)
    rng = np.random.default_rng(0)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        for _ in range(300):
            obs, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
            assert math.isfinite(reward) and "life_lost" in info
            if terminated or truncated:
                env.reset()
        assert obs.std() > 0  # a real screen, not a blank buffer
    finally:
        env.close()


def test_any_ale_game_without_a_file_composes_with_a_derived_name():
    game = game_dict("game=atari", "game.id=ALE/MsPacman-v5")
    assert game["name"] == "mspacman" and game["thresholds"] is None
    assert game_dict("game=atari", "game.id=ALE/Asterix-v5", "game.name=my-asterix")["name"] == "my-asterix"


@pytest.mark.slow
def test_game_atari_with_an_id_trains(tmp_path):
    run_train(tmp_path, "game=atari", "game.id=ALE/Asterix-v5", "agents=4", "max_frames=4000",
              "training_min_batch=20", "wandb.mode=disabled")
    summary = read_summary(tmp_path)
    assert summary["status"] == "finished" and summary["frames"] >= 4000 and summary["updates"] > 0
    assert_no_leftovers(str(tmp_path))


def lives_after_noops(fire_on_reset: bool, steps: int = 400) -> tuple[int, int, bool]:
    game = game_dict("game=breakout", f"game.fire_on_reset={str(fire_on_reset).lower()}")
    env = make_env(game, seed=3)
    try:
        env.reset(seed=3)
        start, life_lost = env.unwrapped.ale.lives(), False
        for _ in range(steps):  # NOOP only: the ball is served only by FIRE
            _, _, terminated, _, info = env.step(0)
            life_lost |= info["life_lost"]
            if terminated:
                break
        return start, env.unwrapped.ale.lives(), life_lost
    finally:
        env.close()


def test_fire_on_reset_serves_the_ball_after_a_reset_and_after_each_lost_life():
    start, end, life_lost = lives_after_noops(True)
    assert life_lost and end <= start - 2   # served again after the first lost life, so lost again
    start, end, life_lost = lives_after_noops(False)
    assert (end, life_lost) == (start, False)   # never served: no life is ever lost


def test_random_play_scores_the_probe_game_at_chance():
    """CueNow: 20 steps, 4 actions, +1 when the action names the cue: a uniform policy scores 5 on average."""
    result = random_play(game_dict("game=cue"), episodes=200, seed=1)
    assert result["episodes"] == 200 and len(result["scores"]) == 200 and set(result["lengths"]) == {20}
    assert abs(result["mean"] - 5.0) < 4 * result["sem"] and 0.05 < result["sem"] < 0.3
    assert random_play(game_dict("game=cue"), episodes=200, seed=1)["scores"] == result["scores"]  # seeded


def write_run(run_dir, rows, fps=1000.0):
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for wall, frames, score in rows:
            f.write(json.dumps(dict(wall_seconds=wall, frames=frames, score_mean_100=score)) + "\n")
    (run_dir / "summary.json").write_text(json.dumps(dict(status="finished", fps_run_mean=fps)))


def test_a_game_row_holds_anchors_thresholds_scores_at_minutes_and_normalised_scores(tmp_path):
    game = dict(name="g", id="ALE/G-v5", thresholds=[10, 50], anchors=dict(human=110.0, a3c_4days=40.0, a2c_40m=80.0))
    write_run(tmp_path / "s0", [(60, 1e5, 0.0), (900, 3e6, 12.0), (1800, 6e6, 45.0), (3600, 12e6, 60.0)])
    write_run(tmp_path / "s1", [(60, 1e5, 0.0), (900, 3e6, 8.0), (1800, 6e6, 30.0), (3600, 12e6, 50.0)])
    row = game_row(game, dict(mean=10.0, episodes=30), {0: tmp_path / "s0", 1: tmp_path / "s1"},
                   {0: dict(score_mean=70.0), 1: dict(score_mean=50.0)}, [15, 30, 60])
    assert row["at"] == {"15": 10.0, "30": 37.5, "60": 55.0} and row["final"] == 55.0 and row["eval"] == 60.0
    assert row["hns"] == pytest.approx((55 - 10) / 100) and row["hns_eval"] == pytest.approx(0.5)
    assert row["reach"]["10"] == (1350.0, 4.5e6)          # seed 0 at 900 s, seed 1 at 1800 s: median
    assert row["reach"]["CPU A3C 4 d"] == (2700.0, 9e6)   # both got there
    assert row["reach"]["A2C 40 M"] == (math.inf, math.inf) and row["beat_a2c_40m"] is False
    assert row["beat_a3c_4days"] is True and row["left_random"] is True and row["fps"] == 1000.0
    assert score_at(row["curves"][0], 60 * 90) != score_at(row["curves"][0], 60 * 90)  # NaN past the run's end
    table = markdown([row], "t", [15, 30, 60], 30)
    assert "| g | 2 | 10.0 | 110.0 | 40.0 | 80.0 | 10.0 | 37.5 | 55.0 |" in table
    assert "CPU A3C's four-day score within the budget: 1 of 1" in table
    assert "Hosts (minutes and frames/s depend on the CPU; frames do not): host not recorded (g)." in table
    assert "that many frames take: g 11.1 h" in table   # 40 M frames at 1,000 frames/s, A2C's anchor not reached
    row["host"] = dict(cpu_model="AMD EPYC 7B13", cores=2, native_bf16=False)
    assert "AMD EPYC 7B13, 2 cores, no native bf16 (g)" in markdown([row], "t", [15, 30, 60], 30)
    row["host"] = dict(cpu_model="AMD EPYC", cores=2)   # a run from before manifests recorded the CPU's flags
    assert "AMD EPYC, 2 cores, bf16 not recorded (g)" in markdown([row], "t", [15, 30, 60], 30)
    assert "within 20 % of a line" not in table   # 55 is 37 % above 40 and 31 % below 80
    close = dict(row, final=70.0)
    assert ("Ended within 20 % of a line on fewer than 3 seeds (more seeds settle these): g (A2C 40 M: 70.0 against "
            "80.0, 2 seeds).") in markdown([close], "t", [15, 30, 60], 30)
    assert "within 20 % of a line" not in markdown([dict(close, seeds=3)], "t", [15, 30, 60], 30)
    one_eval = game_row(game, dict(mean=10.0, episodes=30), {0: tmp_path / "s0", 1: tmp_path / "s1"},
                        {1: dict(score_mean=50.0)}, [15, 30, 60])   # seed 0 kept no checkpoint
    assert (row["eval_seeds"], one_eval["eval"], one_eval["eval_seeds"]) == (2, 50.0, 1)
    assert one_eval["hns_eval"] != one_eval["hns_eval"]   # not normalised as if it were the row's
    assert "| 55.0 | 50.0 (1 of 2 seeds) |" in markdown([one_eval], "t", [15, 30, 60], 30)
    assert "| 55.0 | 60.0 |" in table


def test_a_game_that_stays_at_random_play_is_reported_so(tmp_path):
    game = dict(name="g", id="ALE/G-v5", thresholds=[10], anchors=dict(human=None, a3c_4days=110.0, a2c_40m=None))
    write_run(tmp_path / "s0", [(60, 1e5, 10.0), (3600, 12e6, 19.0)])   # 9 % of the way from 10 to 110
    row = game_row(game, dict(mean=10.0, episodes=30), {0: tmp_path / "s0"}, {}, [60])
    assert row["left_random"] is False and row["hns"] != row["hns"] and row["beat_a2c_40m"] is None


def test_a_game_folder_without_a_table_row_joins_the_table_as_a_finished_run(tmp_path):
    # a game measured on its own (results/suite/GAME: the files the suite keeps, no suite.json row) joins a table
    game = dict(name="g", id="ALE/G-v5", thresholds=[10], anchors=dict(human=110.0, a3c_4days=40.0, a2c_40m=None))
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "seed0_metrics.csv").write_text("wall_seconds,frames,score_mean_100,fps\n60,1e5,,1666\n"
                                               "900,3e6,12.0,3333\n3600,12e6,50.0,3333\n")
    (folder / "random.json").write_text(json.dumps(dict(mean=10.0, episodes=30)))
    (folder / "seed0_eval.json").write_text(json.dumps(dict(score_mean=44.0)))
    host = dict(cpu_model="AMD EPYC", cores=2, native_bf16=False)
    (folder / "manifest.json").write_text(json.dumps(dict(host=host, frames_per_second={"ga3c": {"0": 3210.0}})))
    (tmp_path / "suite.json").write_text(json.dumps([dict(game="other")]))   # a table without this game's row
    row = included_row(game, [tmp_path / "missing", tmp_path], [15, 60])
    assert (row["final"], row["eval"], row["random"], row["fps"], row["host"]) == (50.0, 44.0, 10.0, 3210.0, host)
    assert row["at"] == {"15": 12.0, "60": 50.0} and row["reach"]["10"] == (900, 3e6)
    assert row["reach"]["CPU A3C 4 d"] == (3600, 12e6) and row["beat_a3c_4days"] and row["left_random"]
    assert row["curves"][0]["frames"] == [1e5, 3e6, 12e6] and row["hns"] == 0.4
    assert included_row(dict(name="h"), [tmp_path], [15]) is None
    # the table's row stands for the folder while it is of the same runs, and not once they are replaced
    (tmp_path / "suite.json").write_text(json.dumps([dict(row, curves=None, final=49.0)]))
    assert included_row(game, [tmp_path], [15, 60])["final"] == 49.0
    (folder / "seed0_metrics.csv").write_text("wall_seconds,frames,score_mean_100,fps\n60,1e5,,1666\n"
                                               "3600,13e6,70.0,3611\n")
    replaced = included_row(game, [tmp_path], [15, 60])
    assert (replaced["final"], replaced["frames"], replaced["curves"][0]["frames"]) == (70.0, 13e6, [1e5, 13e6])


def test_a_game_whose_seeds_ran_on_two_machines_names_each_machines_seeds(tmp_path):
    # seeds added later on another host (learncurve seeds=[1]): the manifest's run_hosts name each seed's machine
    game = dict(name="g", id="ALE/G-v5", thresholds=[10], anchors=dict(human=110.0, a3c_4days=40.0, a2c_40m=None))
    folder = tmp_path / "g"
    folder.mkdir()
    for seed in (0, 1):
        (folder / f"seed{seed}_metrics.csv").write_text("wall_seconds,frames,score_mean_100\n3600,12e6,50.0\n")
    epyc = dict(cpu_model="AMD EPYC", cores=2, native_bf16=False)
    xeon = dict(cpu_model="Xeon", cores=2, native_bf16=True)
    (folder / "manifest.json").write_text(json.dumps(dict(host=epyc, run_hosts={"ga3c": {"0": epyc, "1": xeon}})))
    row = included_row(game, [tmp_path], [60])
    assert row["seeds"] == 2 and row["seed_hosts"] == {0: epyc, 1: xeon}
    assert ("Hosts (minutes and frames/s depend on the CPU; frames do not): AMD EPYC, 2 cores, no native bf16 "
            "(g seed 0); Xeon, 2 cores, native bf16 (g seed 1).") in markdown([row], "t", [60], 30)
    (folder / "manifest.json").write_text(json.dumps(dict(host=epyc, run_hosts={"ga3c": {"0": epyc, "1": epyc}})))
    row = included_row(game, [tmp_path], [60])
    assert "seed_hosts" not in row and "AMD EPYC, 2 cores, no native bf16 (g)." in markdown([row], "t", [60], 30)


def test_suite_bad_game_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ga3c.tools.suite", "games=[pong,pongg]", f"hydra.run.dir={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ga3c: error: games: pongg: there is no option"), lines
    assert not (tmp_path / "pong").exists()   # nothing ran


@pytest.mark.slow
def test_suite_end_to_end_on_two_tiny_budgets(tmp_path):
    command = [sys.executable, "-m", "ga3c.tools.suite", "games=[cartpole,cue]", "seeds=1", "minutes=0.15",
               "suite.random_episodes=30", "suite.eval_episodes=3", "wandb.group=tiny-suite", f"hydra.run.dir={tmp_path}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**__import__("os").environ, "GA3C_TEST_MARKER": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["game"]: r for r in json.loads((tmp_path / "suite.json").read_text())}
    assert set(rows) == {"cartpole", "cue"}
    assert rows["cue"]["random_episodes"] == 30 and 3.5 < rows["cue"]["random"] < 6.5
    assert 10 < rows["cartpole"]["random"] < 40   # a uniform policy holds the pole ~22 steps
    for row in rows.values():
        assert row["seeds"] == 1 and row["frames"] > 0 and row["fps"] > 0 and row["eval"] == row["eval"]
    scores = json.loads((tmp_path / "cue" / "ga3c" / "seed0" / "play-sampled" / "scores.json").read_text())
    assert len(scores["episodes"]) == 3
    for name in ("suite.md", "suite.csv", "suite_time.png", "suite_frames.png", "cue/learncurve.md"):
        assert (tmp_path / name).stat().st_size > 0, name
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["command"].startswith("python -m ga3c.tools.suite ") and "games=[cartpole,cue]" in manifest["command"]
    assert manifest["games"] == ["cartpole", "cue"]
    assert {"cpu_model", "cores", "native_bf16", "torch"} <= set(manifest["host"]) and manifest["commit"]
    assert f"{manifest['host']['cpu_model']}, {manifest['host']['cores']} cores" in (tmp_path / "suite.md").read_text()
    assert list((tmp_path / "wandb").glob("offline-run-*")), "the suite's W&B run"
    run_manifest = json.loads((tmp_path / "cue" / "ga3c" / "seed0" / "manifest.json").read_text())
    assert "wandb.group=tiny-suite" in run_manifest["command"] and "wandb.group=suite-" not in run_manifest["command"]
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=200)   # resumes: runs nothing
    assert again.returncode == 0 and "not run again" in (tmp_path / "cue" / "learncurve.log").read_text()
    assert ": random play, " not in again.stdout + again.stderr and "evaluating" not in again.stdout + again.stderr
    # another table that takes both games' rows from this one (suite.include): nothing is run or measured
    assert (tmp_path / "cue" / "seed0_metrics.csv").stat().st_size > 0
    joined = tmp_path / "joined"
    merged = subprocess.run([*command[:-1], "suite.analyze_only=true", f"suite.include=[{tmp_path}]",
                             f"hydra.run.dir={joined}"], cwd=REPO, capture_output=True, text=True, timeout=200)
    assert merged.returncode == 0, merged.stdout[-3000:] + merged.stderr[-3000:]
    assert ": random play, " not in merged.stdout + merged.stderr and not (joined / "cue").exists()
    assert json.loads((joined / "suite.json").read_text()) == json.loads((tmp_path / "suite.json").read_text())
    from ga3c.tools.learncurve import read_curve
    from ga3c.tools.suite import included_row
    drawn = included_row(dict(name="cue"), [tmp_path], [15, 30, 60])["curves"][0]     # the curve the joined table's grid draws
    assert drawn["frames"] == read_curve(tmp_path / "cue" / "ga3c" / "seed0")["frames"]
    assert_no_leftovers(str(tmp_path))
