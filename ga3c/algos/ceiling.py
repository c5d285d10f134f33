"""The env-only throughput ceiling (`algo=ceiling`): GA3C's agent processes stepping random actions, no network
and no training: the frames/s the envs and agent processes alone reach on this machine. The throughput benchmark
(`python -m ga3c.tools.bench`) runs it as an arm; `python train.py algo=ceiling` runs it on its own."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ga3c.config import check_output_dir
from ga3c.env import env_spec
from ga3c.learner import Learner
from ga3c.monitor import Counters, Monitor
from ga3c.runtime import StopSignals, finish_wandb, make_logger, parse_max_time, wandb_run_id
from ga3c.server import Server, stop_forkserver


def train_ceiling(cfg: DictConfig) -> dict:
    """GA3C's agent processes stepping random actions (no network, no shipping): the frames/s ceiling of
    the envs and processes alone. Same outputs as a GA3C run (summary.json, W&B), no checkpoint."""
    output_dir = Path(cfg.output_dir)
    check_output_dir(output_dir)
    torch.set_num_threads(cfg.torch_threads)
    obs_shape, obs_dtype, num_actions = env_spec(OmegaConf.to_container(cfg.game, resolve=True))
    model = instantiate(cfg.net, obs_shape=obs_shape, num_actions=num_actions)  # never used: no predictions
    counters = Counters()
    learner = Learner.from_config(model, cfg.learner, counters)
    server = Server(cfg, learner, counters, obs_shape, obs_dtype, cfg.agents, random_actions=True)
    # From here on every path out, a failing monitor or W&B start included, frees the server's shared memory.
    status, monitor, metrics = "failed", None, {}
    with StopSignals() as stop_signals:  # first Ctrl-C/SIGTERM: stop gracefully; second: kill agents, exit
        stop_signals.attach(server)
        try:
            monitor = Monitor(server, output_dir, cfg.log.every_seconds, cfg.log.progress, cfg.log.score_window)
            server.monitor = monitor
            logger = make_logger(cfg, output_dir, wandb_run_id(cfg))
            if logger:
                logger.experiment  # start W&B now: lazily, its first log would stall the monitor for seconds
            max_time = parse_max_time(cfg.trainer.get("max_time"))
            monitor.on_fit_start(SimpleNamespace(logger=logger or None), learner)
            server.start()
            while not server.stopping.wait(0.2):
                if max_time is not None and monitor.wall_seconds() >= max_time:
                    server.request_stop("trainer.max_time")
            status = "failed" if server.error else "finished"
        finally:
            try:
                server.shutdown()
                if monitor is not None:
                    metrics = monitor.tick(force=True) or monitor.latest
                    monitor.write_summary(metrics, status=status)
            finally:
                finish_wandb(exit_code=1 if status == "failed" else 0)
                server.close()
                stop_forkserver()
    if server.error is not None:
        raise server.error
    return metrics
