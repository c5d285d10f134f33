"""Checks of a composed config, before any process starts: bad input gets a message naming the key."""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A config value is invalid. The message names the key and what is allowed."""


def has_cuda_gpu() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch (validation runs before the heavy imports)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine_counts(cores: int, gpu: bool) -> dict[str, int]:
    """Starting counts for a machine. With a GPU, the paper's 32/2/2 (batches >= 32). Without one, the cores
    are shared by envs, acting and training, and fewer threads batch better: 8 agents a core (16 on 2 cores),
    one predictor per 4 cores, 2 trainers, batches >= 128 (on 2 cores 16/1/2 ran Pong at ~7,900 frames/s
    against ~2,650 with 32/2/2 and a policy lag of 5-11 updates against ~26)."""
    if gpu:
        return dict(agents=max(32, 4 * cores), predictors=2, trainers=2, training_min_batch=32)
    return dict(agents=min(64, 8 * cores), predictors=max(1, cores // 4), trainers=2, training_min_batch=128)


def _machine_count(key: str) -> int:
    return machine_counts(usable_cores(), has_cuda_gpu())[key]


# `agents: ${machine:agents}` in conf/config.yaml: counts derived from this machine when the config is read.
if not OmegaConf.has_resolver("machine"):
    OmegaConf.register_new_resolver("machine", _machine_count)

PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "32", "bf16", "16", "64-true", "64")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(cfg: DictConfig) -> None:
    def number(key: str):
        value = cfg
        for part in key.split("."):
            value = value[part]
        _require(isinstance(value, (int, float)) and not isinstance(value, bool),
                 f"{key} must be a number, got {value!r}")
        return value

    for key in ("agents", "predictors", "trainers", "t_max", "prediction_max_batch", "training_max_batch",
                "rollout_slots", "batch_queue_size", "torch_threads"):
        _require(isinstance(cfg[key], int) and not isinstance(cfg[key], bool) and cfg[key] >= 1,
                 f"{key} must be an integer >= 1, got {cfg[key]!r}")
    _require(isinstance(cfg.training_min_batch, int) and cfg.training_min_batch >= 0,
             f"training_min_batch must be an integer >= 0, got {cfg.training_min_batch!r}")
    _require(cfg.training_min_batch <= cfg.training_max_batch,
             f"training_min_batch ({cfg.training_min_batch}) must not exceed training_max_batch "
             f"({cfg.training_max_batch})")
    _require(cfg.agents <= 4096, f"agents must be at most 4096, got {cfg.agents}")
    _require(cfg.t_max <= 1000, f"t_max must be at most 1000, got {cfg.t_max}")
    gamma = number("learner.gamma")
    _require(0 <= gamma <= 1, f"learner.gamma must be in [0, 1], got {gamma}")
    lam = number("learner.gae_lambda")
    _require(0 <= lam <= 1, f"learner.gae_lambda must be in [0, 1], got {lam}")
    _require(number("learner.beta") >= 0, f"learner.beta must be >= 0, got {cfg.learner.beta}")
    _require(number("learner.log_epsilon") >= 0, f"learner.log_epsilon must be >= 0, got {cfg.learner.log_epsilon}")
    _require(number("learner.grad_clip") >= 0, f"learner.grad_clip must be >= 0 (0 = off), got {cfg.learner.grad_clip}")
    _require(number("learner.reward_clip") >= 0, f"learner.reward_clip must be >= 0, got {cfg.learner.reward_clip}")
    _require(number("learner.optimizer.lr") > 0, f"learner.optimizer.lr must be > 0, got {cfg.learner.optimizer.lr}")
    _require(cfg.learner.get("correction", "none") in ("none", "vtrace"),
             f"learner.correction must be 'none' or 'vtrace', got {cfg.learner.get('correction')!r}")
    for key in ("rho_bar", "c_bar"):
        _require(number(f"learner.{key}") > 0, f"learner.{key} must be > 0, got {cfg.learner[key]}")
    _require(isinstance(cfg.learner.normalize_advantage, bool),
             f"learner.normalize_advantage must be true or false, got {cfg.learner.normalize_advantage!r}")
    _require(cfg.learner.reduction in ("sum", "mean"),
             f"learner.reduction must be 'sum' or 'mean', got {cfg.learner.reduction!r}")
    if cfg.max_frames is not None:
        _require(isinstance(cfg.max_frames, int) and cfg.max_frames > 0,
                 f"max_frames must be a positive integer or null, got {cfg.max_frames!r}")
    if cfg.stop_score is not None:
        number("stop_score")
    precision = str(cfg.trainer.get("precision", "auto"))
    _require(precision in PRECISIONS, f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    _require(cfg.wandb.mode in ("online", "offline", "disabled"),
             f"wandb.mode must be one of online, offline, disabled; got {cfg.wandb.mode!r}")
    _require(number("log.every_seconds") > 0, f"log.every_seconds must be > 0, got {cfg.log.every_seconds}")
    if cfg.ckpt_path is not None:
        path = Path(str(cfg.ckpt_path))
        _require(path.is_file(), f"ckpt_path {str(path)!r} does not exist or is not a file")


def check_output_dir(path: Path) -> None:
    """Fail at start, not at the first checkpoint, when the run directory cannot be written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write_probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"output directory {str(path)!r} is not writable: {error.strerror or error}") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"output directory {str(path)!r} is not writable")
