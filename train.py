"""Train GA3C (or the A3C baseline) on a game: `python train.py game=boxing net=large`."""
from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import ga3c  # noqa: F401  light (no torch): registers the ${machine:...} resolver conf/config.yaml uses

log = logging.getLogger("ga3c")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from ga3c.config import ConfigError, validate

    try:
        validate(cfg)  # before the heavy imports: bad input is answered in a second
        from ga3c.run import train

        summary = train(cfg)
    except ConfigError as error:  # bad input: a message naming the problem, no traceback
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)
    except Exception as error:
        if type(error).__name__ != "RunFailed":  # ga3c.run.RunFailed, without importing torch up front
            raise
        # The run detected a failure (NaN loss, a thread raised) and ended cleanly; the message says which.
        if HydraConfig.get().mode == RunMode.MULTIRUN:  # one bad trial must not end a sweep
            log.error("job failed: %s", error)
            return float("nan")
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(1)
    return float(summary.get(cfg.get("objective", "score_mean_100"), float("nan")))  # for Optuna sweeps


def check_run_dir_override(argv: list[str]) -> None:
    """Hydra creates the run directory before any of our code runs and fails with a traceback when it
    cannot: check the directory a user named (or ./outputs) first, and say plainly what is wrong."""
    import os
    from pathlib import Path

    wanted = next((a.split("=", 1)[1] for a in argv if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))),
                  "outputs")
    path = Path(wanted).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        reason = "is not a directory" if not existing.is_dir() else "is not writable"
        print(f"ga3c: error: output directory {wanted!r} cannot be created: {str(existing)!r} {reason}",
              file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    check_run_dir_override(sys.argv[1:])
    main()
