"""Reading what a run writes, and drawing its curves: the one place the study tools (learncurve, suite, bench,
report) read `summary.json` and `metrics.jsonl`.

    python -m ga3c.tools.runs extract RUN_DIR OUT.csv          # a run's curve columns, small enough to commit
    python -m ga3c.tools.runs plot OUT.png RUN_OR_CSV [...]    # score and policy entropy against frames, a line each
    python -m ga3c.tools.runs compare RUN_OR_CSV [...] [--minutes 5,10,15] [--frames 2e6,4e6]
        # a markdown table: each run's rolling-100 score at those wall times and frame counts, and at its end

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


def value_at(curve: dict, key: str, mark: float, column: str = "score_mean_100") -> float:
    """`column` at the last window whose `key` (wall_seconds or frames) is at or before `mark`; NaN when the
    run never got within 2 % of it (a 15-minute run has no score at 30 minutes)."""
    marks = curve[key]
    if not marks or marks[-1] < 0.98 * mark:
        return math.nan
    found = math.nan
    for at, value in zip(marks, curve[column]):
        if at > mark:
            break
        found = value
    return found


def compare_table(sources: list[Path], minutes: list[float], frames: list[float] | None = None) -> str:
    """Each run's rolling-100 score at `minutes` of wall time and at `frames` env frames (default: a third,
    two thirds and all of the frames the shortest run reached), its last score, frames, frames/s and policy
    entropy: runs of other hosts or budgets side by side, by time and by frames."""
    curves = {source: read_curve(source) for source in sources}
    if frames is None:
        reached = [c["frames"][-1] for c in curves.values() if c["frames"]]
        shortest = min(reached) if reached else 0.0
        frames = [float(f"{shortest * k / 3:.2g}") for k in (1, 2, 3)] if shortest else []
    head = (["run"] + [f"@ {m:g} min" for m in minutes] + [f"@ {f / 1e6:g} M frames" for f in frames]
            + ["last score", "frames", "frames/s", "entropy (last)"])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def cell(value: float, digits: int = 1) -> str:
        return "—" if value != value else f"{value:,.{digits}f}"

    for source, curve in curves.items():
        name = str(source)
        if not curve["frames"]:
            lines.append("| " + " | ".join([name] + ["—"] * (len(head) - 1)) + " |")
            continue
        scores = [v for v in curve["score_mean_100"] if v == v]
        wall, total = curve["wall_seconds"][-1], curve["frames"][-1]
        entropies = [v for v in curve["loss/entropy"] if v == v]
        lines.append("| " + " | ".join(
            [name] + [cell(value_at(curve, "wall_seconds", 60 * m)) for m in minutes]
            + [cell(value_at(curve, "frames", f)) for f in frames]
            + [cell(scores[-1] if scores else math.nan), f"{total / 1e6:.2f} M",
               cell(total / wall if wall > 0 else math.nan, 0), cell(entropies[-1] if entropies else math.nan, 2)])
            + " |")
    return "\n".join(lines) + "\n"


def _numbers(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


USAGE = ("usage: python -m ga3c.tools.runs extract RUN_DIR OUT.csv | plot OUT.png RUN_DIR_OR_CSV [...] | "
         "compare RUN_DIR_OR_CSV [...] [--minutes 5,10,15] [--frames 2e6,4e6]")


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
    if len(argv) >= 2 and argv[0] == "compare":
        args, options = list(argv[1:]), {"--minutes": "5,10,15", "--frames": None}
        for option in options:
            if option in args:
                at = args.index(option)
                if at + 1 >= len(args):
                    print(f"ga3c.tools.runs: error: {option} needs a comma-separated list of numbers", file=sys.stderr)
                    return 2
                options[option] = args.pop(at + 1)
                args.pop(at)
        try:
            minutes = _numbers(options["--minutes"])
            frames = _numbers(options["--frames"]) if options["--frames"] is not None else None
        except ValueError:
            print(f"ga3c.tools.runs: error: --minutes and --frames take numbers like 5,10,15 or 2e6,4e6, got "
                  f"{options['--minutes']!r} and {options['--frames']!r}", file=sys.stderr)
            return 2
        missing = [s for s in args if not Path(s).exists()]
        if missing or not args:
            print(f"ga3c.tools.runs: error: no such run or CSV: {', '.join(missing) or '(none given)'}",
                  file=sys.stderr)
            return 2
        print(compare_table([Path(s) for s in args], minutes, frames), end="")
        return 0
    print(USAGE, file=sys.stderr)
    return 0 if argv in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main())
