"""One training run from a composed config: build the pieces, fit, and always tear down cleanly."""
from __future__ import annotations

import ctypes
import logging
import math
import os
import signal
import threading
from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader

from ga3c.config import ConfigError, check_output_dir, validate
from ga3c.env import env_spec
from ga3c.learner import AUTOCAST_DTYPES, Learner, resolve_precision
from ga3c.networks import build_network
from ga3c.monitor import Counters, Monitor
from ga3c.server import Server, stop_forkserver
from ga3c.trainer import ExperienceDataset

log = logging.getLogger(__name__)


class RunFailed(RuntimeError):
    """The run stopped because something failed (a thread raised, the loss went NaN); everything was shut down
    cleanly and the message says what happened."""


class RunState(pl.Callback):
    """Starts the server once Lightning has restored a checkpoint, and saves what a resumed run needs
    (counters, wall time, W&B id) in every checkpoint."""

    def __init__(self, server: Server, monitor: Monitor, wandb_id: str | None):
        self.server, self.monitor, self.wandb_id = server, monitor, wandb_id
        self.extra: dict[str, object] = {}   # other components add their state (the auto-tuner)

    def on_fit_start(self, trainer, learner) -> None:
        # After Lightning restored the checkpoint (so versions continue) and before it asks for data.
        learner.version = trainer.global_step
        self.server.start()

    def state_dict(self) -> dict:
        return dict(counters=self.server.counter_totals(), wall_seconds=self.monitor.wall_seconds(),
                    wandb_id=self.wandb_id, seed_counter=self.server.seed_counter, **self.extra)

    def load_state_dict(self, state: dict) -> None:
        self.server.counters.load_state_dict(state.get("counters", {}))
        self.monitor.wall_offset = float(state.get("wall_seconds", 0.0))
        self.server.seed_counter = int(state.get("seed_counter", 0))  # new agents get new env seeds
        own = ("counters", "wall_seconds", "wandb_id", "seed_counter")
        self.extra.update({k: v for k, v in state.items() if k not in own})


def game_spec(cfg: DictConfig) -> tuple:
    """(obs shape, dtype, actions) of the configured game; a game that cannot be made is a config error."""
    try:
        return env_spec(OmegaConf.to_container(cfg.game, resolve=True))
    except Exception as error:  # noqa: BLE001 - gymnasium raises many kinds for a bad id
        raise ConfigError(f"game.id {cfg.game.id!r} cannot be made: {type(error).__name__}: {error}") from None


def load_checkpoint_state(path: str) -> dict:
    """Read a checkpoint's run state early, so a bad file fails with a message before anything starts."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ConfigError(f"ckpt_path {path!r} is not a readable checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"ckpt_path {path!r} is not a ga3c Lightning checkpoint (no state_dict in it)")
    for key, state in checkpoint.get("callbacks", {}).items():
        if key.startswith("RunState"):
            return state
    return {}


def bound_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core) and keeps freed memory in
    every one; with predictor and trainer threads coming and going under the auto-tuner, the learner's resident
    memory crept up by ~13 % over a 30-minute soak. A fixed, small number of arenas bounds that."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # -8 = M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to bound
        pass


def make_logger(cfg: DictConfig, output_dir: Path, wandb_id: str | None):
    if cfg.wandb.mode == "disabled":
        return False
    from pytorch_lightning.loggers import WandbLogger

    return WandbLogger(project=cfg.wandb.project, entity=cfg.wandb.entity, group=cfg.wandb.group,
                       tags=list(cfg.wandb.tags) or None, name=cfg.wandb.name, id=wandb_id, save_dir=str(output_dir),
                       mode=cfg.wandb.mode, config=OmegaConf.to_container(cfg, resolve=True))


def finish_wandb() -> None:
    """End the W&B run and its service process so the next job of a multirun starts clean."""
    try:
        import wandb

        if wandb.run is not None:
            wandb.finish()
        wandb.teardown()
    except Exception as error:  # noqa: BLE001 - tracking must never turn a finished run into a failure
        log.warning("W&B did not finish cleanly: %s", error)


class StopSignals:
    """First SIGINT/SIGTERM: stop gracefully (final checkpoint, summary, W&B). Second: exit at once,
    killing the agent processes first so none is left behind. Installed before anything slow starts, so a
    signal during start-up is honoured as soon as the server exists."""

    def __init__(self):
        self.server: Server | None = None
        self.previous: dict = {}
        self.received: list[str] = []

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def attach(self, server: Server) -> None:
        self.server = server
        if self.received:
            server.request_stop(self.received[0])

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if len(self.received) == 1:
            print(f"\n[ga3c] {name}: stopping (final checkpoint and summary); again to exit at once", flush=True)
            if self.server is not None:
                self.server.request_stop(name)
            return
        if self.server is not None:
            for handle in list(self.server.agents) + list(self.server._retiring.values()):
                if handle is not None and handle.process.is_alive():
                    handle.process.kill()
        stop_forkserver()
        os._exit(128 + signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def train(cfg: DictConfig) -> dict:
    """Train as the config says; returns the final summary (also in OUTPUT_DIR/summary.json)."""
    validate(cfg)
    if cfg.algo.name == "a3c":  # the CPU A3C baseline: same games, nets, loss and outputs
        from ga3c.a3c import train_a3c

        return train_a3c(cfg)
    if cfg.algo.name == "ceiling":  # the env-only throughput ceiling: random actions, no network
        from ga3c.bench import train_ceiling

        return train_ceiling(cfg)
    with StopSignals() as signals:
        return _train_ga3c(cfg, signals)


def _train_ga3c(cfg: DictConfig, signals: StopSignals) -> dict:
    output_dir = Path(cfg.output_dir)
    check_output_dir(output_dir)
    bound_malloc_arenas()
    resumed = load_checkpoint_state(cfg.ckpt_path) if cfg.ckpt_path else {}
    wandb_id = cfg.wandb.id or resumed.get("wandb_id")
    if cfg.wandb.mode != "disabled" and wandb_id is None:
        import secrets

        wandb_id = secrets.token_hex(4)  # chosen here so checkpoints can name the run to resume
    pl.seed_everything(cfg.seed, workers=False, verbose=False)
    torch.set_num_threads(cfg.torch_threads)

    obs_shape, obs_dtype, num_actions = game_spec(cfg)
    model = build_network(cfg.net, obs_shape, num_actions)
    counters = Counters()
    lc = cfg.learner
    learner = Learner(model, instantiate(lc.optimizer), gamma=lc.gamma, beta=lc.beta, log_epsilon=lc.log_epsilon,
                      value_coef=lc.value_coef, reduction=lc.reduction, grad_clip=lc.grad_clip,
                      reward_clip=lc.reward_clip, counters=counters, correction=lc.correction, rho_bar=lc.rho_bar,
                      c_bar=lc.c_bar, gae_lambda=lc.gae_lambda, normalize_advantage=lc.normalize_advantage)
    max_agents = max(cfg.agents, int(cfg.autotune.get("max_agents", 0) or 0))
    server = Server(cfg, learner, counters, obs_shape, obs_dtype, max_agents)
    signals.attach(server)
    monitor = Monitor(server, output_dir, cfg.log.every_seconds, cfg.log.progress, cfg.log.score_window,
                      cfg.stop_score)
    server.monitor = monitor
    run_state = RunState(server, monitor, wandb_id)
    checkpoints = pl.callbacks.ModelCheckpoint(
        dirpath=output_dir / "checkpoints", filename="{step}", save_last=True, save_top_k=cfg.checkpoint.keep,
        monitor="step", mode="max", train_time_interval=timedelta(minutes=cfg.checkpoint.every_minutes))
    callbacks = [run_state, monitor, checkpoints]
    if cfg.get("video") and cfg.video.every_minutes:  # gameplay videos while training (off by default)
        from ga3c.video import make_training_video

        callbacks.append(make_training_video(cfg, server, output_dir))
    if cfg.autotune.name != "off":
        from ga3c.autotune import make_autotuner

        callbacks.append(make_autotuner(cfg, server, monitor, run_state))
    logger = make_logger(cfg, output_dir, wandb_id)
    trainer_kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_kwargs["precision"] = resolve_precision(trainer_kwargs.get("precision", "auto"), model,
                                                    str(trainer_kwargs.get("accelerator", "auto")))
    learner.autocast_dtype = AUTOCAST_DTYPES.get(trainer_kwargs["precision"])
    log.info("precision: %s", trainer_kwargs["precision"])
    trainer = pl.Trainer(**trainer_kwargs | dict(logger=logger), max_epochs=-1, callbacks=callbacks,
                         default_root_dir=str(output_dir), num_sanity_val_steps=0, log_every_n_steps=1_000_000)
    status = "failed"
    try:
        loader = DataLoader(ExperienceDataset(server), batch_size=None, num_workers=0)
        try:
            trainer.fit(learner, loader, ckpt_path=cfg.ckpt_path)
        except SIGTERMException:  # Lightning's own SIGTERM handling; ours already asked for a graceful stop
            server.request_stop("SIGTERM")
        if server.stop_reason is None:
            server.request_stop("trainer.max_time" if trainer.should_stop else "fit ended")
        status = "failed" if server.error else "finished"
    except Exception as error:  # raised inside Lightning's loop (the loss check, a callback): stop cleanly
        server.fail(f"training raised {error!r}", error)
        if not isinstance(error, FloatingPointError):
            log.exception("training raised")
    finally:
        server.shutdown()
        log.info("agents, predictors and trainers stopped")
        if server.error is None or not isinstance(server.error, FloatingPointError):
            # The last good state; after NaN the previous checkpoint is the good one and stays as it is.
            try:
                trainer.save_checkpoint(output_dir / "checkpoints" / "last.ckpt")
            except Exception as error:  # noqa: BLE001
                log.error("final checkpoint failed: %s", error)
        metrics = monitor.tick(force=True) or monitor.latest
        monitor.write_summary(metrics, status=status)
        log.info("final checkpoint and summary written")
        finish_wandb()
        server.close()
        stop_forkserver()
    if server.error is not None:
        if isinstance(server.error, FloatingPointError):
            raise RunFailed(f"{server.error}") from server.error
        raise RunFailed(f"{server.stop_reason}; see the log for the traceback") from server.error
    log.info("finished (%s): %s frames, score_mean_100 %.2f", server.stop_reason, metrics["frames"],
             metrics["score_mean_100"] if not math.isnan(metrics["score_mean_100"]) else float("nan"))
    return metrics
