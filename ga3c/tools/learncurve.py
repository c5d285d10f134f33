"""The learning benchmark: score against wall time, over seeds, for one or more arms.

    python -m ga3c.tools.learncurve game=pong seeds=3 minutes=30
    python -m ga3c.tools.learncurve game=boxing seeds=3 minutes=60 learncurve.arms=[ga3c,a3c]     # RQ1
    python -m ga3c.tools.learncurve game=cartpole seeds=3 minutes=1 hydra.run.dir=runs/cp   # then again: resumes

Each run is its own `python train.py` process (the overrides given here, the arm's, `seed=`, the budget as
`trainer.max_time`), one after another, into OUTPUT_DIR/ARM/seedN. A run found there that ended on this same
budget is not run again, so a study can be extended or resumed (its metrics.jsonl and summary.json are all it
needs); any other (interrupted, failed, another budget) is renamed seedN.earlier-K and run again.
`learncurve.analyze_only=true` only reads them. From every run's metrics.jsonl it writes into OUTPUT_DIR:
    learncurve.md    wall time and frames to each threshold, per run and the median over seeds (a seed that
                     never got there counts as slower than the budget); the final score; frames/s
    learncurve.png   score against wall time and against frames: one thin line per seed, the median thick
    learncurve.json  the same numbers; curves.csv the sampled curves behind the plot
and the same (table, plot, medians) to W&B as one run of job_type=learncurve in the group learncurve-GAME.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import ga3c  # noqa: F401  registers ${machine:...}
from ga3c.tools import REPO
from ga3c.tools.runs import pyplot, read_json, read_summary
from ga3c.tools.runs import read_curve as read_curve_columns

log = logging.getLogger(__name__)
OWN_KEYS = ("seeds", "minutes", "learncurve.", "hydra.", "wandb.group", "seed", "trainer.max_time", "max_frames")


def max_time(minutes: float) -> str:
    seconds = max(1, int(round(minutes * 60)))
    return f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def user_overrides() -> list[str]:
    """The overrides given on the command line that are training keys (they apply to every arm)."""
    return [o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith(OWN_KEYS)]


def seed_numbers(seeds) -> list[int]:
    """`seeds` (a count N, or a list of seed numbers) as the seeds to run: 0 .. N-1, or the list. A list adds
    seeds to a study whose others ran elsewhere (seeds=[2] beside results holding seeds 0 and 1)."""
    seeds = OmegaConf.to_container(seeds) if OmegaConf.is_list(seeds) else seeds
    return list(range(seeds)) if isinstance(seeds, int) else sorted(int(seed) for seed in seeds)


def run_command(cfg: DictConfig, arm: str, arm_overrides: list[str], seed: int, run_dir: Path) -> list[str]:
    overrides = user_overrides() + list(arm_overrides)
    if "algo=a3c" in overrides and not any(o.startswith("agents=") for o in arm_overrides):
        from ga3c.config import usable_cores

        overrides.append(f"agents={cfg.learncurve.a3c_agents or usable_cores()}")  # one per core, as Mnih et al.
    return [sys.executable, str(REPO / "train.py"), *overrides, f"seed={seed}", "max_frames=null",
            f"trainer.max_time={max_time(float(cfg.minutes))}", f"wandb.group={cfg.wandb.group}",
            f"wandb.name={cfg.game.name}-{arm}-seed{seed}", f"hydra.run.dir={run_dir}"]


def run_to_end(command: list[str], output) -> int:
    """Run one train.py to its end. Ctrl-C (or SIGTERM) stops that run gracefully (final checkpoint and
    summary written), then the whole study: no run is left going and none is started after. A second Ctrl-C
    is passed on as the run's own "exit at once". The run has its own session, so a terminal's Ctrl-C reaches
    it only through here, exactly once."""
    process = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def interrupt(*_):
        raise KeyboardInterrupt

    # SIGINT too, explicitly: a study started in the background (`nohup ... &`) inherits SIGINT ignored, and
    # Python then never raises KeyboardInterrupt: `kill -INT` did nothing, and stopping the run started the next
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            try:
                process.wait()
            except KeyboardInterrupt:
                process.send_signal(signal.SIGINT)
                process.wait()
        print("[learncurve] interrupted: the current run was stopped; no further run started", file=sys.stderr)
        sys.exit(130)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def finished(run_dir: Path, minutes: float) -> bool:
    """A run that ended on its wall-clock budget, and that budget was `minutes` (within a minute or 5 %):
    only such a run is kept. An interrupted run, a failed one, or one of another budget (a 15-minute first
    look found where 60 minutes are asked) is not."""
    summary = read_summary(run_dir)
    if summary is None:
        return False
    budget = 60.0 * minutes
    return (summary.get("status") == "finished" and summary.get("stop_reason") == "trainer.max_time"
            and abs(float(summary.get("wall_seconds", 0.0)) - budget) <= max(60.0, 0.05 * budget))


def move_aside(run_dir: Path) -> Path | None:
    """Rename a run directory that will not be used (interrupted, failed, another budget) to seedN.earlier-K,
    so running this seed again loses nothing."""
    if not run_dir.exists():
        return None
    k = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.earlier-{k}")).exists():
        k += 1
    run_dir.rename(aside)
    return aside


def read_curve(run_dir: Path) -> dict[str, list[float]]:
    """(wall seconds, frames, rolling score, policy lag) of every logged window of a run (its directory, or the
    CSV `runs.extract` wrote of it)."""
    curve = read_curve_columns(run_dir, ("wall_seconds", "frames", "score_mean_100", "policy_lag_mean"))
    return dict(wall_seconds=curve["wall_seconds"], frames=curve["frames"], score=curve["score_mean_100"],
                policy_lag=curve["policy_lag_mean"])


def first_reach(curve: dict, threshold: float) -> tuple[float, float]:
    """(wall seconds, frames) at the first window whose rolling score is >= threshold; (inf, inf) if never."""
    for wall, frames, score in zip(curve["wall_seconds"], curve["frames"], curve["score"]):
        if score == score and score >= threshold:
            return wall, frames
    return math.inf, math.inf


def lowest_after(curve: dict, threshold: float) -> float:
    """The lowest rolling score from the first window at >= threshold to the run's end: whether a run holds
    what it learned (NaN if it never got there)."""
    scores = [s for s in curve["score"] if s == s]
    first = next((i for i, s in enumerate(scores) if s >= threshold), None)
    return min(scores[first:]) if first is not None else math.nan


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def median(values: list[float]) -> float:
    """Median that treats inf (never reached) as larger than every time: half the seeds must get there."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def analyze(runs: dict[str, dict[int, Path]], thresholds: list[float]) -> dict:
    results = dict(thresholds=thresholds, arms={})
    for arm, seeds in runs.items():
        per_seed = {}
        for seed, run_dir in seeds.items():
            curve = read_curve(run_dir)
            if not curve["wall_seconds"]:
                continue
            scores = [s for s in curve["score"] if s == s]
            summary = read_summary(run_dir) or {}
            per_seed[seed] = dict(
                run_dir=f"{run_dir.parent.name}/{run_dir.name}", curve=curve, final_score=scores[-1] if scores else math.nan,
                best_score=max(scores) if scores else math.nan, frames=curve["frames"][-1],
                wall_seconds=curve["wall_seconds"][-1], fps=summary.get("fps_run_mean", math.nan),
                policy_lag=_mean([x for x in curve["policy_lag"] if x == x]),
                reach={str(t): first_reach(curve, t) for t in thresholds},
                lowest_after_top=lowest_after(curve, max(thresholds)) if thresholds else math.nan)
        medians = {str(t): (median([s["reach"][str(t)][0] for s in per_seed.values()]),
                            median([s["reach"][str(t)][1] for s in per_seed.values()])) for t in thresholds}
        results["arms"][arm] = dict(seeds=per_seed, median_reach=medians,
                                    median_final_score=median([s["final_score"] for s in per_seed.values()]))
    return results


def _fmt_time(seconds: float) -> str:
    return "—" if not math.isfinite(seconds) else f"{seconds / 60:.1f} min"


def _fmt_score(score: float) -> str:
    return "—" if score != score else f"{score:.2f}"


def _fmt_frames(frames: float) -> str:
    return "—" if not math.isfinite(frames) else f"{frames / 1e6:.2f} M"


def markdown(results: dict, title: str) -> str:
    thresholds = results["thresholds"]
    head = "| arm | seed | " + " | ".join(f"to {t:g}: time / frames" for t in thresholds) + \
           f" | final score | best | lowest after {max(thresholds):g} | frames | frames/s | mean policy lag |"
    lines = [f"# {title}", "", head, "|" + " --- |" * (head.count("|") - 1)]
    for arm, data in results["arms"].items():
        for seed, s in sorted(data["seeds"].items()):
            cells = [f"{_fmt_time(s['reach'][str(t)][0])} / {_fmt_frames(s['reach'][str(t)][1])}" for t in thresholds]
            lines.append(f"| {arm} | {seed} | " + " | ".join(cells) + f" | {s['final_score']:.2f} | "
                         f"{s['best_score']:.2f} | {_fmt_score(s['lowest_after_top'])} | {_fmt_frames(s['frames'])} | "
                         f"{s['fps']:,.0f} | {s['policy_lag']:.1f} |")
        cells = [f"**{_fmt_time(data['median_reach'][str(t)][0])} / {_fmt_frames(data['median_reach'][str(t)][1])}**"
                 for t in thresholds]
        held = [s["lowest_after_top"] for s in data["seeds"].values() if s["lowest_after_top"] == s["lowest_after_top"]]
        lines.append(f"| **{arm}** | median | " + " | ".join(cells) +
                     f" | **{data['median_final_score']:.2f}** | | **{_fmt_score(min(held) if held else math.nan)}** | | | |")
    lines += ["", "Times are wall-clock from the run's first logged window; — = not reached within the budget. "
              "The median counts a seed that never got there as slower than any that did. "
              f"Lowest after {max(thresholds):g}: the lowest rolling score from the first reach of the top threshold "
              "to the end (whether a run holds what it learned); the median row gives the worst seed's."]
    return "\n".join(lines) + "\n"


def _interp(xs: list[float], ys: list[float], grid):
    """ys at the grid points: NaN before the first score, the last score after the run's end."""
    import numpy as np

    xs, ys = np.asarray(xs), np.asarray(ys)
    keep = ~np.isnan(ys)
    if keep.sum() < 2:
        return np.full(len(grid), np.nan)
    return np.interp(grid, xs[keep], ys[keep], left=np.nan, right=ys[keep][-1])


def median_curve(curves: list[dict], key: str, grid):
    """The median over seeds at each grid point. A run that ended (its budget, or stop_score) counts with its
    last score from then on: the seeds end a little apart, and a median of whichever seeds are still running
    would jump to the longest one's score at the very end."""
    import numpy as np

    stacked = np.vstack([_interp(c[key], c["score"], grid) for c in curves])
    with warnings.catch_warnings():  # grid points no seed covers yet are NaN, and stay so
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(stacked, axis=0)


def plot(results: dict, path: Path, title: str, grid_points: int = 200) -> Path:
    import numpy as np

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (arm, data), color in zip(results["arms"].items(), colors * 4):
        for axis, key, scale in ((axes[0], "wall_seconds", 60.0), (axes[1], "frames", 1e6)):
            curves = [s["curve"] for s in data["seeds"].values()]
            if not curves:
                continue
            for curve in curves:
                axis.plot(np.asarray(curve[key]) / scale, curve["score"], color=color, alpha=0.3, linewidth=0.8)
            end = max(max(c[key]) for c in curves)
            grid = np.linspace(0, end, grid_points)
            axis.plot(grid / scale, median_curve(curves, key, grid), color=color, linewidth=2.2,
                      label=f"{arm} (median of {len(curves)})")
    for threshold in results["thresholds"]:
        for axis in axes:
            axis.axhline(threshold, color="grey", linestyle=":", linewidth=0.8)
    axes[0].set_xlabel("wall time (minutes)")
    axes[1].set_xlabel("env frames (millions, frameskip included)")
    for axis in axes:
        axis.set_ylabel("rolling-100 score")
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(results: dict, out: Path, title: str, grid_points: int) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = dict(md=out / "learncurve.md", png=out / "learncurve.png", json=out / "learncurve.json",
                 csv=out / "curves.csv")
    paths["md"].write_text(markdown(results, title))
    plot(results, paths["png"], title, grid_points)
    plain = json.loads(json.dumps(results, default=float))
    for data in plain["arms"].values():
        for seed in data["seeds"].values():
            seed.pop("curve")
    paths["json"].write_text(json.dumps(plain, indent=1, default=float))
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["arm", "seed", "wall_seconds", "frames", "score_mean_100"])
        for arm, data in results["arms"].items():
            for seed, s in sorted(data["seeds"].items()):
                c = s["curve"]
                for row in zip(c["wall_seconds"], c["frames"], c["score"]):
                    writer.writerow([arm, seed, f"{row[0]:.1f}", int(row[1]), "" if row[2] != row[2] else row[2]])
    return paths


def log_wandb(cfg: DictConfig, results: dict, paths: dict[str, Path], out: Path) -> None:
    if cfg.wandb.mode == "disabled":
        return
    import wandb

    from ga3c.runtime import finish_wandb

    run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, group=cfg.wandb.group, dir=str(out),
                     job_type="learncurve", mode=cfg.wandb.mode, name=f"learncurve-{cfg.game.name}",
                     config=dict(game=cfg.game.name, seeds=seed_numbers(cfg.seeds), minutes=float(cfg.minutes),
                                 arms={a: list(cfg.learncurve.arm_overrides[a]) for a in cfg.learncurve.arms}))
    try:
        table = wandb.Table(columns=["arm", "seed", "threshold", "seconds", "frames", "final_score"])
        for arm, data in results["arms"].items():
            for seed, s in data["seeds"].items():
                for t in results["thresholds"]:
                    seconds, frames = s["reach"][str(t)]
                    table.add_data(arm, seed, t, seconds if math.isfinite(seconds) else None,
                                   frames if math.isfinite(frames) else None, s["final_score"])
            for t in results["thresholds"]:
                seconds, frames = data["median_reach"][str(t)]
                run.summary[f"{arm}/median_seconds_to_{t:g}"] = seconds if math.isfinite(seconds) else None
                run.summary[f"{arm}/median_frames_to_{t:g}"] = frames if math.isfinite(frames) else None
            run.summary[f"{arm}/median_final_score"] = data["median_final_score"]
        run.log({"time_to_threshold": table, "learning_curves": wandb.Image(str(paths["png"]))})
    finally:
        finish_wandb()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="learncurve")
def main(cfg: DictConfig) -> None:
    from ga3c.config import ConfigError, validate

    try:
        validate(cfg)
        seeds, minutes = seed_numbers(cfg.seeds), cfg.minutes   # validate() checked seeds
        if not (isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and minutes > 0):
            raise ConfigError(f"minutes must be a number > 0, got {minutes!r}")
        names, known = OmegaConf.to_container(cfg.learncurve.arms), cfg.learncurve.arm_overrides
        if not isinstance(names, list) or not names:
            raise ConfigError(f"learncurve.arms must be a non-empty list of arm names, got {names!r}")
        unknown = [n for n in names if str(n) not in known]
        if unknown:
            raise ConfigError(f"learncurve.arms: unknown arm(s) {unknown}; known: {', '.join(known)} "
                              "(add one with '+learncurve.arm_overrides.NAME=[\"key=value\"]')")
        arms = {str(n): [str(o) for o in known[str(n)]] for n in names}
        thresholds = cfg.learncurve.thresholds or cfg.game.get("thresholds")
        if not thresholds:
            raise ConfigError(f"no score thresholds: set learncurve.thresholds=[...] (game {cfg.game.name} has none)")
    except ConfigError as error:
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)
    out = Path(cfg.output_dir)
    runs = {arm: {seed: out / arm / f"seed{seed}" for seed in seeds} for arm in arms}
    if not cfg.learncurve.analyze_only:
        for arm, overrides in arms.items():
            for seed, run_dir in runs[arm].items():
                if finished(run_dir, float(minutes)) and not cfg.learncurve.rerun:
                    log.info("%s seed %d: finished run found in %s, not run again", arm, seed, run_dir)
                    continue
                aside = move_aside(run_dir)
                if aside is not None:
                    log.info("%s seed %d: %s is not a finished %g-minute run; kept as %s, running it again",
                             arm, seed, run_dir, minutes, aside)
                command = run_command(cfg, arm, overrides, seed, run_dir)
                log.info("%s seed %d: %s", arm, seed, " ".join(command[1:]))
                run_dir.mkdir(parents=True, exist_ok=True)
                with open(run_dir / "train.log", "w") as output:
                    code = run_to_end(command, output)
                if code:
                    log.warning("%s seed %d: train.py exited with %d (see %s); its curve so far is used",
                                arm, seed, code, run_dir / "train.log")
    count = f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}"
    title = f"{cfg.game.name}: score against wall time ({count}, {minutes:g} min each)"
    results = analyze(runs, [float(t) for t in thresholds])
    paths = write_results(results, out, title, int(cfg.learncurve.grid_points))
    from ga3c.tools.manifest import write_manifest

    run_manifests = {arm: {seed: read_json(run_dir / "manifest.json") or {} for seed, run_dir in seeds_.items()}
                     for arm, seeds_ in runs.items()}
    run_commits = {arm: {seed: m.get("commit") for seed, m in seeds_.items()} for arm, seeds_ in run_manifests.items()}
    run_hosts = {arm: {seed: m.get("host") for seed, m in seeds_.items()} for arm, seeds_ in run_manifests.items()}
    paths["manifest"] = write_manifest(out, "ga3c.tools.learncurve", game=cfg.game.name, arms=arms, seeds=seeds,
                                       run_commits=run_commits, run_hosts=run_hosts,
                                       minutes=float(minutes), frames_per_second={
                                           arm: {seed: s["fps"] for seed, s in data["seeds"].items()}
                                           for arm, data in results["arms"].items()})
    log_wandb(cfg, results, paths, out)
    print(paths["md"].read_text())
    print(f"[learncurve] wrote {', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    main()
