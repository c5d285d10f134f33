"""Reading what a run writes, and drawing its curves: the one place the study tools (learncurve, suite, bench,
report) read `summary.json` and `metrics.jsonl`.

    python -m ga3c.tools.runs extract RUN_DIR OUT.csv          # a run's curve columns, small enough to commit
    python -m ga3c.tools.runs plot OUT.png RUN_OR_CSV [...]    # score and policy entropy against frames, a line each

metrics.jsonl is read line by line rather than with pandas.read_json: a run killed mid-write leaves a cut last
line, which must cost that line only.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

CURVE_KEYS = ("wall_seconds", "frames", "updates", "score_mean_100", "loss/entropy", "loss/value_loss",
              "policy_lag_mean", "fps", "training_batch_mean", "grad_norm")


def read_json(path: Path) -> dict | None:
    """A JSON file (summary.json, scores.json), or None when it is missing or half-written."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_json_list(path: Path) -> list[dict]:
    """A JSON list (a suite table's suite.json), or [] when it is missing or half-written."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    return value if isinstance(value, list) else []


def read_summary(run_dir: Path) -> dict | None:
    return read_json(Path(run_dir) / "summary.json")


def read_metrics(run_dir: Path) -> list[dict]:
    """Every metrics window of a run, in time order (two windows can be written out of order: whichever thread
    ticks first measures). A line cut short by a killed run is skipped."""
    rows = []
    try:
        lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    rows.sort(key=lambda r: r["wall_seconds"] if isinstance(r.get("wall_seconds"), (int, float)) else 0.0)
    return rows


def number(value) -> float:
    """A metric as a float: NaN where a window has none (no finished episode yet, no update)."""
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def columns(rows: list[dict], keys=CURVE_KEYS) -> dict[str, list[float]]:
    """The metrics windows as columns of floats (NaN where a window lacks the key)."""
    return {key: [number(row.get(key)) for row in rows] for key in keys}


def read_curve(path: Path, keys=CURVE_KEYS) -> dict[str, list[float]]:
    """Columns of a run directory's metrics.jsonl, or of a CSV that `extract` wrote."""
    path = Path(path)
    if path.suffix == ".csv":
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        return {key: [number(r.get(key) or None) for r in rows] for key in keys}
    return columns(read_metrics(path), keys)


def extract(run_dir: Path, out: Path) -> Path:
    """The curve columns of a run as a CSV (a 60-minute run's metrics.jsonl is ~1 MB; this is ~60 KB)."""
    curve = read_curve(run_dir)
    with open(out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CURVE_KEYS)
        for row in zip(*(curve[k] for k in CURVE_KEYS)):
            writer.writerow(["" if v != v else round(v, 4) for v in row])
    return Path(out)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(out: Path, sources: list[Path], title: str | None = None) -> Path:
    """Score and policy entropy against frames, one line per run directory or extracted CSV."""
    plt = pyplot()
    fig, (score_ax, entropy_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for source in sources:
        curve = read_curve(source)
        frames = [f / 1e6 for f in curve["frames"]]
        name = Path(source).stem if Path(source).suffix == ".csv" else Path(source).name
        score_ax.plot(frames, curve["score_mean_100"], label=name)
        entropy_ax.plot(frames, curve["loss/entropy"], label=name)
    score_ax.set(xlabel="env frames (millions)", ylabel="rolling-100 score", title="score")
    entropy_ax.set(xlabel="env frames (millions)", ylabel="policy entropy (nats)", title="entropy of the policy")
    for axis in (score_ax, entropy_ax):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return Path(out)


USAGE = "usage: python -m ga3c.tools.runs extract RUN_DIR OUT.csv | plot OUT.png RUN_DIR_OR_CSV [...]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 3 and argv[0] == "extract" and len(argv) == 3:
        if not (Path(argv[1]) / "metrics.jsonl").is_file():
            print(f"ga3c.tools.runs: error: {argv[1]} has no metrics.jsonl", file=sys.stderr)
            return 2
        print(extract(Path(argv[1]), Path(argv[2])))
        return 0
    if len(argv) >= 3 and argv[0] == "plot":
        missing = [s for s in argv[2:] if not Path(s).exists()]
        if missing:
            print(f"ga3c.tools.runs: error: no such run or CSV: {', '.join(missing)}", file=sys.stderr)
            return 2
        print(plot_runs(Path(argv[1]), [Path(s) for s in argv[2:]]))
        return 0
    print(USAGE, file=sys.stderr)
    return 0 if argv in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main())
