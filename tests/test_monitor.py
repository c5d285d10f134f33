"""The monitor's score window: means, stop_score, and its carry-over through a checkpoint."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch

from ga3c.monitor import Counters, Monitor, ScoreWindow
from ga3c.networks import MLPActorCritic


def test_score_window_means_and_stop_score():
    """score_mean_100 is the mean of the last `size` episodes (NaN before the first); stop_score counts only
    on a full window, is reported once, with the run's clock at that episode."""
    window = ScoreWindow(3, stop_score=5.0, clock=lambda: 42.0)
    assert all(np.isnan(window.means()))
    assert [window.add(s, 10) for s in (9.0, 9.0)] == [False, False]   # mean 9 but the window is not full
    assert window.means() == (9.0, 10.0) and window.seconds_to_stop_score is None
    assert window.add(0.0, 40) is True and window.seconds_to_stop_score == 42.0   # (9 + 9 + 0) / 3 = 6 >= 5
    assert window.means() == (6.0, 20.0)
    assert ScoreWindow(2, None, lambda: 0.0).add(1e9, 1) is False   # no stop_score: never stops


def test_episodes_ending_while_the_run_stops_at_stop_score_leave_the_reported_score(tmp_path):
    """stop_score reached -> the run stops; episodes that end during the stop (worse ones, here) are counted
    but must not pull the reported score below the stop_score its stop_reason names (A3C's CartPole test saw
    472.3 with 'reached stop_score=475')."""
    from omegaconf import OmegaConf

    from ga3c.algos.a3c_monitor import A3CMonitor

    a3c = A3CMonitor(OmegaConf.create({"log": {"score_window": 3}, "stop_score": 10}), tmp_path,
                     SimpleNamespace(snapshot=dict), None, {}, 0, 1)
    assert [a3c.episode(10.0, 5) for _ in range(3)] == [False, False, True]
    assert a3c.episode(0.0, 5) is False and list(a3c.score_window.scores) == [10.0] * 3

    stops = []
    server = SimpleNamespace(frames=lambda: 0, all_predictors=[], all_trainers=[], counters=Counters(),
                             learner=SimpleNamespace(version=0, busy_seconds=0.0), request_stop=stops.append)
    ga3c = Monitor(server, tmp_path, 5.0, False, 3, 10)
    for score in (10.0, 10.0, 10.0, 0.0, 0.0):
        ga3c.record_episode(score, 5)
    assert list(ga3c.score_window.scores) == [10.0] * 3 and server.counters["episodes"] == 5
    assert stops == ["score_mean_100 reached stop_score=10"]


def test_a_resumed_run_goes_on_with_the_score_window_of_its_checkpoint(tmp_path):
    """GA3C's RunState and A3C's checkpoint save the window's episodes; a run resumed from either (GA3C from an
    A3C checkpoint too) reports score_mean_100 over them at once instead of starting empty."""
    from omegaconf import OmegaConf

    from ga3c.algos.a3c_monitor import A3CMonitor
    from ga3c.algos.a3c_model import lightning_checkpoint
    from ga3c.algos.ga3c import RunState
    from ga3c.runtime import checkpoint_run_state

    def ga3c_run(window: int):
        server = SimpleNamespace(frames=lambda: 0, all_predictors=[], all_trainers=[], counters=Counters(),
                                 learner=SimpleNamespace(version=0, busy_seconds=0.0), request_stop=print,
                                 counter_totals=dict, seed_counter=0)
        monitor = Monitor(server, tmp_path, 5.0, False, window, None)
        return RunState(server, monitor, None), monitor

    first, first_monitor = ga3c_run(3)
    for score, length in ((1.0, 10), (2.0, 20), (3.0, 30), (4.0, 40)):
        first_monitor.record_episode(score, length)
    state = first.state_dict()
    assert state["score_window"] == dict(scores=[2.0, 3.0, 4.0], lengths=[20, 30, 40])

    resumed, resumed_monitor = ga3c_run(3)
    resumed.load_state_dict(state)
    assert resumed_monitor.score_window.means() == (3.0, 30.0)
    assert "score_window" not in resumed.extra             # not handed on as another component's state
    smaller, smaller_monitor = ga3c_run(2)                  # a smaller log.score_window keeps the latest
    smaller.load_state_dict(state)
    assert smaller_monitor.score_window.means() == (3.5, 35.0)

    model, a3c_window = MLPActorCritic((4,), 2, [8]), dict(scores=[5.0, 7.0], lengths=[50, 70])
    a3c_checkpoint = lightning_checkpoint(model, torch.optim.Adam(model.parameters()), {}, 1.0, 1, None, a3c_window)
    a3c = A3CMonitor(OmegaConf.create({"log": {"score_window": 3}, "stop_score": None}), tmp_path,
                     SimpleNamespace(snapshot=dict), None, checkpoint_run_state(a3c_checkpoint), 0, 1)
    assert a3c.score_window.means() == (6.0, 60.0) and a3c.score_window.state_dict() == a3c_window
    from_a3c, from_a3c_monitor = ga3c_run(3)
    from_a3c.load_state_dict(checkpoint_run_state(a3c_checkpoint))
    assert from_a3c_monitor.score_window.means() == (6.0, 60.0)


def test_collapse_watch_warns_on_an_entropy_collapse_and_a_fallen_score_and_clears():
    """The CartPole collapse: a rolling score that reached 500 falls to 9 and the policy's entropy to ~0. Both
    rules fire, the warning names them, and it clears once the run recovers; the noise of a window still at
    random play (a gain smaller than the first window's spread) never counts as a fall."""
    from ga3c.monitor import CollapseWatch

    watch = CollapseWatch(entropy_floor=0.01, score_drop=0.5, num_actions=2)
    window = ScoreWindow(4, None, lambda: 0.0)

    def window_of(*scores, entropy=0.5):
        for score in scores:
            window.add(score, int(score))
        return watch.observe({"score_mean_100": window.means()[0], "loss/entropy": entropy}, window)

    m = window_of(20.0, 10.0)                      # not full yet: no baseline, nothing to say
    assert m["warning"] == "" and math.isnan(m["score_best_100"])
    m = window_of(30.0, 20.0)                      # first full window: mean 20, spread 8.2
    assert m["warning"] == ""
    m = window_of(26.0, 26.0)                      # 25.5: a gain within that spread ...
    m = window_of(2.0, 2.0)                        # ... lost again (14): still random play's noise
    assert (m["score_best_100"], m["warning/score_drop"], m["warning/entropy_floor"]) == (25.5, 0, 0)
    m = window_of(500.0, 500.0, 500.0, 500.0)      # learned: best 500
    assert m["score_best_100"] == 500.0 and m["warning"] == ""
    m = window_of(300.0, 300.0, 300.0, 300.0)      # lost 200 of a gain of 480: under half, no warning
    assert m["warning/score_drop"] == 0
    m = window_of(9.0, 9.0, 9.0, 9.0, entropy=0.001)   # collapsed: both rules
    assert (m["warning/score_drop"], m["warning/entropy_floor"]) == (1, 1)
    assert "entropy 0.0010 under the floor 0.0069" in m["warning"] and "fell from its best 500.00" in m["warning"]
    m = window_of(480.0, 490.0, 500.0, 500.0)      # recovered
    assert m["warning"] == "" and watch.active == ""
    summed = CollapseWatch(entropy_floor=0.01, score_drop=0.0, num_actions=2, summed=True)   # reduction=sum
    assert summed.observe({"loss/entropy": 0.6, "batch_size": 128}, window)["warning/entropy_floor"] == 1
    assert summed.observe({"loss/entropy": 60.0, "batch_size": 128}, window)["warning/entropy_floor"] == 0
    off = CollapseWatch(entropy_floor=0.0, score_drop=0.0, num_actions=6)   # 0 turns each rule off
    assert off.observe({"score_mean_100": 9.0, "loss/entropy": 0.0}, window)["warning"] == ""


def test_the_collapse_warning_reaches_the_progress_line(tmp_path, capsys):
    """A window with a warning prints it at the end of the progress line."""
    from ga3c.monitor import RunOutputs

    m = dict(frames=1, fps=1.0, pps=1.0, tps=1.0, score_mean_100=9.0, episodes=3, agents=1, predictors=1,
             trainers=1, policy_lag_mean=0.0, warning="policy entropy 0.0000 under the floor 0.0069")
    RunOutputs(tmp_path, True, "ga3c").print_progress(m)
    assert capsys.readouterr().out.rstrip().endswith("| WARNING policy entropy 0.0000 under the floor 0.0069")
