"""Turn run and multirun directories into one self-contained HTML report with PNG plots.

    python -m ga3c.tools.report multirun/2026-11-30/14-00-00 [outputs/...] [-o report_dir] [--title T] [--wandb-report]

Every directory under the given ones that holds a summary.json is a run. It reads only what runs write
locally (summary.json, metrics.jsonl, .hydra/), so it works offline. Runs are labelled by the keys their
sweep varied (their Hydra overrides that differ between runs; seeds are repetitions of one configuration).
Writes OUT/report.html (plots embedded, nothing else needed to view it), OUT/*.png and OUT/runs.csv.
With --wandb-report it also publishes a W&B Report: one section per W&B group of the runs (a study, e.g. a
research question) with score and throughput panels over that group's runs on W&B. That needs the optional
wandb-workspaces (pip install -e ".[report]"), a login (wandb login) and the runs uploaded (wandb sync).
"""
from __future__ import annotations

import argparse
import base64
import csv
import html
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ga3c.tools.runs import pyplot, read_metrics, read_summary

IGNORED_KEYS = ("hydra.", "output_dir", "ckpt_path", "wandb.", "log.", "trainer.max_time", "max_frames",
                "checkpoint.", "video.")
GROUPS = ("game", "net", "algo", "autotune", "optimizer", "experiment")


@dataclass
class Run:
    path: Path
    summary: dict
    history: list[dict]
    overrides: dict[str, str] = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    label: str = ""
    seed: str = "0"
    params: dict[str, str] = field(default_factory=dict)   # the run's values of all keys any run overrides

    @property
    def algo(self) -> str:
        return self.choices.get("algo") or str(self.summary.get("algo") or "ga3c")

    @property
    def game(self) -> str:
        return self.choices.get("game") or str(self.config.get("game", {}).get("name", "?"))

    @property
    def net(self) -> str:
        return self.choices.get("net", "?")

    @property
    def autotuned(self) -> bool:
        tuner = self.choices.get("autotune") or _option(self.config.get("autotune", {}).get("name", "off"))
        counts = {(h.get("agents"), h.get("predictors"), h.get("trainers")) for h in self.history[:-1]}
        return tuner not in ("off", "None") or len(counts) > 1

    def series(self, key: str) -> list[float]:
        return [float(h[key]) if isinstance(h.get(key), (int, float)) else math.nan for h in self.history]

    def steady(self, key: str) -> float:
        """Mean of a window rate over the run, without the start-up window and the final (stopping) one."""
        values = [v for v in self.series(key) if not math.isnan(v)]
        if len(values) > 3:
            values = values[1:-1]
        return statistics.fmean(values) if values else math.nan

    def final(self, key: str) -> float:
        value = self.summary.get(key)
        return float(value) if isinstance(value, (int, float)) else math.nan

    def cfg(self, key: str):
        """A value of the run's composed config by dotted key (None where absent)."""
        value = self.config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value


# --- reading runs ----------------------------------------------------------------------------------------
def _read_yaml(path: Path):
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # noqa: BLE001 - a damaged .hydra file only costs the labels
        return None


def _option(value) -> str:
    """A config group option as its file name (YAML 1.1 reads an unquoted `off` as False)."""
    return {False: "off", True: "on"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def read_run(path: Path) -> Run:
    summary = read_summary(path)
    if summary is None:
        raise ValueError(f"{path / 'summary.json'} cannot be read")
    history = read_metrics(path) or [summary]
    overrides = {}
    for item in _read_yaml(path / ".hydra" / "overrides.yaml") or []:
        key, _, value = str(item).lstrip("+~").partition("=")
        overrides[key] = value
    hydra = _read_yaml(path / ".hydra" / "hydra.yaml") or {}
    choices = {k: _option(v) for k, v in (hydra.get("hydra", {}).get("runtime", {}).get("choices", {}) or {}).items()
               if k in GROUPS}
    config = _read_yaml(path / ".hydra" / "config.yaml") or {}
    seed = overrides.get("seed", str(config.get("seed", 0)))
    return Run(path, summary, history, overrides, choices, config, seed=seed)


def find_runs(paths: list[Path]) -> list[Run]:
    runs, seen = [], set()
    for root in paths:
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such directory")
        for directory, subdirs, files in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if d not in ("wandb", "checkpoints", ".hydra", "videos"))
            if "summary.json" in files and Path(directory).resolve() not in seen:
                seen.add(Path(directory).resolve())
                runs.append(read_run(Path(directory)))
    return runs


def label_runs(runs: list[Run]) -> list[str]:
    """Label each run by the keys that differ between runs (config groups and Hydra overrides), seeds aside.
    Returns the varied keys."""
    params = []
    for run in runs:
        p = {k: v for k, v in run.overrides.items() if not k.startswith(IGNORED_KEYS) and k != "seed"}
        p.update(run.choices)
        if "experiment" in p and p["experiment"] in ("None", "null"):
            p.pop("experiment")
        params.append(p)
    keys = sorted({k for p in params for k in p})
    varied = [k for k in keys if len({p.get(k, "default") for p in params}) > 1]
    for run, p in zip(runs, params):
        run.params = {k: p.get(k, "default") for k in keys}
        run.label = ", ".join(f"{k}={p.get(k, 'default')}" for k in varied) or run.path.name
    if not varied and len({r.label for r in runs}) < len(runs):   # same leaf names: use relative paths
        for run in runs:
            run.label = str(run.path)
    return varied


# --- plotting --------------------------------------------------------------------------------------------
def _plt():
    plt = pyplot()
    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 10,
                         "axes.titlesize": 11, "legend.fontsize": 8})
    return plt


def _colors(labels: list[str]) -> dict[str, tuple]:
    plt = _plt()
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _time_axis(runs: list[Run]) -> tuple[float, str]:
    longest = max((max(r.series("wall_seconds") or [0]) for r in runs), default=0)
    return (3600.0, "wall time (hours)") if longest > 3 * 3600 else (60.0, "wall time (minutes)") \
        if longest > 600 else (1.0, "wall time (s)")


def _frames_axis(runs: list[Run]) -> tuple[float, str]:
    most = max((max(r.series("frames") or [0]) for r in runs), default=0)
    return (1e6, "env frames (millions, frame skip included)") if most >= 2e6 else \
        (1e3, "env frames (thousands, frame skip included)")


def _legend(ax, colors: dict, seeds: dict[str, int], title: str | None) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=f"{label} ({seeds[label]} runs)" if seeds[label] > 1 else label)
               for label, c in colors.items()]
    if len(handles) > 5 or max(len(h.get_label()) for h in handles) > 45:   # outside, right of the axes
        ax.legend(handles=handles, title=title, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True)
    else:
        ax.legend(handles=handles, title=title, loc="best", frameon=True)


def _save(plt, fig, path: Path) -> Path:
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_scores(runs: list[Run], varied: list[str], out: Path) -> list[Path]:
    plt = _plt()
    labels = sorted({r.label for r in runs})
    colors, seeds = _colors(labels), {label: sum(r.label == label for r in runs) for label in labels}
    title = ", ".join(varied) if varied else None
    paths = []
    for name, key, (scale, xlabel) in (("score_vs_time", "wall_seconds", _time_axis(runs)),
                                       ("score_vs_frames", "frames", _frames_axis(runs))):
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for run in runs:
            x = [v / scale for v in run.series(key)]
            ax.plot(x, run.series("score_mean_100"), color=colors[run.label], lw=1.6, alpha=0.9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("score (mean of last 100 episodes, raw)")
        ax.set_title(f"Score against {'wall time' if key == 'wall_seconds' else 'env frames'}")
        ax.set_xlim(left=0)
        fig.tight_layout()
        _legend(ax, colors, seeds, title)   # after the layout: an outside legend widens the image, not the axes
        paths.append(out / f"{name}.png")
        fig.savefig(paths[-1], bbox_inches="tight")
        plt.close(fig)
    return paths


def _by_label(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.label):
        groups.setdefault(run.label, []).append(run)
    return groups


def _mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, 0.0
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def _wrap(label: str, width: int = 34) -> str:
    """Break a long `k=v, k=v` label at its commas."""
    lines, line = [], ""
    for part in label.split(", "):
        if line and len(line) + len(part) + 2 > width:
            lines.append(line + ",")
            line = part
        else:
            line = f"{line}, {part}" if line else part
    return "\n".join(lines + [line])


def plot_throughput(runs: list[Run], out: Path) -> Path:
    plt = _plt()
    groups = _by_label(runs)
    labels = list(groups)
    metrics = (("fps", "env frames/s", "FPS (frames per second)"), ("pps", "predictions/s", "PPS (predictions/s)"),
               ("tps", "updates/s", "TPS (trainings per second)"))
    wrapped = [_wrap(label) for label in labels]
    lines = sum(w.count("\n") + 1 for w in wrapped)
    fig, axes = plt.subplots(1, 3, figsize=(13, 1.6 + 0.22 * max(lines, 6) + 0.15 * len(labels)), sharey=True)
    colors = _colors(labels)
    for ax, (key, unit, title) in zip(axes, metrics):
        stats = [_mean_std([r.steady(key) for r in groups[label]]) for label in labels]
        means = [0 if math.isnan(m) else m for m, _ in stats]
        ax.barh(range(len(labels)), means, xerr=[s for _, s in stats], color=[colors[label] for label in labels],
                capsize=3)
        for i, (m, _) in enumerate(stats):
            ax.text(m if not math.isnan(m) else 0, i, f" {m:,.0f}" if m >= 100 else f" {m:.1f}", va="center",
                    fontsize=8)
        ax.set_xlabel(unit)
        ax.set_title(title)
        ax.set_xlim(right=max(means or [1]) * 1.25 or 1)
    axes[0].set_yticks(range(len(labels)), wrapped, fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("Throughput per configuration (mean of the run's windows; bars: spread over runs)", fontsize=11)
    fig.tight_layout()
    return _save(plt, fig, out / "throughput.png")


def plot_counts(runs: list[Run], out: Path) -> Path:
    plt = _plt()
    scale, xlabel = _time_axis(runs)
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    colors = _colors([str(r.path.name) + " " + r.label for r in runs])
    for run in runs:
        # the final window is measured after shutdown (no agents left): not a count the tuner chose
        n = len(run.history) - 1 if len(run.history) > 1 and not run.history[-1].get("agents") else len(run.history)
        x = [v / scale for v in run.series("wall_seconds")[:n]]
        name = str(run.path.name) + " " + run.label
        for ax, key in zip(axes, ("agents", "predictors", "trainers")):
            ax.step(x, run.series(key)[:n], where="post", color=colors[name], lw=1.6, label=name)
    for ax, title in zip(axes, ("N_A (agents)", "N_P (predictors)", "N_T (trainers)")):
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1) * 1.1)
        ax.yaxis.get_major_locator().set_params(integer=True)
    axes[0].set_title("Counts chosen by the auto-tuner over time")
    axes[0].legend(loc="best")
    axes[-1].set_xlabel(xlabel)
    fig.tight_layout()
    return _save(plt, fig, out / "autotune_counts.png")


def plot_policy_lag(runs: list[Run], out: Path) -> Path:
    plt = _plt()
    labels = sorted({r.label for r in runs})
    colors = _colors(labels)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for run in runs:
        x = run.steady("training_batch_mean")
        lag = [v for v in run.series("policy_lag_mean") if not math.isnan(v)]
        lag_mean, lag_std = _mean_std(lag[1:-1] if len(lag) > 3 else lag)
        scores = [v for v in run.series("score_mean_100") if not math.isnan(v)]
        tail = scores[len(scores) // 2:] or [math.nan]
        left.errorbar(x, lag_mean, yerr=lag_std, fmt="o", color=colors[run.label], capsize=3, ms=6)
        right.errorbar(x, statistics.fmean(tail), yerr=statistics.pstdev(tail) if len(tail) > 1 else 0, fmt="s",
                       color=colors[run.label], capsize=3, ms=6)
    left.set_xlabel("training batch size (samples per update, measured)")
    left.set_ylabel("policy lag (updates between acting and training)")
    left.set_title("Policy lag against training batch size")
    right.set_xlabel("training batch size (samples per update, measured)")
    right.set_ylabel("score, second half of the run (mean ± std)")
    right.set_title("Stability: score against training batch size")
    from matplotlib.lines import Line2D

    right.legend(handles=[Line2D([], [], color=colors[label], marker="o", ls="", label=label) for label in labels],
                 loc="best")
    fig.tight_layout()
    return _save(plt, fig, out / "policy_lag.png")


def like_for_like(runs: list[Run]) -> list[Run]:
    """The A3C runs and the GA3C runs configured as some A3C run is, but for algo, game, net and seed."""
    def rest(run: Run) -> tuple:
        return tuple(sorted((k, v) for k, v in run.params.items() if k not in ("algo", "game", "net", "seed")))

    baselines = {rest(r) for r in runs if r.algo == "a3c"}
    return [r for r in runs if r.algo == "a3c" or (r.algo == "ga3c" and rest(r) in baselines)]


def plot_ga3c_vs_a3c(runs: list[Run], out: Path) -> Path:
    plt = _plt()
    runs = like_for_like(runs)
    keys = sorted({(r.game, r.net) for r in runs})
    algos = ["a3c", "ga3c"]
    colors = {"a3c": "#9e9e9e", "ga3c": "#1f77b4"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.38
    for j, algo in enumerate(algos):
        fps, score = [], []
        for game, net in keys:
            chosen = [r for r in runs if r.algo == algo and (r.game, r.net) == (game, net)]
            fps.append(_mean_std([r.final("fps_run_mean") if not math.isnan(r.final("fps_run_mean"))
                                  else r.steady("fps") for r in chosen]))
            score.append(_mean_std([r.final("score_mean_100") for r in chosen]))
        xs = [i + (j - 0.5) * width for i in range(len(keys))]
        left.bar(xs, [0 if math.isnan(m) else m for m, _ in fps], width, yerr=[s for _, s in fps], label=algo.upper(),
                 color=colors[algo], capsize=3)
        right.bar(xs, [0 if math.isnan(m) else m for m, _ in score], width, yerr=[s for _, s in score],
                  label=algo.upper(), color=colors[algo], capsize=3)
        if algo == "ga3c":
            for i, (game, net) in enumerate(keys):
                base = _mean_std([r.final("fps_run_mean") for r in runs if r.algo == "a3c" and (r.game, r.net) ==
                                  (game, net)])[0]
                if base and not math.isnan(base) and not math.isnan(fps[i][0]):
                    left.text(xs[i], fps[i][0] + fps[i][1], f"{fps[i][0] / base:.1f}×", ha="center", va="bottom",
                              fontsize=9, fontweight="bold")
    names = [f"{game}\n{net} net" for game, net in keys]
    for ax in (left, right):
        ax.set_xticks(range(len(keys)), names)
        ax.legend(loc="best")
    left.set_ylabel("env frames per second (run mean)")
    left.set_title("Throughput: GA3C vs A3C (label: speed-up)")
    right.set_ylabel("final score (mean of last 100 episodes)")
    right.set_title("Learning: final score, GA3C vs A3C")
    fig.tight_layout()
    return _save(plt, fig, out / "ga3c_vs_a3c.png")


# --- the report ------------------------------------------------------------------------------------------
def _fmt(value, digits: int = 1) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:,.{digits}f}"
    return html.escape(str(value))


def build(paths: list[Path], out: Path, title: str = "GA3C report") -> dict:
    """Write OUT/report.html, its PNGs and runs.csv; returns what was made (and why plots were skipped)."""
    runs = find_runs(paths)
    if not runs:
        raise FileNotFoundError(f"no run directories (with summary.json) under {', '.join(map(str, paths))}")
    varied = label_runs(runs)
    out.mkdir(parents=True, exist_ok=True)
    sections, skipped = [], []
    score_plots = plot_scores(runs, varied, out)
    sections.append(("Score against wall time and frames",
                     "One line per run, one colour per configuration of the varied keys "
                     f"({', '.join(varied) or 'none'}); seeds share a colour.", score_plots))
    sections.append(("Throughput", "FPS: env frames (frame skip included) per second; PPS: predictions (batched "
                     "forward-pass samples) per second; TPS: training updates per second.",
                     [plot_throughput(runs, out)]))
    tuned = [r for r in runs if r.autotuned]
    if tuned:
        sections.append(("Auto-tuned counts", "N_A, N_P and N_T of each auto-tuned run, per window.",
                         [plot_counts(tuned, out)]))
    else:
        skipped.append("Auto-tuned counts: no run was auto-tuned (autotune=off and constant counts).")
    lagged = [r for r in runs if not math.isnan(r.steady("training_batch_mean"))
              and not math.isnan(r.steady("policy_lag_mean"))]
    if lagged:
        sections.append(("Policy lag and training batch size", "Policy lag: how many updates old the policy that "
                         "chose an action was when the sample was trained. Error bars: spread over the run's windows.",
                         [plot_policy_lag(lagged, out)]))
    else:
        skipped.append("Policy lag: no run reported training_batch_mean and policy_lag_mean.")
    if {"a3c", "ga3c"} <= {r.algo for r in like_for_like(runs)}:
        sections.append(("GA3C vs A3C", "Same game, network and other settings, both algorithms; bars are means "
                         "over runs (error bars: spread over runs).",
                         [plot_ga3c_vs_a3c(runs, out)]))
    else:
        skipped.append("GA3C vs A3C: no GA3C run configured like an A3C run (same overrides but algo).")

    columns = ["run", "label", "game", "net", "algo", "seed", "status", "frames", "wall_seconds", "score_mean_100",
               "fps_run_mean", "pps", "tps", "training_batch_mean", "policy_lag_mean", "agents", "predictors",
               "trainers"]
    rows = []
    for run in runs:
        rows.append(dict(run=str(run.path), label=run.label, game=run.game, net=run.net, algo=run.algo, seed=run.seed,
                         status=run.summary.get("status", "?"), frames=run.final("frames"),
                         wall_seconds=run.final("wall_seconds"), score_mean_100=run.final("score_mean_100"),
                         fps_run_mean=run.final("fps_run_mean"), pps=run.steady("pps"), tps=run.steady("tps"),
                         training_batch_mean=run.steady("training_batch_mean"),
                         policy_lag_mean=run.steady("policy_lag_mean"), agents=run.summary.get("agents"),
                         predictors=run.summary.get("predictors"), trainers=run.summary.get("trainers")))
    with open(out / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    images = [p for _, _, ps in sections for p in ps]
    (out / "report.html").write_text(_html(title, paths, varied, rows, columns, sections, skipped))
    return dict(html=out / "report.html", images=images, runs=runs, varied=varied, skipped=skipped)


def _html(title, paths, varied, rows, columns, sections, skipped) -> str:
    head = ("<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
            "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;"
            "text-align:right}td:nth-child(-n+6),th{text-align:left}img{max-width:100%;border:1px solid #eee}"
            "code{background:#f4f4f4;padding:0 3px}</style>")
    shown = ["label", "game", "net", "algo", "seed", "status", "frames", "wall_seconds", "score_mean_100",
             "fps_run_mean", "pps", "tps", "training_batch_mean", "policy_lag_mean"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{head}</head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p>{len(rows)} runs from {', '.join(f'<code>{html.escape(str(p))}</code>' for p in paths)}; "
             f"generated {time.strftime('%Y-%m-%d %H:%M')} by <code>python -m ga3c.tools.report</code>. "
             f"Varied keys: {html.escape(', '.join(varied) or 'none')}.</p>",
             "<h2>Runs</h2><table><tr>" + "".join(f"<th>{c}</th>" for c in shown) + "</tr>"]
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{_fmt(row[c], 0 if c in ('frames',) else 1)}</td>" for c in shown) + "</tr>")
    parts.append("</table><p>Rates (pps, tps, batch, lag) are means over the run's windows; fps_run_mean is frames "
                 "over wall time. Full paths are in runs.csv.</p>")
    for heading, text, images in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2><p>{html.escape(text)}</p>")
        for image in images:
            data = base64.b64encode(image.read_bytes()).decode()
            parts.append(f"<p><img alt='{image.stem}' src='data:image/png;base64,{data}'></p>")
    if skipped:
        parts.append("<h2>Not drawn</h2><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in skipped) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


# --- W&B Report ------------------------------------------------------------------------------------------
# A W&B Report needs the optional package wandb-workspaces (pip install -e ".[report]"). The report is built
# offline from the local runs (which groups, which keys vary); only save() talks to W&B.

@dataclass(frozen=True)
class Study:
    """One section of the W&B Report: a heading, the question it answers and the panels beyond the common ones
    (title, x metric, y metrics)."""
    heading: str
    question: str
    extra_panels: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


WALL, FRAMES = "wall_seconds", "frames"
# x axes are metrics every run logs itself: W&B's own step differs between GA3C (Lightning counts log calls,
# trainer/global_step holds the frames) and A3C (step = frames), and wall_seconds is the clock the HTML report
# and ga3c.tools.learncurve use (it continues across a resume).
COMMON_PANELS = (("Score against wall time", WALL, ("score_mean_100",)),
                 ("Score against env frames", FRAMES, ("score_mean_100",)),
                 ("Env frames per second (FPS)", WALL, ("fps",)),
                 ("Training samples per second", WALL, ("samples_per_s",)))
AXIS_TITLES = {WALL: "wall time (s)", FRAMES: "env frames (frame skip included)",
               "score_mean_100": "score (mean of last 100 episodes, raw)", "fps": "env frames/s",
               "samples_per_s": "training samples/s"}

# The research questions: conf/experiment/<name>.yaml sets wandb.group=<name> (a test checks each rq* has one).
STUDIES = {
    "rq1_ga3c_vs_a3c": Study(
        "RQ1: GA3C against CPU A3C",
        "Throughput (frames/s) and learning speed (score against wall time) of GA3C and the CPU A3C baseline on "
        "the paper's five Atari games, same network, same wall time."),
    "rq2_counts_grid": Study(
        "RQ2: agents, predictors and trainers",
        "How the counts N_A (agents), N_P (predictors) and N_T (trainers), held fixed, affect utilisation, "
        "throughput and stability.",
        (("Predictions and trainings per second (PPS, TPS)", WALL, ("pps", "tps")),
         ("Utilisation: busy share of predictors and trainers", WALL,
          ("predictor_busy_share", "trainer_busy_share")))),
    "rq3_autotune": Study(
        "RQ3: auto-tuned counts",
        "The paper's hill climber (autotune=ga3c) against fixed counts (autotune=off) across games, both starting "
        "from the same small counts.",
        (("N_A, N_P, N_T over time", WALL, ("agents", "predictors", "trainers")),)),
    "rq4_training_batch": Study(
        "RQ4: training batch size",
        "The minimum training batch (0 = every rollout trained alone, the original GA3C) against policy lag, "
        "throughput and stability of learning.",
        (("Policy lag (updates between acting and training)", WALL, ("policy_lag_mean",)),
         ("Training batch (samples per update)", WALL, ("training_batch_mean",)))),
    "rq5_network_size": Study(
        "RQ5: network size",
        "The paper's small network against the Nature-DQN one, GA3C and A3C: does GA3C's speed-up grow with the "
        "network?"),
}
LEARNCURVE_PREFIX = "learncurve-"   # python -m ga3c.tools.learncurve logs its runs in the group learncurve-GAME

# Config groups are logged to W&B as their config, not their option name: the key that tells the options apart.
GROUP_CONFIG_KEYS = {"game": "game.name", "algo": "algo.name", "autotune": "autotune.name",
                     "net": "net.hidden",   # 256 small, 512 large, [64, 64] mlp
                     "optimizer": "learner.optimizer._target_"}


def study_of(group: str) -> Study:
    if group in STUDIES:
        return STUDIES[group]
    if group.startswith(LEARNCURVE_PREFIX):
        game = group[len(LEARNCURVE_PREFIX):]
        return Study(f"Learning benchmark: {game}",
                     f"python -m ga3c.tools.learncurve game={game}: each arm over seeds, score against wall time and "
                     "frames (the times to the game's score thresholds are in the learncurve run's table).")
    return Study(f"W&B group {group}", "The runs of one study (its multirun's shared W&B group).")


def wandb_groupby(runs: list[Run]) -> list[str]:
    """The config keys (as W&B run-set groupby strings) whose values differ between these runs, seeds aside:
    seeds of one configuration become one line."""
    keys = sorted({k for r in runs for k in r.params} - {"experiment"})
    varied = [k for k in keys if "/" not in k and len({r.params.get(k, "default") for r in runs}) > 1]
    return [f"config.{GROUP_CONFIG_KEYS.get(k, k)}" for k in varied]


def wandb_run_ids(run: Run) -> list[str]:
    """The W&B run id(s) of a run directory, from wandb's own folder names (offline-run-DATE_TIME-ID, run-...)."""
    folders = sorted((run.path / "wandb").glob("offline-run-*")) + sorted((run.path / "wandb").glob("run-*"))
    return sorted({folder.name.rsplit("-", 1)[-1] for folder in folders if folder.is_dir()})


def _panel(wr, title: str, x: str, y: tuple[str, ...]):
    return wr.LinePlot(title=title, x=x, y=list(y), title_x=AXIS_TITLES.get(x),
                       title_y=AXIS_TITLES.get(y[0]) if len(y) == 1 else None)


def wandb_online() -> tuple[bool, str]:
    """Whether a W&B Report can be published from here, and if not, why."""
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return False, f"WANDB_MODE={os.environ['WANDB_MODE']}"
    try:
        import wandb_workspaces.reports.v2  # noqa: F401
    except ImportError:
        return False, 'the wandb-workspaces package is not installed (pip install -e ".[report]")'
    try:
        import wandb

        if not wandb.Api(timeout=10).api_key:
            return False, "not logged in to W&B"
    except Exception as error:  # noqa: BLE001
        if "API key" in str(error):   # wandb.Api raises UsageError("No API key configured ...") before any login
            return False, "not logged in to W&B"
        return False, f"W&B cannot be reached ({type(error).__name__}: {error})"
    return True, "online"


def wandb_report(runs: list[Run], title: str, project: str | None, entity: str, sources: str = ""):
    """The W&B Report of the runs (not saved): one section per W&B group (a study, e.g. a research question)
    with its score and throughput panels over a run set filtered to that group, grouped by the config keys that
    vary within it. Needs label_runs(runs) first. Constructing it makes no W&B call as long as entity is given
    (wandb_workspaces would otherwise ask the API for the default entity)."""
    import wandb_workspaces.reports.v2 as wr

    if not entity:
        raise ValueError("a W&B Report needs an entity (--entity, wandb.entity, or the logged-in user's)")
    project = project or next((r.cfg("wandb.project") for r in runs if r.cfg("wandb.project")), "ga3c")
    by_group: dict[str, list[Run]] = {}
    for run in runs:
        by_group.setdefault(str(run.cfg("wandb.group") or ""), []).append(run)

    # the studies in RQ order, then learncurve and other groups by name, ungrouped runs last
    order = list(STUDIES)
    sections, left_out = [], []
    for group in sorted(by_group, key=lambda g: (not g, order.index(g) if g in order else len(order), g)):
        members = by_group[group]
        if group:
            study = study_of(group)
            filters = f"Metric('Group') == {group!r}"
        else:   # no group to filter by: the runs themselves, by W&B run id
            untracked = [r for r in members if not wandb_run_ids(r)]
            if untracked:
                left_out.append(f"{len(untracked)} runs without a W&B group or W&B run (wandb.mode=disabled)")
            members = [r for r in members if r not in untracked]
            if not members:
                continue
            ids = sorted({i for r in members for i in wandb_run_ids(r)})
            study = Study("Runs without a W&B group", "Single runs (python train.py without an experiment).")
            filters = f"Metric('ID') in {ids!r}"
        groupby = wandb_groupby(members)
        runset = wr.Runset(entity=entity, project=project, name=group or "ungrouped", filters=filters,
                           groupby=groupby)
        panels = [_panel(wr, *spec) for spec in COMMON_PANELS + study.extra_panels]
        grouped = ", ".join(g.removeprefix("config.") for g in groupby) or "nothing (one configuration)"
        sections += [wr.H1(text=study.heading),
                     wr.P(text=f"{study.question} W&B group {group or '(none)'}: {len(members)} local runs; lines "
                               f"grouped by {grouped}."),
                     wr.PanelGrid(runsets=[runset], panels=panels)]
    intro = (f"Built by python -m ga3c.tools.report from {len(runs)} local runs{' in ' + sources if sources else ''}. "
             "One section per study (W&B group). Wall time and frames on the x axes are the runs' own "
             "wall_seconds and frames metrics." + "".join(f" Not shown: {note}." for note in left_out))
    toc = [wr.TableOfContents()] if len(sections) > 3 else []
    # W&B limits report titles to 128 characters
    return wr.Report(project=project, entity=entity, title=title[:128], description=intro[:1000], width="fluid",
                     blocks=[wr.P(text=intro), *toc, *sections])


def publish_wandb_report(runs: list[Run], title: str, project: str | None, entity: str | None,
                         sources: str = "") -> str:
    """Save the W&B Report online (needs a login); returns its URL."""
    import wandb

    # runs logged without wandb.entity went to the logged-in user's default entity
    entity = entity or next((r.cfg("wandb.entity") for r in runs if r.cfg("wandb.entity")), None) \
        or wandb.Api(timeout=30).default_entity
    report = wandb_report(runs, title, project, entity, sources)
    report.save()
    return report.url


def sync_command(runs: list[Run]) -> str:
    """The `wandb sync` command that uploads these runs' offline W&B runs (per run directory, or per multirun)."""
    dirs = sorted({r.path for r in runs if any((r.path / "wandb").glob("offline-run-*"))})
    if not dirs:
        return "no offline W&B runs here: train with wandb.mode=offline or online"
    if len(dirs) > 3:   # a multirun's jobs are siblings: one pattern per parent
        patterns = [f"{parent}/*/wandb/offline-run-*" for parent in sorted({d.parent for d in dirs})]
    else:
        patterns = [f"{d}/wandb/offline-run-*" for d in dirs]
    return "wandb sync " + " ".join(patterns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ga3c.tools.report", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="run or multirun directories (searched recursively)")
    parser.add_argument("-o", "--out", type=Path, help="output directory (default: DIR/report for one DIR, "
                        "else ./reports/DATE_TIME)")
    parser.add_argument("--title", default=None, help="report title")
    parser.add_argument("--wandb-report", action="store_true", help="also publish a W&B Report (needs W&B online)")
    parser.add_argument("--project", default=None, help="W&B project of the report (default: the runs')")
    parser.add_argument("--entity", default=None, help="W&B entity of the report (default: the runs')")
    args = parser.parse_args(argv)
    out = args.out or (args.dirs[0] / "report" if len(args.dirs) == 1 else
                       Path("reports") / time.strftime("%Y-%m-%d_%H-%M-%S"))
    title = args.title or f"GA3C report: {', '.join(p.name or str(p) for p in args.dirs)}"
    try:
        made = build(args.dirs, out, title)
    except FileNotFoundError as error:
        print(f"ga3c.tools.report: error: {error}", file=sys.stderr)
        return 2
    print(f"[report] {len(made['runs'])} runs, varied keys: {', '.join(made['varied']) or 'none'}")
    for image in made["images"]:
        print(f"[report] plot: {image}")
    for reason in made["skipped"]:
        print(f"[report] not drawn: {reason}")
    print(f"[report] HTML: {made['html']}")
    if args.wandb_report:
        online, why = wandb_online()
        if not online:
            print(f"[report] No W&B Report published ({why}); the HTML report above has everything. To publish: "
                  f"wandb login, upload the runs ({sync_command(made['runs'])}), then run this again.")
        else:
            try:
                url = publish_wandb_report(made["runs"], title, args.project, args.entity,
                                           sources=", ".join(map(str, args.dirs)))
                print(f"[report] W&B Report: {url}")
            except Exception as error:  # noqa: BLE001 - the HTML report is written either way
                print(f"[report] W&B Report failed ({type(error).__name__}: {error}); the HTML report is written")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
