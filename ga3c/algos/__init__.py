"""The algorithms, one module per `algo=` option, and the dispatch: train() validates a composed config and
hands it to the module of its option.

    algo=ga3c     ga3c.py       GA3C: agents, predictors and trainers around one learner (the default)
    algo=a3c      a3c.py        the CPU A3C baseline: its agent processes (a3c_agent.py), shared model and
                                optimizer statistics (a3c_model.py), measurements (a3c_monitor.py)
    algo=ceiling  ceiling.py    the env-only throughput ceiling: random actions, no network

They are siblings over the data path and run plumbing of the package's top level (ga3c/runtime.py); none
imports another, and each is imported only when its option is chosen.
"""
from __future__ import annotations

from omegaconf import DictConfig

from ga3c.config import ConfigError, validate
from ga3c.runtime import RunFailed  # noqa: F401  what train() raises when a run failed and stopped cleanly

ALGOS = ("ga3c", "a3c", "ceiling")  # conf/algo/*.yaml


def train(cfg: DictConfig) -> dict:
    """Train as the config says; returns the final summary (also in OUTPUT_DIR/summary.json)."""
    validate(cfg)
    name = cfg.algo.name
    if name == "ga3c":
        from ga3c.algos.ga3c import train_ga3c

        return train_ga3c(cfg)
    if name == "a3c":  # the CPU A3C baseline: same games, nets, loss and outputs
        from ga3c.algos.a3c import train_a3c

        return train_a3c(cfg)
    if name == "ceiling":  # the env-only throughput ceiling: random actions, no network
        from ga3c.algos.ceiling import train_ceiling

        return train_ceiling(cfg)
    raise ConfigError(f"algo.name {name!r} is not one of {list(ALGOS)}")
