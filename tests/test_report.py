"""python -m ga3c.tools.report: HTML with PNG plots from run and multirun directories, offline."""
from __future__ import annotations

import base64
import csv
import importlib.util
import json
import math
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from ga3c.tools.report import build, find_runs, label_runs
from helpers import REPO, assert_no_leftovers, read_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def report(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ga3c.tools.report", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **(env or {})))


def check_html(html_path: Path, pngs: list[Path]) -> str:
    html = html_path.read_text()
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert "src='http" not in html and "src=\"http" not in html, "the report must not need the network"
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000, f"{png} is not a real plot"
        assert base64.b64encode(data).decode() in html, f"{png.name} is not embedded in the HTML"
    return html


def fake_run(path: Path, overrides: list[str], choices: dict, windows: list[dict], status: str = "finished") -> None:
    """A run directory with the files train.py writes: summary.json, metrics.jsonl and .hydra/."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (path / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n" + "".join(f"      {k}: {v}\n" for k, v in choices.items()))
    (path / ".hydra" / "config.yaml").write_text(f"seed: 0\ngame:\n  name: {choices['game']}\n"
                                                 f"wandb:\n  group: g1\n  project: ga3c\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    summary = dict(windows[-1], status=status, fps_run_mean=windows[-1]["frames"] / windows[-1]["wall_seconds"])
    (path / "summary.json").write_text(json.dumps(summary))


def windows_of(rng: random.Random, fps: float, n: int = 12, tuned: bool = False, batch: float = 32.0) -> list[dict]:
    out, frames, agents = [], 0, 8
    for i in range(n):
        frames += int(fps * 5 * rng.uniform(0.8, 1.2))
        if tuned and i % 3 == 2:
            agents += rng.choice([-1, 1, 2])
        out.append(dict(frames=frames, wall_seconds=5.0 * (i + 1), fps=fps * rng.uniform(0.8, 1.2),
                        pps=fps * rng.uniform(0.7, 1.0), tps=fps / batch * rng.uniform(0.8, 1.2),
                        samples_per_s=fps / 4 * rng.uniform(0.8, 1.2), predictor_busy_share=rng.uniform(0.3, 0.9),
                        trainer_busy_share=rng.uniform(0.3, 0.9),
                        score_mean_100=-21 + i * rng.uniform(0.5, 1.5) if i else math.nan,
                        training_batch_mean=batch * rng.uniform(0.9, 1.1), policy_lag_mean=rng.uniform(1, 4),
                        agents=agents, predictors=2, trainers=2 if not tuned else 2 + i % 2))
    return out


def test_report_from_synthetic_study_draws_every_plot(tmp_path):
    """A3C and GA3C, auto-tuned and fixed, two batch sizes: every plot has data and is drawn."""
    rng = random.Random(0)
    study = tmp_path / "multirun"
    specs = [("ga3c", "off", 32, 4000.0), ("ga3c", "ga3c", 32, 4500.0), ("a3c", "off", 32, 700.0),
             ("ga3c", "off", 128, 5000.0)]
    for i, (algo, tuner, batch, fps) in enumerate(specs):
        fake_run(study / str(i), [f"algo={algo}", f"autotune={tuner}", f"training_min_batch={batch}", "seed=0",
                                  "hydra.run.dir=x"],
                 dict(game="pong", net="small", algo=algo, autotune=tuner),
                 windows_of(rng, fps, tuned=tuner == "ga3c", batch=batch))
    (study / "0" / "wandb").mkdir()   # not a run: skipped
    out = tmp_path / "report"
    result = report(str(study), "-o", str(out), "--title", "synthetic study")
    assert result.returncode == 0, result.stdout + result.stderr
    names = {"score_vs_time", "score_vs_frames", "throughput", "autotune_counts", "policy_lag", "ga3c_vs_a3c"}
    pngs = sorted(out.glob("*.png"))
    assert {p.stem for p in pngs} == names
    html = check_html(out / "report.html", pngs)
    assert "synthetic study" in html and "Not drawn" not in html
    assert "varied keys: algo, autotune, training_min_batch" in result.stdout
    # runs.csv holds each run's numbers, computed from its own files
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert len(rows) == 4
    for row in rows:
        windows = [json.loads(line) for line in (Path(row["run"]) / "metrics.jsonl").read_text().splitlines()]
        assert float(row["tps"]) == pytest.approx(statistics.fmean(w["tps"] for w in windows[1:-1]))
        assert float(row["frames"]) == read_summary(Path(row["run"]))["frames"]
        assert row["label"].startswith(f"algo={row['algo']}, ")


def test_labels_group_seeds_and_ignore_paths(tmp_path):
    rng = random.Random(1)
    for i, (batch, seed) in enumerate([(16, 0), (16, 1), (64, 0), (64, 1)]):
        fake_run(tmp_path / str(i), [f"training_min_batch={batch}", f"seed={seed}", f"hydra.run.dir=/x/{i}",
                                     f"wandb.name=r{i}"], dict(game="cartpole", net="mlp"), windows_of(rng, 3000.0))
    runs = find_runs([tmp_path])
    assert label_runs(runs) == ["training_min_batch"]
    assert sorted(r.label for r in runs) == ["training_min_batch=16"] * 2 + ["training_min_batch=64"] * 2
    made = build([tmp_path], tmp_path / "out")
    assert any("Auto-tuned counts" in s for s in made["skipped"]) and any("GA3C vs A3C" in s for s in made["skipped"])


def test_report_without_runs_and_wandb_offline(tmp_path):
    empty = report(str(tmp_path))
    assert empty.returncode == 2 and "no run directories" in empty.stderr
    fake_run(tmp_path / "run", ["game=cartpole"], dict(game="cartpole", net="mlp"),
             windows_of(random.Random(2), 3000.0))
    (tmp_path / "run" / "wandb" / "offline-run-20261130_140000-abc123xy").mkdir(parents=True)
    offline = report(str(tmp_path / "run"), "--wandb-report", env={"WANDB_MODE": "offline"})
    assert offline.returncode == 0, offline.stderr
    assert "No W&B Report published (WANDB_MODE=offline)" in offline.stdout
    assert f"wandb sync {tmp_path / 'run'}/wandb/offline-run-*" in offline.stdout   # how to upload the run
    assert (tmp_path / "run" / "report" / "report.html").is_file()


@pytest.mark.slow
def test_two_job_cartpole_multirun_then_report(tmp_path):
    """A real multirun in one process (Hydra's basic launcher): two run directories, one W&B run each in
    the study's group, nothing left running; then the report from the multirun directory."""
    sweep_dir = tmp_path / "multirun"
    env = dict(os.environ, GA3C_TEST_MARKER=str(sweep_dir))
    result = subprocess.run([sys.executable, "train.py", "-m", "experiment=cartpole_demo", "max_frames=30000",
                             f"hydra.sweep.dir={sweep_dir}", "log.every_seconds=1", "log.progress=false",
                             "wandb.mode=offline"], cwd=REPO, capture_output=True, text=True, timeout=400, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    runs = [sweep_dir / "0", sweep_dir / "1"]
    ids = set()
    for run in runs:
        summary = read_summary(run)
        assert summary["status"] == "finished" and summary["frames"] >= 30000
        history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        # logged while running, not only at the end (30k frames: 2.5 s or more even on a fast machine)
        assert len(history) >= 2 and history[-1]["frames"] == summary["frames"]
        [offline] = list((run / "wandb").glob("offline-run-*"))
        ids.add(offline.name)
        record = next(offline.glob("*.wandb")).read_bytes()
        for text in (b"cartpole_demo", b"game:cartpole", b"net:mlp", b"algo:ga3c", b"autotune:off"):
            assert text in record, f"{run}: W&B run lacks group/tag {text!r}"
    assert len(ids) == 2, "the second job must not reuse the first job's W&B run"
    assert_no_leftovers(str(sweep_dir))

    out = tmp_path / "report"
    made = report(str(sweep_dir), "-o", str(out))
    assert made.returncode == 0, made.stdout + made.stderr
    pngs = sorted(out.glob("*.png"))
    assert {"score_vs_time", "score_vs_frames", "throughput", "policy_lag"} <= {p.stem for p in pngs}
    html = check_html(out / "report.html", pngs)
    assert "training_min_batch=16" in html and "training_min_batch=64" in html

    # the W&B Report of this study (when wandb-workspaces is installed, as the test extra does): every metric a
    # panel of any study plots is one these real runs log to W&B, and the run set is the study's group
    if importlib.util.find_spec("wandb_workspaces") is not None:
        from ga3c.tools.report import COMMON_PANELS, STUDIES, wandb_report

        found = find_runs([sweep_dir])
        label_runs(found)
        [_, _, grid] = wandb_report(found, "cartpole demo", None, "my-team").blocks[-3:]
        [runset] = grid.runsets
        assert runset.filters == "Metric('Group') == 'cartpole_demo'"
        assert runset.groupby == ["config.training_min_batch"]
        plotted = {m for _, x, ys in COMMON_PANELS + tuple(p for s in STUDIES.values() for p in s.extra_panels)
                   for m in (x, *ys)}
        for run in runs:
            logged = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
            record = next(next((run / "wandb").glob("offline-run-*")).glob("*.wandb")).read_bytes()
            for metric in plotted:
                assert metric in logged and metric.encode() in record, f"{run}: {metric} is not logged"


# --- the W&B Report: built offline, never saved --------------------------------------------------------------
def needs_wandb_workspaces():
    """wandb_workspaces.reports.v2, or a skip when the optional package is not installed (an installed one that
    fails to import, e.g. too old for this wandb, fails the test instead of hiding behind the skip)."""
    if importlib.util.find_spec("wandb_workspaces") is None:
        pytest.skip("wandb-workspaces is not installed (pip install -e '.[test]' or '.[report]'): "
                    "the W&B Report cannot be built")
    import wandb_workspaces.reports.v2 as wr

    return wr


def study_run(path: Path, overrides: list[str], choices: dict, rng: random.Random, wandb_id: str | None = None):
    """A run directory as train.py writes it, its .hydra/config.yaml the real composed config of the overrides
    (so the W&B group and the config keys the report groups by are the project's own)."""
    from omegaconf import OmegaConf

    from helpers import compose_config

    fake_run(path, overrides, choices, windows_of(rng, 3000.0))
    cfg = compose_config(*overrides, output_dir=path)
    (path / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))   # unresolved, as Hydra saves it
    if wandb_id:
        (path / "wandb" / f"offline-run-20261130_140000-{wandb_id}").mkdir(parents=True)


@pytest.fixture
def study_runs(tmp_path):
    """Two research questions, a learning benchmark and two single runs, as the report reads them."""
    from ga3c.tools.report import find_runs, label_runs

    rng, root = random.Random(3), tmp_path / "runs"
    for algo in ("ga3c", "a3c"):
        for game in ("pong", "boxing"):
            for seed in (0, 1):
                study_run(root / f"rq1-{algo}-{game}-{seed}", ["experiment=rq1_ga3c_vs_a3c", f"algo={algo}",
                          f"game={game}", f"seed={seed}"],
                          dict(game=game, net="small", algo=algo, autotune="off", experiment="rq1_ga3c_vs_a3c"), rng)
    for batch in (0, 128):
        for seed in (0, 1):
            study_run(root / f"rq4-{batch}-{seed}", ["experiment=rq4_training_batch", f"training_min_batch={batch}",
                      f"seed={seed}"], dict(game="pong", net="small", algo="ga3c", autotune="off",
                                            experiment="rq4_training_batch"), rng)
    for arm, extra in (("ga3c", []), ("batch0", ["training_min_batch=0"])):   # as ga3c.tools.learncurve starts them
        study_run(root / f"learncurve-{arm}", ["game=cartpole", *extra, "seed=0", "wandb.group=learncurve-cartpole"],
                  dict(game="cartpole", net="mlp", algo="ga3c", autotune="off"), rng)
    study_run(root / "single", ["game=cartpole"], dict(game="cartpole", net="mlp", algo="ga3c", autotune="off"),
              rng, wandb_id="abc123xy")
    study_run(root / "untracked", ["game=cartpole", "wandb.mode=disabled"],
              dict(game="cartpole", net="mlp", algo="ga3c", autotune="off"), rng)
    runs = find_runs([root])
    label_runs(runs)
    return runs


@pytest.fixture
def no_network(monkeypatch):
    """Any W&B API object or socket connection fails the test: the report must be built without either."""
    import socket

    import wandb

    def refuse(*args, **kwargs):
        raise AssertionError("the W&B Report must be built without W&B's API or the network")

    monkeypatch.setattr(wandb, "Api", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("WANDB_MODE", "offline")


def test_wandb_report_has_a_section_per_study_with_its_panels_and_run_set(study_runs, no_network):
    wr = needs_wandb_workspaces()
    from omegaconf import OmegaConf
    from wandb_workspaces import expr

    from ga3c.tools.report import STUDIES, wandb_report

    report = wandb_report(study_runs, "GA3C studies " + "x" * 200, None, "my-team", sources="runs/")
    assert isinstance(report, wr.Report)
    assert (report.entity, report.project) == ("my-team", "ga3c") and len(report.title) == 128   # W&B's limit
    assert "16 local runs in runs/" in report.description
    assert "Not shown: 1 runs without a W&B group or W&B run (wandb.mode=disabled)" in report.description
    blocks = report.blocks
    assert [type(b) for b in blocks[:2]] == [wr.P, wr.TableOfContents]
    sections = [blocks[i:i + 3] for i in range(2, len(blocks), 3)]
    assert all([type(b) for b in s] == [wr.H1, wr.P, wr.PanelGrid] for s in sections)
    assert [s[0].text for s in sections] == [STUDIES["rq1_ga3c_vs_a3c"].heading, STUDIES["rq4_training_batch"].heading,
                                            "Learning benchmark: cartpole", "Runs without a W&B group"]

    expected = {   # run set name: (filter leaf (key, op, value), groupby, extra panel metrics)
        "rq1_ga3c_vs_a3c": (("group", "=", "rq1_ga3c_vs_a3c"), ["config.algo.name", "config.game.name"], []),
        "rq4_training_batch": (("group", "=", "rq4_training_batch"), ["config.training_min_batch"],
                               [["policy_lag_mean"], ["training_batch_mean"]]),
        "learncurve-cartpole": (("group", "=", "learncurve-cartpole"), ["config.training_min_batch"], []),
        "ungrouped": (("name", "IN", ["abc123xy"]), [], []),   # W&B's backend calls the run ID `name`
    }

    def section_of(run):   # its W&B group; single runs together, those without a W&B run in none
        return run.cfg("wandb.group") or ("ungrouped" if (run.path / "wandb").is_dir() else None)

    for heading, text, grid in sections:
        [runset] = grid.runsets
        leaf, groupby, extra = expected[runset.name]
        assert (runset.entity, runset.project) == ("my-team", "ga3c")
        parsed = expr.expr_to_filters(runset.filters)   # what save() sends: the run attribute, not a config key
        assert (parsed.key.section, parsed.key.name, parsed.op, parsed.value) == ("run", *leaf)
        assert runset.groupby == groupby
        members = [r for r in study_runs if section_of(r) == runset.name]
        assert f"{len(members)} local runs" in text.text
        for key in groupby:   # every key the run set groups by is in the config the runs log to W&B
            assert len({str(OmegaConf.select(OmegaConf.create(r.config), key.removeprefix("config."))) for r in
                        members}) > 1, key
        assert all(isinstance(p, wr.LinePlot) for p in grid.panels)
        assert [(p.x, p.y) for p in grid.panels[:4]] == [
            ("wall_seconds", ["score_mean_100"]), ("frames", ["score_mean_100"]),
            ("wall_seconds", ["fps"]), ("wall_seconds", ["samples_per_s"])]
        assert [p.y for p in grid.panels[4:]] == extra
        metrics = json.loads((members[0].path / "metrics.jsonl").read_text().splitlines()[0])
        for panel in grid.panels:   # the metrics plotted are ones the runs log
            assert panel.x in metrics and all(y in metrics for y in panel.y), panel.title


def test_wandb_report_serialises_as_save_would_send_it(study_runs, no_network, monkeypatch):
    """Turn the report into the spec save() uploads, with the two W&B calls that needs (the client and the
    project's internal id of each run set) stubbed: every block, panel and filter must convert."""
    needs_wandb_workspaces()
    from wandb_workspaces.reports.v2 import interface

    from ga3c.tools.report import wandb_report

    if not (hasattr(interface, "_get_api") and hasattr(interface, "execute_graphql")):
        pytest.skip("this wandb-workspaces version converts reports differently (no _get_api/execute_graphql)")
    asked = []
    monkeypatch.setattr(interface, "_get_api", lambda: None)
    monkeypatch.setattr(interface, "execute_graphql", lambda api, query, variables: asked.append(variables) or
                        {"project": {"internalId": "project-id"}})
    report = wandb_report(study_runs, "GA3C studies", "ga3c-lab", "my-team")
    spec = json.loads(report._to_model().spec.model_dump_json(by_alias=True, exclude_none=True))
    assert asked and all(v == {"entityName": "my-team", "projectName": "ga3c-lab"} for v in asked)
    grids = [b for b in spec["blocks"] if b["type"] == "panel-grid"]
    assert len(grids) == 4
    text = json.dumps(grids)
    for value in ("rq1_ga3c_vs_a3c", "rq4_training_batch", "learncurve-cartpole", "abc123xy", "score_mean_100",
                  "wall_seconds", "samples_per_s", "algo.value.name", "training_min_batch.value"):
        assert value in text, value


def test_wandb_report_publishes_from_the_command_when_online(tmp_path, study_runs, no_network, monkeypatch, capsys):
    """--wandb-report online: the report is saved once, under the logged-in user's entity when the runs name none
    (save and the login check are stubbed; publishing for real needs a login)."""
    wr = needs_wandb_workspaces()
    import wandb

    from ga3c.tools import report as report_module

    saved = []

    class Api:   # what wandb.Api answers for a logged-in user
        default_entity = "me"

        def __init__(self, *args, **kwargs):
            pass

    monkeypatch.setattr(wandb, "Api", Api)
    monkeypatch.setattr(report_module, "wandb_online", lambda: (True, "online"))
    monkeypatch.setattr(wr.Report, "save", lambda self, *a, **k: saved.append(self) or self)
    monkeypatch.setattr(wr.Report, "url", property(lambda self: f"https://wandb.test/{self.entity}/{self.project}"))
    root = study_runs[0].path.parent
    assert report_module.main([str(root), "-o", str(tmp_path / "out"), "--wandb-report", "--project", "p"]) == 0
    assert "[report] W&B Report: https://wandb.test/me/p" in capsys.readouterr().out
    [report] = saved
    assert (report.entity, report.project) == ("me", "p")
    assert all(rs.entity == "me" and rs.project == "p" for b in report.blocks if isinstance(b, wr.PanelGrid)
               for rs in b.runsets)


def test_every_research_question_has_a_report_section():
    """Each conf/experiment/rq*.yaml logs to a W&B group the report knows (its heading and question)."""
    from omegaconf import OmegaConf

    from ga3c.tools.report import STUDIES

    groups = {OmegaConf.load(p).wandb.group for p in (REPO / "conf" / "experiment").glob("rq*.yaml")}
    assert len(groups) == 5 and groups == set(STUDIES)
