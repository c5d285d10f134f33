"""The CPU A3C baseline (Mnih et al. 2016), the system GA3C is measured against (`algo=a3c`).

N_A agent processes, each with its own copy of the network. Each one acts with batch-1 forward passes of
its copy, computes the gradient of the A3C loss on its own t_max rollout, applies it to the one shared
model with the shared optimizer (Hogwild: parameters and optimizer statistics live in shared memory and
are updated without a lock), then copies the shared weights back into its own net.

Same games, preprocessing, networks, loss, optimizer and hyperparameters as GA3C (cfg.game, cfg.net,
cfg.learner), so a side-by-side run isolates the system design. Same outputs too: summary.json with the
GA3C keys (predictors = trainers = 0; pps = the agents' forward passes/s), a W&B run and a
Lightning-format checkpoint (`checkpoints/last.ckpt`) that `Learner` and a GA3C run (`ckpt_path=`) load.

One file per role:
    a3c.py          this run: builds the pieces, watches the agents, checkpoints, stops
    a3c_agent.py    the agent processes (the loop each runs) and the main process's handle on them
    a3c_model.py    the shared model and optimizer statistics, and their checkpoints
    a3c_monitor.py  rates, counters, summary.json, metrics.jsonl, W&B, the progress line
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ga3c.algos.a3c_monitor import A3CMonitor
from ga3c.algos.a3c_model import SharedModel
from ga3c.algos.a3c_agent import AgentProcesses
from ga3c.config import check_output_dir
from ga3c.env import env_spec
from ga3c.runtime import (StopSignals, checkpoint_run_state, finish_wandb, parse_max_time, read_checkpoint,
                          wandb_run_id)
from ga3c.server import RunControl, stop_forkserver

log = logging.getLogger(__name__)


class A3CRun(RunControl):
    """Starts the agents, watches them, checkpoints, stops. Mirrors GA3C's Server + Monitor outputs."""

    def __init__(self, cfg: DictConfig):
        RunControl.__init__(self)
        self.cfg = cfg
        self.output_dir = Path(cfg.output_dir)
        check_output_dir(self.output_dir)
        resumed = read_checkpoint(cfg.ckpt_path) if cfg.ckpt_path else None
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.torch_threads)
        game = OmegaConf.to_container(cfg.game, resolve=True)
        obs_shape, _, num_actions = env_spec(game)
        precision = str(cfg.trainer.get("precision", "auto"))
        if precision not in ("auto", "32-true", "32"):
            log.warning("algo=a3c computes in 32-true: trainer.precision=%s applies to GA3C only (A3C's batch-1 "
                        "and batch-5 passes are slower in bf16 on a CPU: measured 0.6x)", precision)
        self.shared = SharedModel(cfg, obs_shape, num_actions, resumed)
        # the agents' plain-data spec (they are spawned): the learner section as it is, plus what they build
        spec = dict(OmegaConf.to_container(cfg.learner, resolve=True), game=game, t_max=int(cfg.t_max),
                    net=OmegaConf.to_container(cfg.net, resolve=True),
                    samples_per_update=max(int(cfg.training_min_batch), int(cfg.t_max)))   # GA3C's batch
        self.agents = AgentProcesses(int(cfg.agents), int(cfg.seed), spec, self.shared.model, self.shared.states,
                                     on_events=self._on_events)
        a3c_state = (resumed or {}).get("a3c", {})
        self.monitor = A3CMonitor(cfg, self.output_dir, self.agents, self.shared.optimizer,
                                  run_state=checkpoint_run_state(resumed) if resumed is not None else {},
                                  base_updates=int(a3c_state.get("updates", 0)),
                                  frame_skip=int(game.get("frame_skip", 1) or 1), num_actions=num_actions)
        self.wandb_id = wandb_run_id(cfg, a3c_state.get("wandb_id"))
        spec["base_trained_steps"] = self.monitor.base["trained_steps"]   # the schedules go on after a resume

    # --- control ---------------------------------------------------------------------------------------
    def exit_now(self) -> None:
        """A second Ctrl-C (runtime.StopSignals): kill the agents at once; the model's memory goes with us."""
        self.agents.kill()

    def _on_events(self, events: list) -> None:
        """What the agents reported: finished episodes (stop_score), errors (the run stops)."""
        for kind, a, b in events:
            if kind == "episode":
                if self.monitor.episode(float(a), int(b)):
                    self.request_stop(self.monitor.score_window.stop_reason())
            elif kind == "error":
                self.fail(f"agent {a} raised: {b}", FloatingPointError(b) if "FloatingPointError" in b
                          else RuntimeError(f"A3C agent {a} failed: {b.splitlines()[0]}"))

    def _replace_dead_agents(self) -> None:
        """Replace an agent that died without reporting an error (killed by the OS, say)."""
        for index, process in enumerate(self.agents.processes):
            if process is not None and not process.is_alive() and self.stop_reason is None:
                self.agents.drain(0.0)  # an error it reported stops the run instead
                if self.stop_reason is not None:
                    return
                log.warning("A3C agent %d (pid %s) died with exit code %s; starting a replacement",
                            index, process.pid, process.exitcode)
                self.agents.restarts += 1
                if self.agents.restarts > 10 * self.agents.count:
                    self.fail("A3C agents keep dying", RuntimeError("A3C agents keep dying; see the log"))
                    return
                self.agents.start(index)

    # --- checkpoints -----------------------------------------------------------------------------------
    def save_checkpoint(self, name: str) -> None:
        snap = self.agents.snapshot()
        self.shared.save(self.output_dir / "checkpoints", name, self.monitor.counters(snap),
                         self.monitor.wall_seconds(), self.monitor.updates(snap), self.wandb_id,
                         self.monitor.score_window.state_dict())

    def _periodic_checkpoint(self) -> None:
        """GA3C's checkpoints in name and number (step-N.ckpt, with no "=", which Hydra's override grammar refuses
        unquoted in ckpt_path=; checkpoint.keep of them; last.ckpt). By hand:
        Lightning's ModelCheckpoint saves from a Trainer's loop, and Hogwild A3C has no Trainer."""
        step = self.monitor.updates(self.agents.snapshot())
        self.save_checkpoint(f"step-{step}.ckpt")
        self.save_checkpoint("last.ckpt")
        keep = int(self.cfg.checkpoint.keep)
        periodic = sorted((self.output_dir / "checkpoints").glob("step-*.ckpt"), key=lambda p: p.stat().st_mtime)
        for old in periodic[:-keep] if keep > 0 else periodic:
            old.unlink(missing_ok=True)

    # --- the run ---------------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg, agents, monitor = self.cfg, self.agents, self.monitor
        max_time = parse_max_time(cfg.trainer.get("max_time"))
        max_frames = cfg.max_frames
        every = float(cfg.log.every_seconds)
        checkpoint_every = float(cfg.checkpoint.every_minutes) * 60
        monitor.finished = False
        # first Ctrl-C/SIGTERM: stop gracefully; second: kill the agents and exit at once
        with StopSignals("a3c") as stop_signals:
            stop_signals.attach(self)
            status, metrics = "failed", {}
            monitor.start()
            try:
                monitor.init_wandb(self.wandb_id)
                for index in range(agents.count):
                    agents.start(index)
                # The clock starts when every agent is ready (as GA3C's starts at fit start).
                ready, deadline = 0, time.monotonic() + 120
                while ready < agents.count and self.stop_reason is None and time.monotonic() < deadline:
                    ready += sum(kind == "ready" for kind, _, _ in agents.drain(0.2))
                    self._replace_dead_agents()
                monitor.start()
                last_checkpoint = monitor.start_time
                while self.stop_reason is None:
                    agents.drain(0.1)
                    self._replace_dead_agents()
                    now = time.monotonic()
                    snap = agents.snapshot()
                    if max_frames and monitor.counters(snap)["frames"] >= max_frames:
                        self.request_stop(f"reached max_frames={max_frames}")
                    if max_time is not None and now - monitor.start_time >= max_time:
                        self.request_stop("trainer.max_time")
                    if now - monitor.last_time >= every:
                        metrics = monitor.window(snap, now)
                        monitor.publish(metrics, self.stop_reason)
                    if now - last_checkpoint >= checkpoint_every:
                        self._periodic_checkpoint()
                        last_checkpoint = now
                status = "failed" if self.error else "finished"
            except BaseException as error:
                self.fail(f"A3C raised {error!r}", error)
                raise
            finally:
                agents.stop()
                monitor.finished = True
                agents.drain(0.0)
                now = time.monotonic()
                metrics = monitor.window(agents.snapshot(), now)
                if not isinstance(self.error, FloatingPointError):  # after NaN the previous checkpoint is the good one
                    try:
                        self.save_checkpoint("last.ckpt")
                    except Exception as error:  # noqa: BLE001
                        log.error("final checkpoint failed: %s", error)
                monitor.publish(metrics, self.stop_reason)
                monitor.write_summary(metrics, self.stop_reason, status=status)
                if monitor.wandb_run is not None:
                    finish_wandb(exit_code=1 if status == "failed" or self.error is not None else 0)
                agents.close()
                stop_forkserver()  # it outlives its children: a finished run leaves no process behind
        if self.error is not None:
            raise self.error
        log.info("finished (%s): %s frames, score_mean_100 %.2f", self.stop_reason, metrics["frames"],
                 metrics["score_mean_100"])
        return metrics


def train_a3c(cfg: DictConfig) -> dict:
    """Train with the CPU A3C baseline; returns the final metrics (also in OUTPUT_DIR/summary.json)."""
    if cfg.learner.get("correction", "none") != "none":
        log.info("A3C learns on-policy (each worker trains its own rollout with its own current copy of the "
                 "network): learner.correction=%s does not apply and is not used", cfg.learner.correction)
    if cfg.learner.get("epochs", 1) > 1 or cfg.learner.get("ppo_clip", 0):
        log.info("learner.epochs=%s and learner.ppo_clip=%s apply to the GA3C learner only; each A3C worker "
                 "trains every rollout once with the plain policy gradient", cfg.learner.epochs, cfg.learner.ppo_clip)
    return A3CRun(cfg).run()
