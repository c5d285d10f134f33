"""Train GA3C (or the A3C baseline) on a game: `python train.py game=boxing net=large`."""
from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import ga3c  # noqa: F401  light (no torch): registers the ${machine:...} resolver conf/config.yaml uses

log = logging.getLogger("ga3c")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    try:
        return run(cfg)
    except BaseException as error:
        error.ga3c_raised = True  # ours, not Hydra's: the handler at the bottom leaves it alone
        raise


def run(cfg: DictConfig) -> float:
    from ga3c.config import ConfigError, validate

    try:
        validate(cfg)  # before the heavy imports: bad input is answered in a second
        from ga3c.algos import train
        from ga3c.runtime import quiet_libraries

        quiet_libraries()
        write_run_manifest(cfg)
        summary = train(cfg)
    except ConfigError as error:  # bad input: a message naming the problem, no traceback
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)
    except Exception as error:
        if type(error).__name__ != "RunFailed":  # ga3c.runtime.RunFailed, without importing torch up front
            raise
        # The run detected a failure (NaN loss, a thread raised) and ended cleanly; the message says which.
        if HydraConfig.get().mode == RunMode.MULTIRUN:  # one bad trial must not end a sweep
            log.error("job failed: %s", error)
            return float("nan")
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(1)
    return float(summary.get(cfg.get("objective", "score_mean_100"), float("nan")))  # for Optuna sweeps


def write_run_manifest(cfg: DictConfig) -> None:
    """OUTPUT_DIR/manifest.json: the command, commit and host this run was made with (studies cite it)."""
    from pathlib import Path

    from ga3c.tools.manifest import write_manifest

    try:
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
        write_manifest(Path(cfg.output_dir), "train.py")
    except OSError as error:  # the run's own checks report an unwritable directory
        log.warning("manifest.json not written: %s", error)


def check_run_dir_override(argv: list[str]) -> None:
    """Hydra creates the run directory before any of our code runs: check the directory a user named (or
    ./outputs, ./multirun) first, and say plainly what is wrong."""
    from pathlib import Path

    from ga3c.config import ConfigError, check_creatable

    multirun = "-m" in argv or "--multirun" in argv
    key = "hydra.sweep.dir=" if multirun else "hydra.run.dir="
    given = [a.split("=", 1)[1] for a in argv if a.startswith(key)]  # the last one wins, as in Hydra
    wanted = given[-1] if given else ("multirun" if multirun else "outputs")
    try:
        check_creatable(Path(wanted), "output directory")
    except ConfigError as error:
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)


def run_hydra() -> None:
    """main() with Hydra's own failures (an override of a key that does not exist, a malformed override, a
    missing option, a run directory that cannot be created) said in one line, exit code 2, like bad values.
    HYDRA_FULL_ERROR=1 makes Hydra raise them instead of printing its multi-line report; a user who set it
    gets Hydra's full traceback as before."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` prints every thread's stack
    user_wants_traces = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    check_run_dir_override(sys.argv[1:])
    try:
        main()
    except Exception as error:
        if getattr(error, "ga3c_raised", False) or user_wants_traces:
            raise
        from ga3c.config import hydra_error_message

        message = hydra_error_message(error)
        if message is None:  # not a config problem: a bug, with its traceback
            raise
        print(f"ga3c: error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run_hydra()
