"""Measuring the run: counters, rates, summary.json, W&B metrics and the progress line."""
from __future__ import annotations

import collections
import json
import math
import os
import logging
import statistics
import threading
import time
from pathlib import Path
from typing import Callable

import pytorch_lightning as pl

log = logging.getLogger(__name__)


class Counters:
    """Run-wide totals, thread-safe. Saved in checkpoints so a resumed run keeps counting."""

    # frames and produced_steps hold only what runs before a resume produced: the server adds its own.
    FIELDS = ("frames", "produced_steps", "episodes", "rollouts", "trained_steps", "discarded_steps",
              "agent_restarts")

    def __init__(self):
        self._lock = threading.Lock()
        self.values = dict.fromkeys(self.FIELDS, 0)

    def add(self, **increments: int) -> None:
        with self._lock:
            for key, value in increments.items():
                self.values[key] += value

    def __getitem__(self, key: str) -> int:
        return self.values[key]

    def state_dict(self) -> dict:
        with self._lock:
            return dict(self.values)

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self.values.update({k: v for k, v in state.items() if k in self.values})


class ScoreWindow:
    """The last `size` episodes' scores and lengths (score_mean_100) and when their mean first reached
    `stop_score`, thread-safe; GA3C's and A3C's monitors both keep one. Once stop_score is reached the run is
    stopping at that score: episodes that end during the stop leave the window (and the reported score) alone."""

    def __init__(self, size: int, stop_score: float | None, clock: Callable[[], float]):
        self.scores: collections.deque = collections.deque(maxlen=size)
        self.lengths: collections.deque = collections.deque(maxlen=size)
        self.stop_score, self.clock = stop_score, clock   # clock: the run's wall seconds
        self.seconds_to_stop_score: float | None = None
        self._lock = threading.Lock()

    def add(self, score: float, length: int) -> bool:
        """Record a finished episode; True only for the one whose arrival brought the mean to stop_score."""
        with self._lock:
            if self.seconds_to_stop_score is not None:
                return False
            self.scores.append(score)
            self.lengths.append(length)
            if (self.stop_score is not None and len(self.scores) == self.scores.maxlen
                    and sum(self.scores) / len(self.scores) >= self.stop_score):
                self.seconds_to_stop_score = self.clock()
                return True
            return False

    def stop_reason(self) -> str:
        """The run's stop_reason once add() returned True."""
        return f"score_mean_100 reached stop_score={self.stop_score}"

    def state_dict(self) -> dict:
        """The window's episodes, saved in checkpoints: a resumed run's score_mean_100 goes on from them."""
        with self._lock:
            return dict(scores=list(self.scores), lengths=list(self.lengths))

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self.scores.extend(float(s) for s in state.get("scores", []))
            self.lengths.extend(int(n) for n in state.get("lengths", []))

    def full(self) -> bool:
        with self._lock:
            return len(self.scores) == self.scores.maxlen

    def spread(self) -> float:
        """The standard deviation of the window's episode scores (NaN under two episodes)."""
        with self._lock:
            scores = list(self.scores)
        return statistics.stdev(scores) if len(scores) > 1 else math.nan

    def means(self) -> tuple[float, float]:
        """(mean score, mean length) of the window; NaN while it is empty."""
        with self._lock:
            scores, lengths = list(self.scores), list(self.lengths)
        if not scores:
            return math.nan, math.nan
        return sum(scores) / len(scores), sum(lengths) / len(lengths)


class CollapseWatch:
    """Says when learning has collapsed, so a user sees it without reading curves: each window gets
    `warning/entropy_floor` (the policy's entropy under `entropy_floor` x log(actions): a near-deterministic
    policy that sampling can no longer correct) and `warning/score_drop` (the rolling score has fallen back
    by more than `score_drop` of what it gained, from the first full window to its best), both 0 or 1, and
    `score_best_100`; `warning` names what is wrong ("" when nothing is). A warning is logged when it begins
    and when it clears. The score rule waits for a gain larger than the first full window's spread of episode
    scores, so the noise of a policy still at random play never counts as a fall. 0 turns a rule off."""

    def __init__(self, entropy_floor: float, score_drop: float, num_actions: int, summed: bool = False):
        self.entropy_floor = entropy_floor * math.log(num_actions) if num_actions > 1 else 0.0
        self.score_drop = score_drop
        self.summed = summed   # learner.reduction=sum: loss/entropy is a batch's sum, compared per sample
        self.first: float | None = None     # the first full window's mean, and its spread
        self.first_spread = math.nan
        self.best = -math.inf
        self.active = ""

    @classmethod
    def from_config(cls, cfg, num_actions: int) -> "CollapseWatch":
        """From a run's config: log.entropy_floor, log.score_drop and learner.reduction."""
        log_cfg, learner_cfg = cfg.get("log") or {}, cfg.get("learner") or {}
        return cls(float(log_cfg.get("entropy_floor", 0.0)), float(log_cfg.get("score_drop", 0.0)), num_actions,
                   learner_cfg.get("reduction") == "sum")

    def observe(self, m: dict, window: ScoreWindow) -> dict:
        """Add the warning keys to a window's metrics `m` (its score_mean_100 and loss/entropy)."""
        score, entropy = m.get("score_mean_100", math.nan), m.get("loss/entropy", math.nan)
        if self.summed:
            entropy = entropy / m["batch_size"] if m.get("batch_size") else math.nan
        if window.full() and score == score:
            if self.first is None:
                self.first, self.first_spread = score, window.spread()
            self.best = max(self.best, score)
        low_entropy = bool(self.entropy_floor) and entropy == entropy and entropy < self.entropy_floor
        gain = self.best - self.first if self.first is not None else 0.0
        dropped = (bool(self.score_drop) and gain > 0 and gain > self.first_spread and score == score
                   and self.best - score > self.score_drop * gain)
        reasons = []
        if low_entropy:
            reasons.append(f"policy entropy {entropy:.4f} under the floor {self.entropy_floor:.4f}")
        if dropped:
            reasons.append(f"rolling score {score:.2f} fell from its best {self.best:.2f} (first full window "
                           f"{self.first:.2f}: {(self.best - score) / gain:.0%} of the gain lost)")
        warning = "; ".join(reasons)
        if warning and not self.active:
            log.warning("learning collapse: %s", warning)
        elif self.active and not warning:
            log.warning("learning collapse cleared (score %.2f, entropy %.4f)", score, entropy)
        self.active = warning
        return m | {"score_best_100": self.best if self.best > -math.inf else math.nan,
                    "warning/entropy_floor": int(low_entropy), "warning/score_drop": int(dropped),
                    "warning": warning}


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float))
    os.replace(tmp, path)


def numeric(m: dict) -> dict:
    """The metrics a logger can plot: numbers, NaN left out (a window without an episode or an update)."""
    return {k: v for k, v in m.items() if isinstance(v, (int, float)) and v is not None
            and not (isinstance(v, float) and math.isnan(v))}


class RunOutputs:
    """What every run writes each window, whatever its algorithm (GA3C's Monitor, A3C's): summary.json (the
    window plus whole-run means), metrics.jsonl (one line per window, read by ga3c.tools), the progress line."""

    def __init__(self, output_dir: Path, progress: bool, tag: str):
        self.output_dir, self.progress, self.tag = Path(output_dir), progress, tag

    def write_summary(self, m: dict, status: str, stop_reason: str | None, first_frames: float,
                      first_trained: float, wall_offset: float, **extra) -> None:
        """summary.json; whole-run means from this process's start (first_*: the counters then)."""
        elapsed = max(m["wall_seconds"] - wall_offset, 1e-9)
        summary = dict(m, status=status, stop_reason=stop_reason, **extra,
                       fps_run_mean=(m["frames"] - first_frames) / elapsed,
                       samples_per_s_run_mean=(m["trained_steps"] - first_trained) / elapsed)
        write_json_atomic(self.output_dir / "summary.json", summary)

    def append_history(self, m: dict) -> None:
        with open(self.output_dir / "metrics.jsonl", "a") as history:
            history.write(json.dumps(m, default=float) + "\n")

    def print_progress(self, m: dict) -> None:
        if self.progress:
            print(f"[{self.tag}] frames {m['frames']:>10,} | fps {m['fps']:7.0f} | pps {m['pps']:6.0f} | "
                  f"tps {m['tps']:5.1f} | score {m['score_mean_100']:8.2f} | episodes {m['episodes']:6d} | "
                  f"NA/NP/NT {m['agents']}/{m['predictors']}/{m['trainers']} | lag {m['policy_lag_mean']:.1f}"
                  + (f" | WARNING {m['warning']}" if m.get("warning") else ""), flush=True)


class Monitor(pl.Callback):
    """Every `every_seconds`: rates over the last window, W&B metrics, summary.json, a progress line.

    Rates are window rates (what the auto-tuner reads); summary.json also has whole-run averages.
    """

    def __init__(self, server, output_dir: Path, every_seconds: float = 5.0, progress: bool = True,
                 score_window: int = 100, stop_score: float | None = None, collapse: CollapseWatch | None = None):
        self.server, self.output_dir = server, Path(output_dir)
        self.collapse = collapse
        self.every_seconds, self.progress = every_seconds, progress
        # score_mean_100; the run stops once the rolling mean of a full window reaches stop_score
        self.score_window = ScoreWindow(score_window, stop_score, self.wall_seconds)
        self._tick_lock = threading.RLock()
        self.windows = self._windows_checked = 0   # windows published; the last one the learner was checked in
        self.start_time = time.monotonic()
        self.wall_offset = 0.0          # wall seconds of the runs before a resume
        self._last_time = self.start_time
        self._last = self._first = self._snapshot()
        self.latest: dict = {}
        self.outputs = RunOutputs(self.output_dir, progress, "ga3c")
        self.logger = None
        self.listeners: list = []       # called with each window's metrics (the auto-tuner)

    # --- fed by the trainers -------------------------------------------------------------------------
    def record_episode(self, score: float, length: int) -> None:
        solved = self.score_window.add(score, length)
        self.server.counters.add(episodes=1)
        if solved:
            self.server.request_stop(self.score_window.stop_reason())

    # --- measuring -----------------------------------------------------------------------------------
    def _snapshot(self) -> dict:
        server = self.server
        return dict(frames=server.frames(), predictions=sum(p.predictions for p in server.all_predictors),
                    prediction_batches=sum(p.batches for p in server.all_predictors),
                    updates=server.learner.version, trained=server.counters["trained_steps"],
                    predictor_busy=sum(p.busy_seconds for p in server.all_predictors),
                    predictor_compute=sum(p.compute_seconds for p in server.all_predictors),
                    trainer_busy=sum(t.busy_seconds for t in server.all_trainers),
                    learner_busy=server.learner.busy_seconds)

    def tick(self, force: bool = False) -> dict | None:
        """Report if a window has passed (called from the learner loop, also while it waits for data)."""
        now = time.monotonic()
        if not force and now - self._last_time < self.every_seconds:
            return None
        # One window at a time, published in order (several threads tick); episodes keep their own lock.
        with self._tick_lock:
            now = time.monotonic()
            if not force and now - self._last_time < self.every_seconds:
                return None
            snap, dt = self._snapshot(), max(now - self._last_time, 1e-9)
            last, self._last, self._last_time = self._last, snap, now
            metrics = self._metrics(snap, last, dt, now)
            self.latest = metrics
            self.windows += 1
            for listener in self.listeners:
                listener(metrics)
            self._publish(metrics)
            return metrics

    def _metrics(self, snap: dict, last: dict, dt: float, now: float) -> dict:
        server, learner = self.server, self.server.learner
        elapsed = now - self.start_time
        rate = lambda key: (snap[key] - last[key]) / dt  # noqa: E731
        batches = snap["prediction_batches"] - last["prediction_batches"]
        updates = snap["updates"] - last["updates"]
        score_mean, length_mean = self.score_window.means()
        m = {
            **server.counters.state_dict(),   # first: the snapshot's values below win over the live counters
            "frames": snap["frames"], "episodes": server.counters["episodes"], "updates": snap["updates"],
            "wall_seconds": self.wall_offset + elapsed,
            "fps": rate("frames"), "pps": rate("predictions"), "tps": rate("updates"),
            "samples_per_s": rate("trained"),
            "score_mean_100": score_mean, "episode_length_mean_100": length_mean,
            "prediction_batch_mean": (snap["predictions"] - last["predictions"]) / batches if batches else 0.0,
            # samples per update: a batch trained `epochs` times counts its samples once and its updates each time
            "training_batch_mean": learner.epochs * (snap["trained"] - last["trained"]) / updates if updates else 0.0,
            "prediction_queue_depth": server.prediction_queue.depth(),
            "training_queue_depth": server.training_queue.depth(),
            "batch_queue_depth": server.batch_queue.qsize(),
            # where the time goes: share of the window each predictor / trainer thread was busy
            "predictor_busy_share": rate("predictor_busy") / max(len(server.predictors), 1),
            "predictor_compute_share": rate("predictor_compute") / max(len(server.predictors), 1),
            "trainer_busy_share": rate("trainer_busy") / max(len(server.trainers), 1),
            "learner_busy_share": rate("learner_busy"),  # 1 = the optimiser is the bottleneck
            "agents": server.counts[0], "predictors": server.counts[1], "trainers": server.counts[2],
            "seconds_to_stop_score": self.score_window.seconds_to_stop_score,
            "lr": self._learning_rate(),
            "produced_steps": server.produced_steps(),
        }
        for key, value in learner.last_metrics.items():
            m[f"loss/{key}" if key in ("loss", "policy_loss", "value_loss", "entropy") else key] = float(value)
        m["policy_lag_mean"] = m.pop("policy_lag", math.nan)
        m["in_flight_steps"] = m["produced_steps"] - m["trained_steps"] - m["discarded_steps"]
        return self.collapse.observe(m, self.score_window) if self.collapse is not None else m

    def _learning_rate(self) -> float:
        optimizers = self.server.learner.trainer.optimizers if self.server.learner._trainer is not None else []
        return float(optimizers[0].param_groups[0]["lr"]) if optimizers else math.nan

    def _publish(self, m: dict) -> None:
        self.write_summary(m)
        self.append_history(m)
        if self.logger is not None:
            self.logger.log_metrics(numeric(m), step=int(m["frames"]))
        self.outputs.print_progress(m)

    def append_history(self, m: dict) -> None:
        """metrics.jsonl: one JSON line per window (the local history that ga3c.tools.report plots, offline)."""
        self.outputs.append_history(m)

    def wall_seconds(self) -> float:
        return self.wall_offset + time.monotonic() - self.start_time

    def write_summary(self, m: dict, status: str = "running") -> None:
        """summary.json: the latest window's rates plus whole-run means (fps_run_mean, samples_per_s_run_mean)."""
        self.outputs.write_summary(m, status, self.server.stop_reason, self._first["frames"], self._first["trained"],
                                   self.wall_offset)

    # --- Lightning hooks -----------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.logger = trainer.logger
        self.start_time = self._last_time = time.monotonic()
        self._last = self._first = self._snapshot()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.tick()
        if self.windows != self._windows_checked:  # once a window: the updates never wait for this check
            self._windows_checked = self.windows
            pl_module.raise_if_nonfinite()
        if self.server.stopping.is_set():
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.server.stopping.is_set():
            trainer.should_stop = True
