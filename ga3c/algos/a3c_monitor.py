"""What an A3C run measures and writes, as GA3C's Monitor does: GA3C's counters and summary keys (predictors =
trainers = 0; pps = the agents' forward passes/s), summary.json, metrics.jsonl, W&B, the progress line; the rolling
scores and the time to stop_score."""
from __future__ import annotations

import collections
import math
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ga3c.algos.a3c_agent import LOSSES, AgentProcesses, schedule_at
from ga3c.monitor import CollapseWatch, RunOutputs, ScoreWindow, numeric


class A3CMonitor:
    """Rates over windows of the agents' shared statistics, counters that continue a resumed run's, the
    outputs. The run sets `start()` when the agents are ready and `finished` once they stopped."""

    def __init__(self, cfg: DictConfig, output_dir: Path, agents: AgentProcesses, optimizer: torch.optim.Optimizer,
                 run_state: dict, base_updates: int, frame_skip: int, num_actions: int = 0):
        self.cfg, self.output_dir, self.agents, self.optimizer = cfg, output_dir, agents, optimizer
        self.collapse = CollapseWatch.from_config(cfg, num_actions)
        # counters of the runs before a resume (GA3C's Counters fields)
        self.base = collections.Counter({k: int(v) for k, v in run_state.get("counters", {}).items()})
        self.base_updates = base_updates
        self.wall_offset = float(run_state.get("wall_seconds", 0.0))
        self.frame_skip = frame_skip
        self.score_window = ScoreWindow(int(cfg.log.score_window), cfg.get("stop_score"), self.wall_seconds)
        self.score_window.load_state_dict(run_state.get("score_window", {}))   # a resumed run's episodes
        self.finished = False  # once the agents stopped, produced but untrained steps count as discarded
        self.outputs = RunOutputs(output_dir, bool(cfg.log.get("progress", True)), "a3c")
        self.wandb_run = None
        self.start()

    # --- the clock and the windows ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the clock (the run's wall time continues a resumed run's) and the first window."""
        self.start_time = self.last_time = time.monotonic()
        self.first = self.last = self.agents.snapshot()

    def wall_seconds(self) -> float:
        return self.wall_offset + time.monotonic() - self.start_time

    def window(self, snap: dict, now: float) -> dict:
        """The metrics of the window that ends now; the next one starts."""
        m = self.metrics(snap, self.last, max(now - self.last_time, 1e-9))
        self.last, self.last_time = snap, now
        return m

    def episode(self, score: float, length: int) -> bool:
        """Count a finished episode; True when the rolling mean has just reached stop_score."""
        return self.score_window.add(score, length)

    # --- measuring -------------------------------------------------------------------------------------
    def updates(self, snap: dict) -> int:
        """Shared-model updates, runs before a resume included."""
        return self.base_updates + int(snap["updates"])

    def counters(self, snap: dict) -> dict:
        """GA3C's Counters fields, runs before a resume included."""
        produced, trained = int(snap["produced_steps"]), int(snap["trained_steps"])
        return dict(frames=self.base["frames"] + produced * self.frame_skip,
                    produced_steps=self.base["produced_steps"] + produced,
                    episodes=self.base["episodes"] + int(snap["episodes"]),
                    rollouts=self.base["rollouts"] + int(snap["updates"]),
                    trained_steps=self.base["trained_steps"] + trained,
                    discarded_steps=self.base["discarded_steps"] + (produced - trained if self.finished else 0),
                    agent_restarts=self.base["agent_restarts"] + self.agents.restarts)

    def metrics(self, snap: dict, last: dict, dt: float) -> dict:
        counters = self.counters(snap)
        rate = lambda key: (snap[key] - last[key]) / dt  # noqa: E731
        updates = snap["updates"] - last["updates"]
        agents = self.agents.count
        busy = {k: rate(f"{k}_seconds") / agents for k in ("env", "forward", "train", "sync")}
        # each loss's mean over the window's updates, all agents (NaN in a window without one)
        loss_means = {k: (snap[f"{k}_sum"] - last[f"{k}_sum"]) / updates if updates else math.nan for k in LOSSES}
        score_mean, length_mean = self.score_window.means()
        schedule = schedule_at(self.agents.spec, counters["trained_steps"])   # the workers' lr factor and beta
        m = {
            "frames": counters["frames"], "episodes": counters["episodes"],
            "updates": self.updates(snap), "wall_seconds": self.wall_seconds(),
            "fps": rate("produced_steps") * self.frame_skip, "pps": rate("forwards"), "tps": rate("updates"),
            "samples_per_s": rate("trained_steps"),
            "score_mean_100": score_mean, "episode_length_mean_100": length_mean,
            "prediction_batch_mean": 1.0,  # A3C acts one state at a time
            "training_batch_mean": (snap["trained_steps"] - last["trained_steps"]) / updates if updates else 0.0,
            "prediction_queue_depth": 0, "training_queue_depth": 0, "batch_queue_depth": 0,
            # GA3C's thread shares do not exist here: agents do everything themselves (see a3c_*_share)
            "predictor_busy_share": 0.0, "predictor_compute_share": 0.0, "trainer_busy_share": 0.0,
            "learner_busy_share": 0.0,
            "agents": agents, "predictors": 0, "trainers": 0,
            "seconds_to_stop_score": self.score_window.seconds_to_stop_score,
            "lr": float(self.optimizer.param_groups[0]["lr"]) * schedule[0],
            **counters,
            "loss/loss": loss_means["loss"], "loss/policy_loss": loss_means["policy_loss"],
            "loss/value_loss": loss_means["value_loss"], "loss/entropy": loss_means["entropy"],
            "batch_size": (snap["trained_steps"] - last["trained_steps"]) / updates if updates else math.nan,
            "grad_norm": loss_means["grad_norm"],
            "beta": schedule[1],
            "policy_lag_mean": (snap["lag_sum"] - last["lag_sum"]) / updates if updates else math.nan,
            # where an A3C agent's time goes (share of wall time, mean over agents)
            "a3c_env_share": busy["env"], "a3c_forward_share": busy["forward"],
            "a3c_train_share": busy["train"], "a3c_sync_share": busy["sync"],
        }
        m["in_flight_steps"] = m["produced_steps"] - m["trained_steps"] - m["discarded_steps"]
        return self.collapse.observe(m, self.score_window)

    # --- outputs ---------------------------------------------------------------------------------------
    def write_summary(self, m: dict, stop_reason: str | None, status: str = "running") -> None:
        first = self.counters(self.first)
        self.outputs.write_summary(m, status, stop_reason, first["frames"], first["trained_steps"], self.wall_offset,
                                   algo="a3c")

    def publish(self, m: dict, stop_reason: str | None) -> None:
        self.write_summary(m, stop_reason)
        self.outputs.append_history(m)
        if self.wandb_run is not None:
            self.wandb_run.log(numeric(m), step=int(m["frames"]))
        self.outputs.print_progress(m)

    def init_wandb(self, wandb_id: str | None) -> None:
        if self.cfg.wandb.mode == "disabled":
            return
        import wandb

        w = self.cfg.wandb
        self.wandb_run = wandb.init(project=w.project, entity=w.entity, group=w.group, tags=list(w.tags) or None,
                                    name=w.name, id=wandb_id, resume="allow", mode=w.mode,
                                    dir=str(self.output_dir), config=OmegaConf.to_container(self.cfg, resolve=True))
