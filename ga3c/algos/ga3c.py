"""GA3C's run (`algo=ga3c`): build the server, the learner and Lightning's trainer from a composed config, fit,
and always tear down cleanly."""
from __future__ import annotations

import logging
import math
from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader

from ga3c.config import ConfigError, check_output_dir
from ga3c.learner import AUTOCAST_DTYPES, Learner, resolve_precision
from ga3c.monitor import CollapseWatch, Counters, Monitor
from ga3c.networks import build_network
from ga3c.runtime import (RunFailed, StopSignals, bound_malloc_arenas, finish_wandb, game_spec,
                          load_checkpoint_state, make_logger, start_wandb, wandb_run_id)
from ga3c.server import Server, stop_forkserver
from ga3c.trainer import ExperienceDataset

log = logging.getLogger(__name__)


class RunState(pl.Callback):
    """Starts the server once Lightning has restored a checkpoint, and saves what a resumed run needs
    (counters, wall time, W&B id) in every checkpoint."""

    def __init__(self, server: Server, monitor: Monitor, wandb_id: str | None):
        self.server, self.monitor, self.wandb_id = server, monitor, wandb_id
        self.fit_started = False  # the final checkpoint is written only once Lightning has set up the model
        self.extra: dict[str, object] = {}   # other components add their state (the auto-tuner)

    def on_fit_start(self, trainer, learner) -> None:
        # After Lightning restored the model and callbacks (the learner's version continues: on_load_checkpoint)
        # and before it asks for data. trainer.global_step is still 0 here on a resume (loops restore later).
        self.fit_started = True
        self.server.start()

    def state_dict(self) -> dict:
        return dict(counters=self.server.counter_totals(), wall_seconds=self.monitor.wall_seconds(),
                    wandb_id=self.wandb_id, seed_counter=self.server.seed_counter,
                    score_window=self.monitor.score_window.state_dict(), **self.extra)

    def load_state_dict(self, state: dict) -> None:
        self.server.counters.load_state_dict(state.get("counters", {}))
        self.monitor.wall_offset = float(state.get("wall_seconds", 0.0))
        self.server.seed_counter = int(state.get("seed_counter", 0))  # new agents get new env seeds
        self.monitor.score_window.load_state_dict(state.get("score_window", {}))
        own = ("counters", "wall_seconds", "wandb_id", "seed_counter", "score_window")
        self.extra.update({k: v for k, v in state.items() if k not in own})


def train_ga3c(cfg: DictConfig) -> dict:
    """Train with GA3C; returns the final summary (also in OUTPUT_DIR/summary.json)."""
    with StopSignals() as signals:
        return _train_ga3c(cfg, signals)


def _train_ga3c(cfg: DictConfig, signals: StopSignals) -> dict:
    output_dir = Path(cfg.output_dir)
    check_output_dir(output_dir)
    bound_malloc_arenas()
    resumed = load_checkpoint_state(cfg.ckpt_path) if cfg.ckpt_path else {}
    wandb_id = wandb_run_id(cfg, resumed.get("wandb_id"))
    pl.seed_everything(cfg.seed, workers=False, verbose=False)
    torch.set_num_threads(cfg.torch_threads)

    obs_shape, obs_dtype, num_actions = game_spec(cfg)
    model = build_network(cfg.net, obs_shape, num_actions)
    counters = Counters()
    learner = Learner.from_config(model, cfg.learner, counters)
    max_agents = max(cfg.agents, int(cfg.autotune.get("max_agents", 0) or 0))
    # Nothing above holds an OS resource. The server's shared memory and pipes come first; from here on every
    # path out, a failure at any stage included, goes through release() below.
    try:
        server = Server(cfg, learner, counters, obs_shape, obs_dtype, max_agents)  # frees what it made if it fails
    except OSError as error:  # /dev/shm full, out of file descriptors: the machine, not a bug
        raise RunFailed(f"start-up failed: {error}") from error
    signals.attach(server)
    monitor = trainer = run_state = failure = None
    try:
        monitor = Monitor(server, output_dir, cfg.log.every_seconds, cfg.log.progress, cfg.log.score_window,
                          cfg.stop_score, CollapseWatch.from_config(cfg, num_actions))
        server.monitor = monitor
        run_state = RunState(server, monitor, wandb_id)
        checkpoints = pl.callbacks.ModelCheckpoint(
            dirpath=output_dir / "checkpoints", filename="step-{step}", auto_insert_metric_name=False, save_last=True, save_top_k=cfg.checkpoint.keep,
            monitor="step", mode="max", train_time_interval=timedelta(minutes=cfg.checkpoint.every_minutes))
        callbacks = [run_state, monitor, checkpoints]
        if cfg.get("video") and cfg.video.every_minutes:  # gameplay videos while training (off by default)
            from ga3c.video import make_training_video

            callbacks.append(make_training_video(cfg, server, output_dir))
        if cfg.autotune.name != "off":
            from ga3c.autotune import make_autotuner

            callbacks.append(make_autotuner(cfg, server, monitor, run_state))
        logger = make_logger(cfg, output_dir, wandb_id)
        trainer = build_trainer(cfg, model, learner, logger, callbacks, output_dir)
        start_wandb(logger, cfg.wandb.mode)
        loader = DataLoader(ExperienceDataset(server, cfg.learner.epochs), batch_size=None, num_workers=0)
        try:
            trainer.fit(learner, loader, ckpt_path=cfg.ckpt_path)
        except SIGTERMException:  # Lightning's own SIGTERM handling; ours already asked for a graceful stop
            server.request_stop("SIGTERM")
        if server.stop_reason is None:
            server.request_stop("trainer.max_time" if trainer.should_stop else "fit ended")
    except ConfigError as error:  # a trainer.* value Lightning refused: bad input, said in one line once released
        server.error = error  # the summary says failed; train.py prints the message (no second log line)
        raise
    except Exception as error:  # raised while starting or inside Lightning's loop (the loss check, a callback)
        failure = f"training raised {error!r}"  # the run may have been stopping already: say this, not why
        server.fail(failure, error)
        if not isinstance(error, FloatingPointError):
            log.exception("training raised")
    finally:
        checkpoint_error = release(server, monitor, trainer, run_state, output_dir)
    if server.error is None and checkpoint_error is not None:
        raise RunFailed(f"the final checkpoint could not be written: {checkpoint_error}")
    if server.error is not None:
        if isinstance(server.error, FloatingPointError):
            raise RunFailed(f"{server.error}") from server.error
        raise RunFailed(f"{failure or server.stop_reason}; see the log for the traceback") from server.error
    metrics = monitor.latest
    log.info("finished (%s): %s frames, score_mean_100 %.2f", server.stop_reason, metrics["frames"],
             metrics["score_mean_100"] if not math.isnan(metrics["score_mean_100"]) else float("nan"))
    return metrics


def build_trainer(cfg: DictConfig, model, learner: Learner, logger, callbacks: list, output_dir: Path) -> pl.Trainer:
    """Lightning's Trainer from trainer.*; a value it refuses (one validate() could not judge) is bad input."""
    trainer_kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_kwargs["precision"] = resolve_precision(trainer_kwargs.get("precision", "auto"), model,
                                                    str(trainer_kwargs.get("accelerator", "auto")))
    learner.autocast_dtype = AUTOCAST_DTYPES.get(trainer_kwargs["precision"])
    try:
        trainer = pl.Trainer(**trainer_kwargs | dict(logger=logger), max_epochs=-1, callbacks=callbacks,
                             default_root_dir=str(output_dir), num_sanity_val_steps=0, log_every_n_steps=1_000_000)
    except Exception as error:  # noqa: BLE001 - Lightning raises TypeError, ValueError or its own exceptions
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"trainer: Lightning refused the settings: {reason}") from None
    log.info("learner on %s, precision %s", trainer.strategy.root_device, trainer_kwargs["precision"])
    return trainer


def release(server: Server, monitor: Monitor | None, trainer: pl.Trainer | None, run_state: RunState | None,
            output_dir: Path) -> Exception | None:
    """Stop and free everything of a run, however far it got: processes, threads, shared memory, pipes, the
    forkserver, the W&B run. Each step runs even if one before it fails. Returns why the final checkpoint
    could not be written, if it could not."""
    checkpoint_error = None
    try:
        server.shutdown()
        log.info("agents, predictors and trainers stopped")
        fit_started = run_state is not None and run_state.fit_started
        if fit_started and (server.error is None or not isinstance(server.error, FloatingPointError)):
            # The last good state; after NaN the previous checkpoint is the good one and stays as it is.
            try:
                trainer.save_checkpoint(output_dir / "checkpoints" / "last.ckpt", weights_only=False)
            except FloatingPointError as error:  # the weights went non-finite since the last window's check
                server.fail(str(error), error)
            except Exception as error:  # noqa: BLE001 - reported as the run's failure once all is released
                log.error("final checkpoint failed: %s", error)
                checkpoint_error = error
        if monitor is not None:
            metrics = monitor.tick(force=True) or monitor.latest
            failed = server.error is not None or checkpoint_error is not None
            monitor.write_summary(metrics, status="failed" if failed else "finished")  # the last window too
            log.info("final checkpoint and summary written" if fit_started else "summary written")
    except Exception:  # noqa: BLE001 - the releases below must still run
        log.exception("writing the final checkpoint and summary failed")
    finally:
        failed = server.error is not None or checkpoint_error is not None
        finish_wandb(exit_code=1 if failed else 0)
        server.close()
        stop_forkserver()
    return checkpoint_error
