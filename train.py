"""Train GA3C (or the A3C baseline) on a game: `python train.py game=boxing net=large`."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from ga3c.config import ConfigError
    from ga3c.run import train

    try:
        summary = train(cfg)
    except ConfigError as error:
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)
    return float(summary.get(cfg.get("objective", "score_mean_100"), float("nan")))  # for Optuna sweeps


if __name__ == "__main__":
    main()
