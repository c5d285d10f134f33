"""The run plumbing every algorithm shares (GA3C, A3C, the env-only ceiling): the game's spec, checkpoint reading,
W&B (logger, run id, finish), stop signals, the time limit, the malloc arena bound and `RunFailed`.

It sits below the algorithm modules (ga3c/algos/: ga3c.py, a3c.py, ceiling.py) and imports none of them.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Protocol

import torch
from omegaconf import DictConfig, OmegaConf

from ga3c.config import ConfigError
from ga3c.env import env_spec
from ga3c.server import stop_forkserver

log = logging.getLogger(__name__)


class RunFailed(RuntimeError):
    """The run stopped because something failed (a thread raised, the loss went NaN); everything was shut down
    cleanly and the message says what happened."""


def game_spec(cfg: DictConfig) -> tuple:
    """(obs shape, dtype, actions) of the configured game; a game that cannot be made is a config error."""
    try:
        return env_spec(OmegaConf.to_container(cfg.game, resolve=True))
    except Exception as error:  # noqa: BLE001 - gymnasium raises many kinds for a bad id
        raise ConfigError(f"game.id {cfg.game.id!r} cannot be made: {type(error).__name__}: {error}") from None


# --- checkpoints -----------------------------------------------------------------------------------------
def read_checkpoint(path: str) -> dict:
    """A Lightning-format checkpoint, read early, so a bad file fails with a message before anything starts."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ConfigError(f"ckpt_path {path!r} is not a readable checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"ckpt_path {path!r} is not a ga3c Lightning checkpoint (no state_dict in it)")
    return checkpoint


def checkpoint_run_state(checkpoint: dict) -> dict:
    """The run state (counters, wall time, W&B id, ...) GA3C's RunState callback saved in a checkpoint; A3C
    writes the same entry, so frames keep counting across algorithms."""
    for key, state in checkpoint.get("callbacks", {}).items():
        if key.startswith("RunState"):
            return state
    return {}


def load_checkpoint_state(path: str) -> dict:
    """Read a checkpoint's run state early, so a bad file fails with a message before anything starts."""
    return checkpoint_run_state(read_checkpoint(path))


# --- W&B -------------------------------------------------------------------------------------------------
def wandb_run_id(cfg: DictConfig, resumed_id: str | None = None) -> str | None:
    """The W&B run id: the configured one, else the resumed run's, else (W&B on) a new one chosen here, so
    checkpoints can name the run to resume."""
    wandb_id = cfg.wandb.id or resumed_id
    if cfg.wandb.mode != "disabled" and wandb_id is None:
        import secrets

        wandb_id = secrets.token_hex(4)
    return wandb_id


def make_logger(cfg: DictConfig, output_dir: Path, wandb_id: str | None):
    """Lightning's W&B logger for the run, or False when W&B is disabled."""
    if cfg.wandb.mode == "disabled":
        return False
    import wandb
    from pytorch_lightning.loggers import WandbLogger

    # W&B's banner and end-of-run tables repeat what summary.json and our progress line say; offline, its
    # notice even points at the wrong switch (WANDB_MODE, not wandb.mode). Online keeps the run's link.
    quiet = dict(silent=True) if cfg.wandb.mode == "offline" else dict(quiet=True)
    logger = WandbLogger(project=cfg.wandb.project, entity=cfg.wandb.entity, group=cfg.wandb.group,
                         tags=list(cfg.wandb.tags) or None, name=cfg.wandb.name, id=wandb_id, save_dir=str(output_dir),
                         mode=cfg.wandb.mode, config=OmegaConf.to_container(cfg, resolve=True),
                         settings=wandb.Settings(**quiet))
    # Lightning always passes `anonymous` on to wandb.init, which warns that the setting has no effect.
    getattr(logger, "_wandb_init", {}).pop("anonymous", None)
    return logger


def start_wandb(logger, mode: str) -> None:
    """Start the W&B run now, before any agent runs (a W&B that cannot start fails the start-up, and its
    seconds of start-up do not stall the monitor's first window), and say in one line where it writes."""
    if not logger:
        return
    run = logger.experiment
    where = Path(run.dir).parent  # .../wandb/offline-run-DATE-ID (run.dir is its files/ folder)
    if mode == "offline":
        log.info("W&B offline run: `wandb sync %s` uploads it", where)
    else:
        log.info("W&B run %s", getattr(run, "url", None) or where)


def quiet_libraries() -> None:
    """Keep the console to our lines. What we cause is fixed where we cause it (W&B's settings in make_logger,
    weights_only at the final save); this filters what libraries print whatever we pass."""
    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_lightning_notices)
    # Lightning's own utilities/_pytree.py uses torch's deprecated LeafSpec: a FutureWarning at the first batch.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)


def _lightning_notices(record: logging.LogRecord) -> bool:
    """Lightning's adverts for its cloud products (printed for every Trainer without LitLogger/litmodels) and
    its list of accelerators this run does not use; ga3c.algos.ga3c logs the device and precision in one line."""
    return not str(record.msg).startswith(("💡", "GPU available:", "TPU available:", "HPU available:"))


def finish_wandb(exit_code: int = 0) -> None:
    """End the W&B run (marked failed with a non-zero exit code) and its service process, so the next job of a
    multirun starts clean and no run is left unfinished."""
    try:
        import wandb
    except ImportError:   # not installed (a machine running with wandb.mode=disabled): no run to finish
        return
    try:
        if wandb.run is not None:
            wandb.finish(exit_code=exit_code)
        wandb.teardown()
    except Exception as error:  # noqa: BLE001 - tracking must never turn a finished run into a failure
        log.warning("W&B did not finish cleanly: %s", error)


# --- limits and the process ------------------------------------------------------------------------------
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


def bound_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core) and keeps freed memory in
    every one; with predictor and trainer threads coming and going under the auto-tuner, the learner's resident
    memory crept up by ~13 % over a 30-minute soak. A fixed, small number of arenas bounds that."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # -8 = M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to bound
        pass


class Stoppable(Protocol):
    """What StopSignals drives: the GA3C Server, the A3C run (and so algo=ceiling, which uses a Server)."""

    def request_stop(self, reason: str) -> None: ...   # stop gracefully: final checkpoint, summary, W&B

    def exit_now(self) -> None: ...   # kill the agent processes and free shared memory, without blocking


class StopSignals:
    """First SIGINT/SIGTERM: stop gracefully (final checkpoint, summary, W&B). Second: exit at once,
    killing the agent processes first so none is left behind. Installed before anything slow starts, so a
    signal during start-up is honoured as soon as the run is attached."""

    def __init__(self, prefix: str = "ga3c"):
        self.prefix = prefix          # the name the console line starts with
        self.run: Stoppable | None = None
        self.previous: dict = {}
        self.received: list[str] = []

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def attach(self, run: Stoppable) -> None:
        self.run = run
        if self.received:
            run.request_stop(self.received[0])

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if len(self.received) == 1:
            print(f"\n[{self.prefix}] {name}: stopping (final checkpoint and summary); again to exit at once",
                  flush=True)
            if self.run is not None:
                self.run.request_stop(name)
            return
        if self.run is not None:
            try:  # os._exit skips every finally: kill and free here, not by the resource tracker
                self.run.exit_now()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        stop_forkserver(timeout=0)
        os._exit(128 + signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
