"""Evaluate a checkpoint: play episodes, print the score table, keep an MP4 of the best episode.

    python -m ga3c.tools.play ckpt_path=outputs/DATE/TIME/checkpoints/last.ckpt episodes=10 [greedy=true]

Arguments are key=value. Play's own keys:
    ckpt_path   a Lightning checkpoint of a ga3c run, or a run directory (its checkpoints/last.ckpt)  [required]
    episodes    how many episodes to play (10)
    greedy      true: argmax actions; false: actions sampled from the policy, as in training (false)
    seed        env seed of the first episode; episode i uses seed + i (10000, away from training seeds)
    max_steps   cut an episode after this many agent steps (none: the game's own limit)
    video       write best_episode.mp4 (true)
    output_dir  where scores.json and the MP4 go (RUN_DIR/play-greedy or RUN_DIR/play-sampled)
Any other key=value is a config override (game=..., net=..., wandb.mode=disabled, wandb.project=...).
The game and network are those the run was trained with: the overrides saved in RUN_DIR/.hydra/ are
composed with conf/ again, so a checkpoint from a multirun job gets its own job's settings. Runs on the CPU.
Results go to W&B (job_type=eval, the run's group) as the run's wandb.mode says: offline by default.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ga3c.tools import REPO

PLAY_KEYS = {"ckpt_path": None, "episodes": 10, "greedy": False, "seed": 10_000, "max_steps": None, "video": True,
             "output_dir": None}
USAGE = "usage: python -m ga3c.tools.play ckpt_path=PATH [episodes=10] [greedy=false] [seed=10000] [max_steps=N] " \
        "[video=true] [output_dir=DIR] [CONFIG_OVERRIDE ...]"


class PlayError(ValueError):
    """Bad arguments or an unusable checkpoint: the message says what to change."""


def _parse_value(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", ""):
        return None
    try:
        return int(text)
    except ValueError:
        return text


def parse_args(argv: list[str]) -> tuple[dict, list[str]]:
    """Split key=value arguments into play's own options and config overrides."""
    options, overrides = dict(PLAY_KEYS), []
    for arg in argv:
        if arg in ("-h", "--help"):
            raise PlayError(USAGE + "\n\n" + __doc__)
        if "=" not in arg:
            raise PlayError(f"arguments are key=value, got {arg!r}\n{USAGE}")
        key, value = arg.split("=", 1)
        if key in PLAY_KEYS:
            options[key] = _parse_value(value)
        else:
            overrides.append(arg)
    if not options["ckpt_path"]:
        raise PlayError(f"ckpt_path is required\n{USAGE}")
    for key in ("episodes", "seed"):
        if not isinstance(options[key], int) or isinstance(options[key], bool):
            raise PlayError(f"{key} must be an integer, got {options[key]!r}")
    if options["episodes"] < 1:
        raise PlayError(f"episodes must be >= 1, got {options['episodes']}")
    if options["max_steps"] is not None and (not isinstance(options["max_steps"], int) or options["max_steps"] < 1):
        raise PlayError(f"max_steps must be a positive integer or null, got {options['max_steps']!r}")
    for key in ("greedy", "video"):
        if not isinstance(options[key], bool):
            raise PlayError(f"{key} must be true or false, got {options[key]!r}")
    return options, overrides


def locate(ckpt_path: str) -> tuple[Path, Path | None]:
    """(checkpoint file, its run directory if it sits in RUN_DIR/checkpoints/)."""
    path = Path(ckpt_path).expanduser()
    if path.is_dir():
        path = path / "checkpoints" / "last.ckpt"
    if not path.is_file():
        raise PlayError(f"ckpt_path {ckpt_path!r}: no checkpoint file at {str(path)!r}")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    return path, run_dir


def saved_overrides(run_dir: Path | None) -> list[str]:
    """The config overrides a run was started with (without hydra.*, paths and resume keys)."""
    if run_dir is None or not (run_dir / ".hydra" / "overrides.yaml").is_file():
        return []
    from omegaconf import OmegaConf

    skip = ("hydra.", "output_dir=", "ckpt_path=", "wandb.id=", "wandb.name=")
    return [o for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml") if not str(o).lstrip("+~").startswith(skip)]


def compose_run_config(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from hydra.errors import HydraException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            return compose(config_name="config", overrides=overrides + ["output_dir=unused", "ckpt_path=null"])
    except HydraException as error:
        raise PlayError(f"config overrides {overrides}: {error}") from None
    finally:
        GlobalHydra.instance().clear()


def load_model(cfg, ckpt: Path):
    """The checkpoint's actor-critic, on the CPU, in eval mode."""
    import torch
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from ga3c.env import env_spec

    obs_shape, _, num_actions = env_spec(OmegaConf.to_container(cfg.game, resolve=True))
    try:
        model = instantiate(cfg.net, obs_shape=tuple(obs_shape), num_actions=num_actions)
    except Exception as error:  # noqa: BLE001 - e.g. a conv net for a vector game
        raise PlayError(f"net: {error.__cause__ or error}") from None
    try:
        checkpoint = torch.load(ckpt, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001
        raise PlayError(f"{str(ckpt)!r} is not a readable checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise PlayError(f"{str(ckpt)!r} is not a ga3c Lightning checkpoint (no state_dict in it)")
    state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise PlayError(f"the checkpoint does not fit game={cfg.game.name} with this net (pass the run's game=... "
                        f"net=... overrides): {str(error).splitlines()[0]}") from None
    return model.eval(), checkpoint.get("global_step")


def stats(scores: list[float]) -> dict:
    return dict(mean=statistics.fmean(scores), median=statistics.median(scores), min=min(scores), max=max(scores),
                std=statistics.pstdev(scores))


def score_table(episodes: list[dict], summary: dict, title: str) -> str:
    lines = [title, "", "| episode | score | steps |", "| ---: | ---: | ---: |"]
    lines += [f"| {i + 1} | {e['score']:g} | {e['steps']}{' (cut)' if e['truncated'] else ''} |"
              for i, e in enumerate(episodes)]
    lines += ["", "| episodes | mean | median | min | max | std |", "| ---: | ---: | ---: | ---: | ---: | ---: |",
              f"| {len(episodes)} | {summary['mean']:.2f} | {summary['median']:.2f} | {summary['min']:g} | "
              f"{summary['max']:g} | {summary['std']:.2f} |"]
    return "\n".join(lines)


def play(options: dict, overrides: list[str]) -> dict:
    import torch

    from ga3c.env import make_env
    from ga3c.video import VideoWriter, play_episode, video_fps, wandb_video

    ckpt, run_dir = locate(str(options["ckpt_path"]))
    cfg = compose_run_config(saved_overrides(run_dir) + overrides)
    model, global_step = load_model(cfg, ckpt)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    mode = "greedy" if options["greedy"] else "sampled"
    output_dir = Path(options["output_dir"] or ((run_dir or Path("play-outputs") / ckpt.stem) / f"play-{mode}"))
    output_dir.mkdir(parents=True, exist_ok=True)
    from omegaconf import OmegaConf

    game = OmegaConf.to_container(cfg.game, resolve=True)
    rng = np.random.default_rng(options["seed"])
    episodes, best, started = [], None, time.monotonic()
    scratch = output_dir / ".episodes"
    for i in range(options["episodes"]):
        env = make_env(game, seed=options["seed"] + i)
        writer = VideoWriter(scratch / f"episode_{i}.mp4", video_fps(env, game)) if options["video"] else None
        try:
            result = play_episode(model, env, options["greedy"], rng, seed=options["seed"] + i,
                                  max_steps=options["max_steps"], writer=writer)
        finally:
            if writer is not None:
                writer.close()
            env.close()
        episodes.append(result)
        print(f"[play] episode {i + 1}/{options['episodes']}: score {result['score']:g} ({result['steps']} steps)",
              flush=True)
        if writer is not None:
            if best is None or result["score"] > episodes[best]["score"]:
                best = i
                shutil.move(str(scratch / f"episode_{i}.mp4"), output_dir / "best_episode.mp4")
            else:
                (scratch / f"episode_{i}.mp4").unlink(missing_ok=True)
    shutil.rmtree(scratch, ignore_errors=True)
    scores = [e["score"] for e in episodes]
    summary = stats(scores)
    # Paths relative to the folder scores.json is in: results copied into the repository name no machine's paths.
    result = dict(ckpt_path=os.path.relpath(ckpt, output_dir), game=cfg.game.name, greedy=options["greedy"],
                  seed=options["seed"], global_step=global_step, episodes=episodes,
                  **{f"score_{k}": v for k, v in summary.items()}, best_episode=None if best is None else best + 1,
                  video="best_episode.mp4" if best is not None else None, seconds=time.monotonic() - started)
    (output_dir / "scores.json").write_text(json.dumps(result, indent=2))
    title = (f"{cfg.game.name}, {len(scores)} episodes, {mode} actions, checkpoint {ckpt} "
             f"(update {global_step})")
    print(score_table(episodes, summary, title))
    if result["video"]:
        print(f"[play] best episode ({result['best_episode']}, score {scores[best]:g}): {output_dir / result['video']}")
    print(f"[play] scores: {output_dir / 'scores.json'}")
    log_to_wandb(cfg, result, output_dir, mode, wandb_video)
    return result


def log_to_wandb(cfg, result: dict, output_dir: Path, mode: str, wandb_video) -> None:
    if cfg.wandb.mode == "disabled":
        return
    import wandb

    try:
        run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, group=cfg.wandb.group,
                         job_type="eval", tags=[*(str(t) for t in cfg.wandb.tags if "${" not in str(t)), "eval"],
                         name=f"play-{cfg.game.name}-{mode}", mode=cfg.wandb.mode, dir=str(output_dir),
                         config=dict(ckpt_path=result["ckpt_path"], game=result["game"], greedy=result["greedy"],
                                     episodes=len(result["episodes"]), seed=result["seed"]), reinit="finish_previous")
        table = wandb.Table(columns=["episode", "score", "steps", "truncated"],
                            data=[[i + 1, e["score"], e["steps"], e["truncated"]]
                                  for i, e in enumerate(result["episodes"])])
        payload = {"eval/episodes": table}
        if result["video"]:
            payload["eval/best_episode"] = wandb_video(str(output_dir / result["video"]), f"best episode: score "
                                                       f"{result['score_max']:g}")
        run.log(payload)
        for key in ("score_mean", "score_median", "score_min", "score_max", "score_std"):
            run.summary[f"eval/{key}"] = result[key]
        print(f"[play] W&B ({cfg.wandb.mode}): {run.dir}")
        wandb.finish()
    except Exception as error:  # noqa: BLE001 - the scores and the video are already written
        print(f"[play] W&B logging failed: {error}", file=sys.stderr)
    finally:
        wandb.teardown()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE + "\n\n" + __doc__)
        return 0
    try:
        options, overrides = parse_args(argv)
        play(options, overrides)
    except PlayError as error:
        print(f"ga3c.tools.play: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
