"""The Atari suite: one set of defaults over many games, one table.

    python -m ga3c.tools.suite seeds=1 minutes=60                          # the 11 games of the paper's Table 3
    python -m ga3c.tools.suite 'games=[breakout,spaceinvaders]' seeds=1 minutes=60 hydra.run.dir=runs/suite
    python -m ga3c.tools.suite suite.analyze_only=true hydra.run.dir=runs/suite   # only read what has finished
    python -m ga3c.tools.suite 'games=[boxing]' 'seeds=[2]' minutes=60 hydra.run.dir=runs/more   # one more seed
    python -m ga3c.tools.suite suite.analyze_only=true 'suite.include=[results/suite]' hydra.run.dir=runs/suite
        # one table: games with no run in runs/suite take their rows (and curves) from an earlier results
        # folder: its suite table, or a game folder of its own (results/suite/GAME)

For each game, one after another on this machine (runs side by side on a small machine would measure each
other), into OUTPUT_DIR/GAME:
  1. its random-play score: a uniform policy through the same preprocessing and episode rules,
     suite.random_episodes episodes (random.json; measured once);
  2. the learning benchmark, `python -m ga3c.tools.learncurve game=GAME seeds=.. minutes=..` with every other override
     given here: each seed a `train.py` run, resumable (a run finished on this budget is not run again);
  3. a final evaluation of each seed's last checkpoint, `python -m ga3c.tools.play` (suite.eval_episodes episodes,
     no-op starts, actions sampled from the policy): ARM/seedN/play-sampled/scores.json.
Then, from whatever has finished, into OUTPUT_DIR: suite.md / suite.csv / suite.json (a row per game: random,
human and published anchors, the rolling-100 score at suite.score_at_minutes, the evaluation, the human-
normalised score, frames, frames/s, time and frames to each threshold and anchor), suite_time.png and
suite_frames.png (a panel per game), manifest.json (command, commit, date, CPU), and the same to W&B.

On a cluster the games can run as parallel jobs through a Hydra launcher instead of step 2:
    python -m ga3c.tools.learncurve -m game=amidar,boxing,breakout seeds=1 minutes=60 hydra/launcher=submitit_slurm \
        hydra.sweep.dir=runs/suite 'hydra.sweep.subdir=${game.name}'
    python -m ga3c.tools.suite 'games=[amidar,boxing,breakout]' seeds=1 minutes=60 hydra.run.dir=runs/suite
(the second call finds the finished runs, measures random play, evaluates and writes the table).
"""
from __future__ import annotations

import csv
import json
import logging
import math
import sys
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import ga3c  # noqa: F401  registers ${machine:...}
from ga3c.tools import REPO, learncurve
from ga3c.tools.runs import extract, pyplot, read_json, read_json_list, read_summary

log = logging.getLogger(__name__)
OWN_KEYS = ("games", "suite.", "hydra.", "seeds", "minutes", "game=")
ANCHORS = {"a3c_4days": "CPU A3C 4 d", "a2c_40m": "A2C 40 M"}
CLOSE_MARGIN, SEEDS_TO_SETTLE = 0.2, 3   # a row within 20 % of an anchor needs 3 seeds before it counts either way


# --- random play --------------------------------------------------------------------------------------
def random_play(game: dict, episodes: int, seed: int = 20_000) -> dict:
    """The mean score of a uniform random policy over `episodes` whole episodes of `game` (a game config as
    a dict), built by the same make_env as training: same preprocessing, no-op starts and episode limit."""
    from ga3c.env import make_env

    rng = np.random.default_rng(seed)
    env = make_env(game, seed=seed)
    scores, lengths = [], []
    try:
        for i in range(episodes):
            env.reset(seed=seed + i)
            total, steps, done = 0.0, 0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
                total, steps, done = total + float(reward), steps + 1, terminated or truncated
            scores.append(total)
            lengths.append(steps)
    finally:
        env.close()
    std = float(np.std(scores, ddof=1)) if episodes > 1 else 0.0
    return dict(game=game["name"], id=game["id"], episodes=episodes, seed=seed, mean=float(np.mean(scores)),
                std=std, sem=std / math.sqrt(episodes), scores=scores, lengths=lengths)


def measured_random(game: dict, out: Path, episodes: int) -> dict:
    """random.json in the game's folder, measured now if it is not there (or has fewer episodes)."""
    path = out / "random.json"
    cached = read_json(path)
    if cached and cached.get("episodes", 0) >= episodes and cached.get("id") == game["id"]:
        return cached
    log.info("%s: random play, %d episodes", game["name"], episodes)
    result = random_play(game, episodes)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


# --- running ------------------------------------------------------------------------------------------
def user_overrides() -> list[str]:
    """The command line's training overrides (they apply to every game); the suite's own keys are not passed."""
    return [o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith(OWN_KEYS)]


def sets_wandb_group(override: str) -> bool:
    return override.lstrip("+").startswith("wandb.group=")


def wandb_group(cfg: DictConfig) -> str:
    """The W&B group of the suite's runs and of its table: wandb.group when the command line gives one, else
    suite-<output folder>."""
    given = any(map(sets_wandb_group, HydraConfig.get().overrides.task))
    return str(cfg.wandb.group) if given else f"suite-{Path(cfg.output_dir).name}"


def learncurve_command(game: str, cfg: DictConfig, out: Path) -> list[str]:
    overrides = [o for o in user_overrides() if not sets_wandb_group(o)]
    seeds = cfg.seeds if isinstance(cfg.seeds, int) else f"[{','.join(map(str, learncurve.seed_numbers(cfg.seeds)))}]"
    return [sys.executable, "-m", "ga3c.tools.learncurve", f"game={game}", f"seeds={seeds}", f"minutes={cfg.minutes}",
            *overrides, f"wandb.group={wandb_group(cfg)}", f"hydra.run.dir={relative(out)}"]


def relative(path: Path) -> str:
    """A path relative to the repository (where learncurve runs its commands) when it is under it: manifests
    then name no machine's absolute paths."""
    try:
        return str(Path(path).resolve().relative_to(REPO.resolve()))
    except ValueError:
        return str(path)


def evaluate(run_dir: Path, episodes: int, wandb_mode: str) -> dict | None:
    """play.py's scores of a finished run's last checkpoint, run once (kept in play-sampled/scores.json)."""
    scores = run_dir / "play-sampled" / "scores.json"
    if not scores.exists():
        if not (run_dir / "checkpoints" / "last.ckpt").exists():
            return None
        command = [sys.executable, "-m", "ga3c.tools.play", f"ckpt_path={run_dir}", f"episodes={episodes}", "video=false",
                   f"wandb.mode={wandb_mode}"]
        log.info("evaluating %s: %s", run_dir, " ".join(command[1:]))
        with open(run_dir / "play.log", "w") as output:
            code = learncurve.run_to_end(command, output)
        if code or not scores.exists():
            log.warning("evaluation of %s failed (exit %s, see %s)", run_dir, code, run_dir / "play.log")
            return None
    result = read_json(scores) or {}
    return result if len(result.get("episodes", [])) >= episodes else None


# --- analysis -----------------------------------------------------------------------------------------
def score_at(curve: dict, seconds: float) -> float:
    """The rolling-100 score at the last window at or before `seconds`; NaN if the run ended before it."""
    walls = curve["wall_seconds"]
    if not walls or walls[-1] < seconds - 30:  # a run that never got this far (30 s: the first window's delay)
        return math.nan
    best = math.nan
    for wall, score in zip(walls, curve["score"]):
        if wall > seconds:
            break
        best = score
    return best


def _median(values: list[float]) -> float:
    finite = [v for v in values if v == v]
    return learncurve.median(finite) if finite else math.nan


def game_row(game: dict, random: dict | None, runs: dict[int, Path], evals: dict[int, dict | None],
             minutes_at: list[float], host: dict | None = None, fps: dict[int, float] | None = None,
             seed_hosts: dict[int, dict | None] | None = None) -> dict:
    """One game's figures: medians over its seeds, a never-reached threshold counted as slowest. `runs`: each
    seed's run directory, or the metrics CSV extracted from it. `host`: the machine the runs were made on
    (their learncurve manifest), since the minutes depend on its CPU, and `seed_hosts` each seed's where known
    (seeds added on another machine); `fps`: each seed's frames/s where the run directory (its summary.json) is
    not at hand."""
    anchors = {k: v for k, v in (game.get("anchors") or {}).items() if v is not None}
    thresholds = sorted(float(t) for t in (game.get("thresholds") or []))
    targets = {**{f"{t:g}": t for t in thresholds}, **{ANCHORS.get(k, k): float(v) for k, v in anchors.items()
                                                       if k in ANCHORS}}
    seeds = {}
    for seed, run_dir in runs.items():
        curve = learncurve.read_curve(run_dir)
        if not curve["wall_seconds"]:
            continue
        summary = read_summary(run_dir) or {}
        scores = [s for s in curve["score"] if s == s]
        seeds[seed] = dict(curve=curve, final=scores[-1] if scores else math.nan, frames=curve["frames"][-1],
                           minutes=curve["wall_seconds"][-1] / 60,
                           fps=summary.get("fps_run_mean", (fps or {}).get(seed, math.nan)),
                           at={f"{m:g}": score_at(curve, 60 * m) for m in minutes_at},
                           reach={name: learncurve.first_reach(curve, value) for name, value in targets.items()},
                           eval=(evals.get(seed) or {}).get("score_mean", math.nan))
    row = dict(game=game["name"], id=game["id"], seeds=len(seeds), random=random["mean"] if random else math.nan,
               random_episodes=random["episodes"] if random else 0, human=anchors.get("human", math.nan),
               **{k: anchors.get(k, math.nan) for k in ANCHORS}, targets=targets)
    row["final"] = _median([s["final"] for s in seeds.values()])
    row["eval"] = _median([s["eval"] for s in seeds.values()])
    row["eval_seeds"] = sum(s["eval"] == s["eval"] for s in seeds.values())   # a seed with no checkpoint has none
    row["frames"] = _median([s["frames"] for s in seeds.values()])
    row["minutes"] = _median([s["minutes"] for s in seeds.values()])
    row["fps"] = _median([s["fps"] for s in seeds.values()])
    row["at"] = {m: _median([s["at"][m] for s in seeds.values()]) for m in (f"{m:g}" for m in minutes_at)}
    row["reach"] = {name: (learncurve.median([s["reach"][name][0] for s in seeds.values()]),
                           learncurve.median([s["reach"][name][1] for s in seeds.values()]))
                    for name in targets} if seeds else {}
    span = row["human"] - row["random"]
    row["hns"] = (row["final"] - row["random"]) / span if span == span and span != 0 else math.nan
    row["hns_eval"] = ((row["eval"] - row["random"]) / span if span == span and span != 0
                       and row["eval_seeds"] == row["seeds"] else math.nan)
    a3c = anchors.get("a3c_4days")
    # "left random play": at least 10 % of the way from our random score to CPU A3C's four-day score
    row["left_random"] = (bool(row["final"] >= row["random"] + 0.1 * (a3c - row["random"]))
                          if a3c is not None and row["final"] == row["final"] and row["random"] == row["random"]
                          else None)
    for key in ANCHORS:
        row[f"beat_{key}"] = (bool(math.isfinite(row["reach"][ANCHORS[key]][0])) if key in anchors and seeds
                              else None)
    row["curves"] = {seed: s["curve"] for seed, s in seeds.items()}
    hosts = {seed: (seed_hosts or {}).get(seed) or host for seed in seeds}
    distinct = {json.dumps(h, sort_keys=True) for h in hosts.values()}
    row["host"] = next(iter(hosts.values())) if len(distinct) == 1 else host
    if len(distinct) > 1:   # the Hosts line then names each machine's seeds
        row["seed_hosts"] = hosts
    return row


def by_seed(per_arm: dict | None) -> dict:
    """A learncurve manifest's {arm: {seed: value}} (frames_per_second, run_hosts) as {seed: value}."""
    return {int(seed): value for values in (per_arm or {}).values() for seed, value in values.items()}


def included_row(game: dict, folders: list[Path], minutes_at: list[float]) -> dict | None:
    """`game`'s row from the first earlier results folder (suite.include) that has it: a row of its suite table,
    with the curves of the GAME/seedN_metrics.csv beside it, or else a game folder of its own (GAME/ with
    seedN_metrics.csv, random.json, seedN_eval.json and learncurve's manifest.json), read as a finished run;
    the folder too where its runs' frames are not the row's (the runs were replaced after the table was written).
    Games measured on other days or hosts join one table."""
    name = game["name"]
    for folder in folders:
        seed_csvs = {int(path.stem.split("_")[0][4:]): path
                     for path in sorted((folder / name).glob("seed*_metrics.csv"))}
        row = next((r for r in read_json_list(folder / "suite.json") if r.get("game") == name), None)
        if row is not None:
            curves = {seed: learncurve.read_curve(path) for seed, path in seed_csvs.items()}
            if not curves or row.get("frames") == _median([c["frames"][-1] for c in curves.values()]):
                log.info("%s: not run here; its row from %s", name, folder / "suite.json")
                return {**row, "reach": {k: tuple(v) for k, v in row["reach"].items()}, "curves": curves,
                        "eval_seeds": row.get("eval_seeds", row["seeds"])}   # older tables: every seed evaluated
            log.warning("%s: %s's row is not of the runs in %s (they were replaced); reading the runs",
                        name, folder / "suite.json", folder / name)
        if seed_csvs:
            log.info("%s: not run here; its row from the game folder %s", name, folder / name)
            manifest = read_json(folder / name / "manifest.json") or {}
            evals = {seed: read_json(folder / name / f"seed{seed}_eval.json") for seed in seed_csvs}
            return game_row(game, read_json(folder / name / "random.json"), seed_csvs, evals, minutes_at,
                            manifest.get("host"), by_seed(manifest.get("frames_per_second")),
                            by_seed(manifest.get("run_hosts")))
    return None


def _host_name(host: dict | None) -> str:
    if not host:
        return "host not recorded"
    bf16 = {True: "native bf16", False: "no native bf16"}.get(host.get("native_bf16"), "bf16 not recorded")
    return f"{host.get('cpu_model', '?')}, {host.get('cores', '?')} cores, {bf16}"


def _num(value: float, digits: int = 1) -> str:
    if value is None or value != value:
        return "—"
    return f"{value:,.{digits}f}"


def _reach(pair) -> str:
    seconds, frames = pair
    return "—" if not math.isfinite(seconds) else f"{seconds / 60:.1f} min / {frames / 1e6:.1f} M"


def _eval_cell(row: dict) -> str:
    """The evaluation's median, saying over how many seeds when some seeds have none (their checkpoints were
    not kept): a median of the evaluated seeds alone is not the row's."""
    cell, evaluated = _num(row["eval"]), row["eval_seeds"]
    return cell if evaluated in (0, row["seeds"]) else f"{cell} ({evaluated} of {row['seeds']} seeds)"


def close_calls(row: dict) -> list[str]:
    """The anchors (ANCHORS' keys) `row`'s final score ended within CLOSE_MARGIN of, either side, on fewer than
    SEEDS_TO_SETTLE seeds: one seed's pass or miss there is not a result, a median over more seeds is."""
    final = row.get("final", math.nan)
    if row.get("seeds", 0) >= SEEDS_TO_SETTLE or final != final:
        return []
    return [key for key in ANCHORS if (value := row.get(key)) is not None and value == value
            and abs(final - value) <= CLOSE_MARGIN * abs(value)]


def markdown(rows: list[dict], title: str, minutes_at: list[float], eval_episodes: int) -> str:
    at = [f"{m:g}" for m in minutes_at]
    head = ["game", "seeds", "random (ours)", "human", "CPU A3C 4 d", "A2C 40 M",
            *[f"score @ {m} min" for m in at], f"eval ({eval_episodes} ep.)", "HNS (final / eval)", "frames",
            "frames/s", "to CPU A3C 4 d", "to A2C 40 M", "to thresholds", "left random"]
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        thresholds = "; ".join(f"{name}: {_reach(r['reach'][name])}" for name in r["targets"]
                               if name not in ANCHORS.values()) if r["reach"] else "—"
        lines.append("| " + " | ".join([
            r["game"], str(r["seeds"]), _num(r["random"]), _num(r["human"]), _num(r["a3c_4days"]),
            _num(r["a2c_40m"]), *[_num(r["at"][m]) for m in at], _eval_cell(r),
            f"{_num(r['hns'], 2)} / {_num(r['hns_eval'], 2)}", _num(r["frames"] / 1e6, 2) + " M",
            _num(r["fps"], 0),
            _reach(r["reach"][ANCHORS["a3c_4days"]]) if ANCHORS["a3c_4days"] in r["reach"] else "—",
            _reach(r["reach"][ANCHORS["a2c_40m"]]) if ANCHORS["a2c_40m"] in r["reach"] else "—",
            thresholds, {True: "yes", False: "no", None: "—"}[r["left_random"]]]) + " |")
    beat_a3c = [r for r in rows if r["beat_a3c_4days"] is not None]
    beat_a2c = [r for r in rows if r["beat_a2c_40m"] is not None]
    hosts: dict[str, list[str]] = {}
    for r in rows:
        by_host: dict[str, list[str]] = {}
        for seed, host in (r.get("seed_hosts") or {}).items():
            by_host.setdefault(_host_name(host), []).append(str(seed))
        if len(by_host) > 1:   # seeds of one game run on different machines
            for name, seeds in by_host.items():
                hosts.setdefault(name, []).append(f"{r['game']} seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}")
        else:
            hosts.setdefault(_host_name(r.get("host")), []).append(r["game"])
    lines += ["", "Hosts (minutes and frames/s depend on the CPU; frames do not): " + "; ".join(
        f"{name} ({', '.join(games)})" for name, games in hosts.items()) + "."]
    slow = [r for r in rows if r["beat_a2c_40m"] is False and r["fps"] == r["fps"] and r["fps"] > 0]
    if slow:   # where the time goes: A2C's anchor is a frame count, ours a wall-clock budget
        lines += ["", "A2C's anchor is its score after 40 M frames; at each run's frames/s that many frames take: "
                  + "; ".join(f"{r['game']} {40e6 / r['fps'] / 3600:.1f} h ({_num(r['frames'] / 1e6, 1)} M in "
                              f"{_num(r['minutes'], 0)} min)" for r in slow) + "."]
    close = [(r, key) for r in rows for key in close_calls(r)]
    if close:
        lines += ["", f"Ended within {CLOSE_MARGIN * 100:g} % of a line on fewer than {SEEDS_TO_SETTLE} seeds "
                  "(more seeds settle these): " + "; ".join(
                      f"{r['game']} ({ANCHORS[key]}: {_num(r['final'])} against {_num(r[key])}, {r['seeds']} seed"
                      f"{'s' if r['seeds'] != 1 else ''})" for r, key in close) + "."]
    lines += ["", f"Beat CPU A3C's four-day score within the budget: {sum(r['beat_a3c_4days'] for r in beat_a3c)} "
              f"of {len(beat_a3c)} games run; A2C's 40 M-frame score: {sum(r['beat_a2c_40m'] for r in beat_a2c)} of "
              f"{len(beat_a2c)}; left random play (final rolling-100 at least 10 % of the way from random to CPU "
              f"A3C's four-day score): {sum(bool(r['left_random']) for r in rows)} of "
              f"{sum(r['left_random'] is not None for r in rows)}.",
              "", "Scores are the rolling mean of the last 100 training episodes (medians over seeds); eval: the "
              "last checkpoint, no-op starts, sampled actions. random: a uniform policy through the same "
              "preprocessing. HNS = (score - random) / (human - random). Times: wall clock from the run's start, "
              "— = not reached. Anchors: human (Mnih et al. 2015), CPU A3C after 4 days on 16 cores (Mnih et al. "
              "2016, feed-forward, human starts), A2C after 40 M frames (Schulman et al. 2017)."]
    return "\n".join(lines) + "\n"


def plot_grid(rows: list[dict], key: str, path: Path, title: str) -> Path:
    plt = pyplot()
    columns = min(4, max(1, len(rows)))
    lines_ = math.ceil(len(rows) / columns) if rows else 1
    fig, axes = plt.subplots(lines_, columns, figsize=(4 * columns, 3.2 * lines_), squeeze=False)
    scale, label = (60.0, "wall time (minutes)") if key == "wall_seconds" else (1e6, "env frames (millions)")
    for axis, r in zip(axes.flat, rows):
        for seed, curve in sorted(r["curves"].items()):
            axis.plot(np.asarray(curve[key]) / scale, curve["score"], linewidth=1.2, label=f"seed {seed}")
        for value, style, name in ((r["random"], ":", "random"), (r["a3c_4days"], "--", "CPU A3C 4 d"),
                                   (r["a2c_40m"], "-.", "A2C 40 M")):
            if value == value:
                axis.axhline(value, color="grey", linestyle=style, linewidth=0.9, label=name)
        axis.set_title(r["game"])
        axis.set_xlabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=6, loc="best")
    for axis in list(axes.flat)[len(rows):]:
        axis.axis("off")
    if rows:
        axes.flat[0].set_ylabel("rolling-100 score")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_results(rows: list[dict], out: Path, title: str, minutes_at: list[float], eval_episodes: int) -> dict:
    paths = dict(md=out / "suite.md", csv=out / "suite.csv", json=out / "suite.json",
                 time_png=out / "suite_time.png", frames_png=out / "suite_frames.png")
    paths["md"].write_text(markdown(rows, title, minutes_at, eval_episodes))
    plot_grid(rows, "wall_seconds", paths["time_png"], title + ": score against wall time")
    plot_grid(rows, "frames", paths["frames_png"], title + ": score against frames")
    plain = [{k: v for k, v in r.items() if k != "curves"} for r in rows]
    paths["json"].write_text(json.dumps(plain, indent=1, default=float) + "\n")
    flat_keys = ["game", "seeds", "random", "human", "a3c_4days", "a2c_40m", "final", "eval", "eval_seeds", "hns",
                 "hns_eval", "frames", "fps", "minutes", "left_random", "beat_a3c_4days", "beat_a2c_40m"]
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.writer(handle)
        names = sorted({n for r in rows for n in r["reach"]}, key=str)
        writer.writerow(flat_keys + [f"score_at_{m:g}_min" for m in minutes_at]
                        + [f"seconds_to_{n}" for n in names] + [f"frames_to_{n}" for n in names])
        for r in rows:
            reach = [r["reach"].get(n, (math.nan, math.nan)) for n in names]
            writer.writerow([r[k] for k in flat_keys] + [r["at"][f"{m:g}"] for m in minutes_at]
                            + [p[0] for p in reach] + [p[1] for p in reach])
    return paths


def log_wandb(cfg: DictConfig, rows: list[dict], paths: dict, out: Path) -> None:
    if cfg.wandb.mode == "disabled":
        return
    import wandb

    from ga3c.runtime import finish_wandb

    run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, group=wandb_group(cfg), dir=str(out),
                     job_type="suite", mode=cfg.wandb.mode, name=f"suite-{out.name}",
                     config=dict(games=list(cfg.games), seeds=learncurve.seed_numbers(cfg.seeds),
                                 minutes=float(cfg.minutes)))
    try:
        columns = ["game", "random", "human", "a3c_4days", "a2c_40m", "final", "eval", "hns", "frames", "fps"]
        table = wandb.Table(columns=columns, data=[[r[c] if r[c] == r[c] else None for c in columns] for r in rows])
        run.log({"suite/table": table, "suite/curves_time": wandb.Image(str(paths["time_png"])),
                 "suite/curves_frames": wandb.Image(str(paths["frames_png"]))})
        for r in rows:
            run.summary[f"{r['game']}/final"] = r["final"] if r["final"] == r["final"] else None
            run.summary[f"{r['game']}/hns"] = r["hns"] if r["hns"] == r["hns"] else None
    finally:
        finish_wandb()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="suite")
def main(cfg: DictConfig) -> None:
    from hydra import compose

    from ga3c.config import ConfigError, hydra_error_message, validate

    games = OmegaConf.to_container(cfg.games)
    configs = {}
    try:
        validate(cfg)
        if not isinstance(games, list) or not games or len(set(map(str, games))) != len(games):
            raise ConfigError(f"games must be a non-empty list of game names without repeats, got {games!r}")
        for name in map(str, games):  # every game composes (with the overrides given) before anything starts
            try:
                game_cfg = compose(config_name="learncurve", overrides=[f"game={name}", *user_overrides()])
            except Exception as error:  # noqa: BLE001 - Hydra's composition errors, one line each
                raise ConfigError(f"games: {name}: {hydra_error_message(error) or error}") from None
            if not (game_cfg.learncurve.thresholds or game_cfg.game.get("thresholds")):
                raise ConfigError(f"games: {name} has no score thresholds (game.thresholds)")
            configs[name] = OmegaConf.to_container(game_cfg.game, resolve=True)
    except ConfigError as error:
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    arm = str(cfg.learncurve.arms[0])
    minutes_at = [float(m) for m in cfg.suite.score_at_minutes]
    include = [Path(hydra.utils.to_absolute_path(str(f))) for f in cfg.suite.include]
    seeds = learncurve.seed_numbers(cfg.seeds)
    title = f"Atari suite, {arm}: {len(seeds)} seed(s) x {cfg.minutes:g} min per game"
    rows = []
    for name, game in configs.items():
        game_out = out / name
        runs = {seed: game_out / arm / f"seed{seed}" for seed in seeds}
        earlier = included_row(game, include, minutes_at) if cfg.suite.analyze_only else None
        if earlier and not any((run_dir / "metrics.jsonl").exists() for run_dir in runs.values()):
            rows.append(earlier)
            paths = write_results(rows, out, title, minutes_at, int(cfg.suite.eval_episodes))
            continue
        random = measured_random(game, game_out, int(cfg.suite.random_episodes))
        if not cfg.suite.analyze_only:
            command = learncurve_command(name, cfg, game_out)
            log.info("%s: %s", name, " ".join(command[1:]))
            game_out.mkdir(parents=True, exist_ok=True)
            with open(game_out / "learncurve.log", "a") as output:
                code = learncurve.run_to_end(command, output)
            if code:
                log.warning("%s: learncurve exited with %d (see %s)", name, code, game_out / "learncurve.log")
        evals = {seed: evaluate(run_dir, int(cfg.suite.eval_episodes), str(cfg.wandb.mode))
                 for seed, run_dir in runs.items()
                 if learncurve.finished(run_dir, float(cfg.minutes)) and int(cfg.suite.eval_episodes) > 0}
        host = (read_json(game_out / "manifest.json") or {}).get("host")   # learncurve's: where the runs ran
        seed_hosts = {seed: (read_json(run_dir / "manifest.json") or {}).get("host") for seed, run_dir in runs.items()}
        rows.append(game_row(game, random, runs, evals, minutes_at, host, seed_hosts=seed_hosts))
        for seed, run_dir in runs.items():   # each curve small enough to commit beside the table
            if (run_dir / "metrics.jsonl").exists():
                extract(run_dir, game_out / f"seed{seed}_metrics.csv")
        paths = write_results(rows, out, title, minutes_at, int(cfg.suite.eval_episodes))  # after every game
    from ga3c.tools.manifest import write_manifest

    fps = {r["game"]: r["fps"] for r in rows}
    write_manifest(out, "ga3c.tools.suite", games=list(configs), seeds=seeds, minutes=float(cfg.minutes),
                   frames_per_second=fps)
    log_wandb(cfg, rows, paths, out)
    print(paths["md"].read_text())
    print(f"[suite] wrote {', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    main()
