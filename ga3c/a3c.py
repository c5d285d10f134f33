"""The CPU A3C baseline (Mnih et al. 2016), the system GA3C is measured against.

N_A agent processes, each with its own copy of the network. Each one acts with batch-1 forward passes of
its copy, computes the gradient of the A3C loss on its own t_max rollout, applies it to the one shared
model with the shared optimizer (Hogwild: parameters and optimizer statistics live in shared memory and
are updated without a lock), then copies the shared weights back into its own net.

Same games, preprocessing, networks, loss, optimizer and hyperparameters as GA3C (cfg.game, cfg.net,
cfg.learner), so a side-by-side run isolates the system design. Same outputs too: summary.json with the
GA3C keys (predictors = trainers = 0; pps = the agents' forward passes/s), a W&B run and a
Lightning-format checkpoint (`checkpoints/last.ckpt`) that `Learner` and a GA3C run (`ckpt_path=`) load.
"""
from __future__ import annotations

import collections
import json
import logging
import math
import os
import queue
import signal
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ga3c.agent import discounted_returns
from ga3c.config import ConfigError, check_output_dir
from ga3c.env import env_spec, make_env
from ga3c.learner import RMSpropTF, a3c_loss
from ga3c.monitor import write_json_atomic

log = logging.getLogger(__name__)

# Per-agent statistics: one row per agent slot in a shared float64 tensor, written only by its agent.
STATS = ("produced_steps", "trained_steps", "updates", "forwards", "episodes", "lag_sum",
         "env_seconds", "forward_seconds", "train_seconds", "sync_seconds")
S = {name: i for i, name in enumerate(STATS)}
LOSSES = ("loss", "policy_loss", "value_loss", "entropy", "grad_norm", "batch_size")
L = {name: i for i, name in enumerate(LOSSES)}


# --- shared optimizer ------------------------------------------------------------------------------------
def share_optimizer_state(optimizer: torch.optim.Optimizer) -> list[dict]:
    """Create the optimizer's per-parameter state now (not lazily at the first step) and move it to shared
    memory, so every agent's optimizer over the shared parameters updates the same statistics."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if isinstance(optimizer, RMSpropTF):
        for p in params:
            if not optimizer.state[p]:
                optimizer.state[p]["square_avg"] = torch.ones_like(p)  # TF1 starts its accumulator at 1
                if optimizer.param_groups[0]["momentum"]:
                    optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    elif not all(optimizer.state[p] for p in params):
        # Any other optimizer (Adam, torch RMSprop): one step with zero gradients builds its state and
        # leaves the parameters as they are (zero first moments give a zero update).
        saved = [p.grad for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        for p, grad in zip(params, saved):
            p.grad = grad
    states = []
    for p in params:
        state = optimizer.state[p]
        for key, value in list(state.items()):
            if not torch.is_tensor(value):
                state[key] = value = torch.tensor(float(value), dtype=torch.float32)
            value.share_memory_()
        states.append(state)
    return states


def lightning_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, counters: dict,
                         wall_seconds: float, updates: int, wandb_id: str | None) -> dict:
    """A checkpoint in Lightning's format: `Learner.load_state_dict(ckpt["state_dict"])` and a GA3C run's
    `ckpt_path=` both take it (weights, optimizer statistics and counters; Lightning's loop state is not
    there, so a GA3C run started from it counts its own updates from 0)."""
    import pytorch_lightning as pl

    return {
        "epoch": 0, "global_step": int(updates), "pytorch-lightning_version": pl.__version__,
        "state_dict": {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
        # GA3C's RunState restores the counters from here, so frames keep counting across algorithms.
        "callbacks": {"RunState": dict(counters=dict(counters), wall_seconds=float(wall_seconds), wandb_id=None)},
        "a3c": dict(wandb_id=wandb_id, updates=int(updates)),
    }


def parse_max_time(value) -> float | None:
    """cfg.trainer.max_time as Lightning takes it (DD:HH:MM:SS string, dict of timedelta fields, seconds)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise ConfigError(f"trainer.max_time must be DD:HH:MM:SS, got {value!r}")
        days, hours, minutes, seconds = map(int, parts)
        return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds()
    try:
        return timedelta(**dict(value)).total_seconds()
    except (TypeError, ValueError):
        raise ConfigError(f"trainer.max_time must be DD:HH:MM:SS, got {value!r}") from None


# --- the agent process -----------------------------------------------------------------------------------
def run_a3c_agent(index: int, seed: int, spec: dict, shared_model, shared_states, stats, losses, control,
                  events) -> None:
    """Process entry point: act, compute gradients on t_max steps, apply them to the shared model, sync."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the main process stops us
    parent = os.getppid()
    try:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        game, t_max, gamma, reward_clip = spec["game"], spec["t_max"], spec["gamma"], spec["reward_clip"]
        lam = spec["gae_lambda"]
        env = make_env(game, seed)
        obs_shape, num_actions = tuple(env.observation_space.shape), int(env.action_space.n)
        local = instantiate(spec["net"], obs_shape=obs_shape, num_actions=num_actions)
        local.load_state_dict(shared_model.state_dict())
        optimizer = instantiate(spec["optimizer"])(shared_model.parameters())
        for p, state in zip(shared_model.parameters(), shared_states):
            optimizer.state[p] = state  # the shared statistics (Hogwild)
        local_params, shared_params = list(local.parameters()), list(shared_model.parameters())
        row, loss_row = stats[index], losses[index]
        obs_buffer = np.zeros((t_max + 1, *obs_shape), env.observation_space.dtype)
        actions = torch.zeros(t_max, dtype=torch.long)
        rewards = np.zeros(t_max, np.float32)
        obs, _ = env.reset(seed=seed)
        score, episode_steps = 0.0, 0
        events.put(("ready", index, None))
        while not control[0]:
            if os.getppid() != parent:
                break  # the main process is gone
            start = time.perf_counter()
            local.load_state_dict(shared_model.state_dict())  # sync with the shared model
            synced_version = float(stats[:, S["updates"]].sum())
            row[S["sync_seconds"]] += time.perf_counter() - start
            forward_seconds = env_seconds = 0.0
            length, terminal, episode_over = 0, False, False
            while length < t_max:
                obs_buffer[length] = obs
                t0 = time.perf_counter()
                with torch.inference_mode():
                    logits, _ = local(torch.from_numpy(obs_buffer[length:length + 1]))
                    action = int(torch.multinomial(torch.softmax(logits.float(), -1), 1))
                t1 = time.perf_counter()
                obs, reward, terminated, truncated, info = env.step(action)
                env_seconds += time.perf_counter() - t1
                forward_seconds += t1 - t0
                actions[length] = action
                score += reward
                episode_steps += 1
                rewards[length] = np.clip(reward, -reward_clip, reward_clip) if reward_clip else reward
                length += 1
                episode_over = terminated or truncated
                if episode_over or info.get("life_lost"):
                    terminal = terminated or bool(info.get("life_lost"))  # a time limit still bootstraps
                    break
            obs_buffer[length] = obs  # the state after the rollout: its value is the bootstrap
            row[S["produced_steps"]] += length
            row[S["forwards"]] += length
            row[S["forward_seconds"]] += forward_seconds
            row[S["env_seconds"]] += env_seconds
            if episode_over:
                events.put(("episode", score, episode_steps))
                row[S["episodes"]] += 1
                obs, _ = env.reset()
                score, episode_steps = 0.0, 0
            # One forward pass over the rollout and the state after it: the policy and values to train, and
            # the bootstrap V(s_{t+n}) from the same (pre-update) copy, as Mnih et al. compute it.
            start = time.perf_counter()
            logits, values = local(torch.from_numpy(obs_buffer[:length + 1]))
            bootstrap = 0.0 if terminal else float(values[length].detach())
            if lam < 1.0:  # lambda-returns from the values of the same copy (GA3C: of the acting forward pass)
                returns = discounted_returns(rewards[:length], bootstrap, gamma,
                                             values[:length].detach().numpy(), lam)
            else:
                returns = discounted_returns(rewards[:length], bootstrap, gamma)
            returns = torch.from_numpy(returns)
            parts = a3c_loss(logits[:length], values[:length], actions[:length], returns, spec["beta"],
                             spec["log_epsilon"], spec["value_coef"], spec["reduction"])
            if not torch.isfinite(parts["loss"]):
                raise FloatingPointError(f"loss is {parts['loss'].item()} in agent {index}: training stopped "
                                         "(lower the learning rate or enable learner.grad_clip)")
            for p in local_params:
                p.grad = None
            parts["loss"].backward()
            norm = torch.nn.utils.clip_grad_norm_(local_params, spec["grad_clip"] or math.inf)
            if not torch.isfinite(norm):
                raise FloatingPointError(f"gradient norm is {norm.item()} in agent {index}: training stopped")
            for local_p, shared_p in zip(local_params, shared_params):
                shared_p.grad = local_p.grad
            optimizer.step()  # Hogwild: no lock around the shared parameters and statistics
            row[S["lag_sum"]] += float(stats[:, S["updates"]].sum()) - synced_version
            row[S["updates"]] += 1
            row[S["trained_steps"]] += length
            row[S["train_seconds"]] += time.perf_counter() - start
            for key in ("loss", "policy_loss", "value_loss", "entropy"):
                loss_row[L[key]] = parts[key].item()
            loss_row[L["grad_norm"]], loss_row[L["batch_size"]] = float(norm), length
        env.close()
    except Exception as error:  # noqa: BLE001 - reported to the main process, which stops the run
        events.put(("error", index, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
        raise SystemExit(1)


# --- the main process ------------------------------------------------------------------------------------
class A3CRun:
    """Starts the agents, measures, checkpoints, stops. Mirrors GA3C's Server + Monitor outputs."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.output_dir = Path(cfg.output_dir)
        check_output_dir(self.output_dir)
        resumed = self._load_checkpoint(cfg.ckpt_path) if cfg.ckpt_path else None
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.torch_threads)
        self.game = OmegaConf.to_container(cfg.game, resolve=True)
        obs_shape, _, num_actions = env_spec(self.game)
        self.model = instantiate(cfg.net, obs_shape=obs_shape, num_actions=num_actions)
        precision = str(cfg.trainer.get("precision", "auto"))
        if precision not in ("auto", "32-true", "32"):
            log.warning("algo=a3c computes in 32-true: trainer.precision=%s applies to GA3C only (A3C's batch-1 "
                        "and batch-5 passes are slower in bf16 on a CPU: measured 0.6x)", precision)
        self.optimizer = instantiate(cfg.learner.optimizer)(self.model.parameters())
        run_state: dict = {}
        if resumed is not None:
            self.model.load_state_dict({k.removeprefix("model."): v for k, v in resumed["state_dict"].items()})
            if resumed.get("optimizer_states"):
                self.optimizer.load_state_dict(resumed["optimizer_states"][0])
            run_state = next((v for k, v in resumed.get("callbacks", {}).items() if k.startswith("RunState")), {})
        self.model.share_memory()
        self.shared_states = share_optimizer_state(self.optimizer)
        self.agents = int(cfg.agents)
        self.stats = torch.zeros(self.agents, len(STATS), dtype=torch.float64).share_memory_()
        self.losses = torch.full((self.agents, len(LOSSES)), math.nan, dtype=torch.float64).share_memory_()
        self.control = torch.zeros(1, dtype=torch.uint8).share_memory_()
        # forkserver: agents fork from a clean process that imported torch and the envs once (spawn would
        # import them again in every agent: minutes on a busy 2-core machine); no inherited threads (fork).
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["ga3c.a3c"])
        self.events = self.ctx.Queue()
        self.processes: list = [None] * self.agents
        self.seed_counter = 0
        lc = cfg.learner
        self.spec = dict(game=self.game, t_max=int(cfg.t_max), gamma=float(lc.gamma),
                         gae_lambda=float(lc.get("gae_lambda", 1.0)),
                         reward_clip=float(lc.reward_clip), beta=float(lc.beta), log_epsilon=float(lc.log_epsilon),
                         value_coef=float(lc.value_coef), reduction=str(lc.reduction), grad_clip=float(lc.grad_clip),
                         net=OmegaConf.to_container(cfg.net, resolve=True),
                         optimizer=OmegaConf.to_container(lc.optimizer, resolve=True))
        # counters of the runs before a resume (GA3C's Counters fields)
        self.base = collections.Counter({k: int(v) for k, v in run_state.get("counters", {}).items()})
        self.base_updates = int((resumed or {}).get("a3c", {}).get("updates", 0))
        self.wall_offset = float(run_state.get("wall_seconds", 0.0))
        self.wandb_id = cfg.wandb.id or (resumed or {}).get("a3c", {}).get("wandb_id")
        if cfg.wandb.mode != "disabled" and self.wandb_id is None:
            import secrets

            self.wandb_id = secrets.token_hex(4)
        self.frame_skip = int(self.game.get("frame_skip", 1) or 1)
        self.scores = collections.deque(maxlen=int(cfg.log.score_window))
        self.lengths = collections.deque(maxlen=int(cfg.log.score_window))
        self.stop_score = cfg.get("stop_score")
        self.seconds_to_stop_score: float | None = None
        self.restarts = 0
        self.finished = False  # once the agents stopped, produced but untrained steps count as discarded
        self.stop_reason: str | None = None
        self.error: BaseException | None = None
        self.signals = 0
        self.wandb_run = None

    @staticmethod
    def _load_checkpoint(path: str) -> dict:
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear message
            raise ConfigError(f"ckpt_path {path!r} is not a readable checkpoint ({type(error).__name__}: {error})"
                              ) from None
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise ConfigError(f"ckpt_path {path!r} is not a ga3c Lightning checkpoint (no state_dict in it)")
        return checkpoint

    # --- agents ----------------------------------------------------------------------------------------
    def _start_agent(self, index: int) -> None:
        seed = int(self.cfg.seed) * 10007 + self.seed_counter
        self.seed_counter += 1
        process = self.ctx.Process(target=run_a3c_agent, name=f"a3c-agent-{index}", daemon=True,
                                   args=(index, seed, self.spec, self.model, self.shared_states, self.stats,
                                         self.losses, self.control, self.events))
        process.start()
        self.processes[index] = process

    def _stop_agents(self, timeout: float = 5.0) -> None:
        self.control[0] = 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p is not None and p.is_alive() for p in self.processes):
            self._drain_events(0.05)  # a child blocked on a full queue must be able to finish
        for process in self.processes:
            if process is not None and process.is_alive():
                process.kill()
            if process is not None:
                process.join(1.0)

    def _kill_agents(self) -> None:
        for process in self.processes:
            if process is not None and process.is_alive():
                process.kill()

    def _drain_events(self, timeout: float) -> list:
        got = []
        try:
            got.append(self.events.get(timeout=timeout))
            while True:
                got.append(self.events.get_nowait())
        except queue.Empty:
            pass
        for kind, a, b in got:
            if kind == "episode":
                self.scores.append(float(a))
                self.lengths.append(int(b))
                if (self.stop_score is not None and self.seconds_to_stop_score is None
                        and len(self.scores) == self.scores.maxlen
                        and sum(self.scores) / len(self.scores) >= self.stop_score):
                    self.seconds_to_stop_score = self.wall_seconds()
                    self.request_stop(f"score_mean_100 reached stop_score={self.stop_score}")
            elif kind == "error":
                self.fail(f"agent {a} raised: {b}", FloatingPointError(b) if "FloatingPointError" in b
                          else RuntimeError(f"A3C agent {a} failed: {b.splitlines()[0]}"))
        return got

    # --- control ---------------------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            log.info("stopping: %s", reason)

    def fail(self, message: str, error: BaseException) -> None:
        log.error(message)
        if self.error is None:
            self.error = error
        self.request_stop(message.splitlines()[0])

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            print(f"\n[a3c] {name}: stopping (final checkpoint and summary); again to exit at once", flush=True)
            self.request_stop(name)
            return
        self._kill_agents()
        from ga3c.server import stop_forkserver

        stop_forkserver()
        os._exit(128 + signum)

    def wall_seconds(self) -> float:
        return self.wall_offset + time.monotonic() - self.start_time

    # --- measuring -------------------------------------------------------------------------------------
    def _snapshot(self) -> dict:
        totals = self.stats.sum(0).tolist()
        return {name: totals[i] for i, name in enumerate(STATS)}

    def counters(self, snap: dict) -> dict:
        """GA3C's Counters fields, runs before a resume included."""
        produced, trained = int(snap["produced_steps"]), int(snap["trained_steps"])
        return dict(frames=self.base["frames"] + produced * self.frame_skip,
                    produced_steps=self.base["produced_steps"] + produced,
                    episodes=self.base["episodes"] + int(snap["episodes"]),
                    rollouts=self.base["rollouts"] + int(snap["updates"]),
                    trained_steps=self.base["trained_steps"] + trained,
                    discarded_steps=self.base["discarded_steps"] + (produced - trained if self.finished else 0),
                    agent_restarts=self.base["agent_restarts"] + self.restarts)

    def metrics(self, snap: dict, last: dict, dt: float) -> dict:
        counters = self.counters(snap)
        rate = lambda key: (snap[key] - last[key]) / dt  # noqa: E731
        updates = snap["updates"] - last["updates"]
        busy = {k: rate(f"{k}_seconds") / self.agents for k in ("env", "forward", "train", "sync")}
        live_losses = self.losses[~torch.isnan(self.losses[:, 0])]
        loss_means = live_losses.mean(0).tolist() if len(live_losses) else [math.nan] * len(LOSSES)
        m = {
            "frames": counters["frames"], "episodes": counters["episodes"],
            "updates": self.base_updates + int(snap["updates"]), "wall_seconds": self.wall_seconds(),
            "fps": rate("produced_steps") * self.frame_skip, "pps": rate("forwards"), "tps": rate("updates"),
            "samples_per_s": rate("trained_steps"),
            "score_mean_100": sum(self.scores) / len(self.scores) if self.scores else math.nan,
            "episode_length_mean_100": sum(self.lengths) / len(self.lengths) if self.lengths else math.nan,
            "prediction_batch_mean": 1.0,  # A3C acts one state at a time
            "training_batch_mean": (snap["trained_steps"] - last["trained_steps"]) / updates if updates else 0.0,
            "prediction_queue_depth": 0, "training_queue_depth": 0, "batch_queue_depth": 0,
            # GA3C's thread shares do not exist here: agents do everything themselves (see a3c_*_share)
            "predictor_busy_share": 0.0, "predictor_compute_share": 0.0, "trainer_busy_share": 0.0,
            "learner_busy_share": 0.0,
            "agents": self.agents, "predictors": 0, "trainers": 0,
            "seconds_to_stop_score": self.seconds_to_stop_score,
            "lr": float(self.optimizer.param_groups[0]["lr"]),
            **counters,
            "loss/loss": loss_means[L["loss"]], "loss/policy_loss": loss_means[L["policy_loss"]],
            "loss/value_loss": loss_means[L["value_loss"]], "loss/entropy": loss_means[L["entropy"]],
            "batch_size": loss_means[L["batch_size"]], "grad_norm": loss_means[L["grad_norm"]],
            "policy_lag_mean": (snap["lag_sum"] - last["lag_sum"]) / updates if updates else math.nan,
            # where an A3C agent's time goes (share of wall time, mean over agents)
            "a3c_env_share": busy["env"], "a3c_forward_share": busy["forward"],
            "a3c_train_share": busy["train"], "a3c_sync_share": busy["sync"],
        }
        m["in_flight_steps"] = m["produced_steps"] - m["trained_steps"] - m["discarded_steps"]
        return m

    def write_summary(self, m: dict, status: str = "running") -> None:
        elapsed = max(m["wall_seconds"] - self.wall_offset, 1e-9)
        first = self.counters(self.first)
        summary = dict(m, status=status, stop_reason=self.stop_reason, algo="a3c",
                       fps_run_mean=(m["frames"] - first["frames"]) / elapsed,
                       samples_per_s_run_mean=(m["trained_steps"] - first["trained_steps"]) / elapsed)
        write_json_atomic(self.output_dir / "summary.json", summary)

    def publish(self, m: dict) -> None:
        self.write_summary(m)
        with open(self.output_dir / "metrics.jsonl", "a") as history:  # one line per window, as GA3C's
            history.write(json.dumps(m, default=float) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in m.items() if isinstance(v, (int, float)) and v is not None
                                and not (isinstance(v, float) and math.isnan(v))}, step=int(m["frames"]))
        if self.cfg.log.progress:
            print(f"[a3c] frames {m['frames']:>10,} | fps {m['fps']:7.0f} | pps {m['pps']:6.0f} | "
                  f"tps {m['tps']:5.1f} | score {m['score_mean_100']:8.2f} | episodes {m['episodes']:6d} | "
                  f"NA {m['agents']} | lag {m['policy_lag_mean']:.1f}", flush=True)

    def save_checkpoint(self, name: str) -> None:
        snap = self._snapshot()
        directory = self.output_dir / "checkpoints"
        directory.mkdir(parents=True, exist_ok=True)
        checkpoint = lightning_checkpoint(self.model, self.optimizer, self.counters(snap), self.wall_seconds(),
                                          self.base_updates + int(snap["updates"]), self.wandb_id)
        tmp = directory / f".{name}.tmp"
        torch.save(checkpoint, tmp)
        os.replace(tmp, directory / name)

    def _periodic_checkpoint(self) -> None:
        step = self.base_updates + int(self._snapshot()["updates"])
        self.save_checkpoint(f"step={step}.ckpt")
        self.save_checkpoint("last.ckpt")
        keep = int(self.cfg.checkpoint.keep)
        periodic = sorted((self.output_dir / "checkpoints").glob("step=*.ckpt"), key=lambda p: p.stat().st_mtime)
        for old in periodic[:-keep] if keep > 0 else periodic:
            old.unlink(missing_ok=True)

    def _init_wandb(self) -> None:
        if self.cfg.wandb.mode == "disabled":
            return
        import wandb

        w = self.cfg.wandb
        self.wandb_run = wandb.init(project=w.project, entity=w.entity, group=w.group, tags=list(w.tags) or None,
                                    name=w.name, id=self.wandb_id, resume="allow", mode=w.mode,
                                    dir=str(self.output_dir), config=OmegaConf.to_container(self.cfg, resolve=True))

    # --- the run ---------------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        max_time = parse_max_time(cfg.trainer.get("max_time"))
        max_frames = cfg.max_frames
        every = float(cfg.log.every_seconds)
        checkpoint_every = float(cfg.checkpoint.every_minutes) * 60
        self.finished = False
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        status, metrics = "failed", {}
        self.start_time = time.monotonic()
        self.first = self.last = self._snapshot()
        try:
            self._init_wandb()
            for index in range(self.agents):
                self._start_agent(index)
            # The clock starts when every agent is ready (as GA3C's starts at fit start).
            ready, deadline = 0, time.monotonic() + 120
            while ready < self.agents and self.stop_reason is None and time.monotonic() < deadline:
                ready += sum(kind == "ready" for kind, _, _ in self._drain_events(0.2))
                self._check_agents(restart=False)
            self.start_time = self.last_time = self.last_checkpoint = time.monotonic()
            self.first = self.last = self._snapshot()
            while self.stop_reason is None:
                self._drain_events(0.1)
                self._check_agents(restart=True)
                now = time.monotonic()
                snap = self._snapshot()
                if max_frames and self.counters(snap)["frames"] >= max_frames:
                    self.request_stop(f"reached max_frames={max_frames}")
                if max_time is not None and now - self.start_time >= max_time:
                    self.request_stop("trainer.max_time")
                if now - self.last_time >= every:
                    metrics = self.metrics(snap, self.last, now - self.last_time)
                    self.last, self.last_time = snap, now
                    self.publish(metrics)
                if now - self.last_checkpoint >= checkpoint_every:
                    self._periodic_checkpoint()
                    self.last_checkpoint = now
            status = "failed" if self.error else "finished"
        except BaseException as error:
            self.fail(f"A3C raised {error!r}", error)
            raise
        finally:
            self._stop_agents()
            self.finished = True
            self._drain_events(0.0)
            now = time.monotonic()
            snap = self._snapshot()
            metrics = self.metrics(snap, self.last, max(now - self.last_time, 1e-9))
            if not isinstance(self.error, FloatingPointError):  # after NaN the previous checkpoint is the good one
                try:
                    self.save_checkpoint("last.ckpt")
                except Exception as error:  # noqa: BLE001
                    log.error("final checkpoint failed: %s", error)
            self.publish(metrics)
            self.write_summary(metrics, status=status)
            if self.wandb_run is not None:
                from ga3c.run import finish_wandb

                finish_wandb()
            self.events.close()
            self.events.join_thread()
            from ga3c.server import stop_forkserver

            stop_forkserver()  # it outlives its children: a finished run leaves no process behind
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.error is not None:
            raise self.error
        log.info("finished (%s): %s frames, score_mean_100 %.2f", self.stop_reason, metrics["frames"],
                 metrics["score_mean_100"])
        return metrics

    def _check_agents(self, restart: bool) -> None:
        """Replace an agent that died without reporting an error (killed by the OS, say)."""
        for index, process in enumerate(self.processes):
            if process is not None and not process.is_alive() and self.stop_reason is None:
                self._drain_events(0.0)  # an error it reported stops the run instead
                if self.stop_reason is not None:
                    return
                log.warning("A3C agent %d (pid %s) died with exit code %s; starting a replacement",
                            index, process.pid, process.exitcode)
                self.restarts += 1
                if self.restarts > 10 * self.agents:
                    self.fail("A3C agents keep dying", RuntimeError("A3C agents keep dying; see the log"))
                    return
                self._start_agent(index)


def train_a3c(cfg: DictConfig) -> dict:
    """Train with the CPU A3C baseline; returns the final metrics (also in OUTPUT_DIR/summary.json)."""
    return A3CRun(cfg).run()
