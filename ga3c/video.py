"""Gameplay video: play episodes with a network, write MP4s; the training callback that logs one to W&B.

Frames come from the game itself, not from the network's input: Atari games give the ALE's RGB screen
(one frame per agent step, shown at twice its size), CartPole is drawn here with OpenCV (gymnasium's renderer needs pygame), and
other classic-control games use gymnasium's rgb_array renderer when it is available.
"""
from __future__ import annotations

import copy
import logging
import math
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytorch_lightning as pl
import torch

from ga3c.env import make_env

log = logging.getLogger(__name__)


# --- frames ----------------------------------------------------------------------------------------------
def draw_cartpole(env, width: int = 400, height: int = 300) -> np.ndarray:
    """An RGB picture of CartPole's state (cart, pole, track), like gymnasium's, without pygame."""
    unwrapped = env.unwrapped
    x, theta = float(unwrapped.state[0]), float(unwrapped.state[2])
    world_width = unwrapped.x_threshold * 2
    scale = width / world_width
    pole_len = scale * 2 * unwrapped.length
    frame = np.full((height, width, 3), 255, np.uint8)
    track_y = int(height * 0.7)
    cv2.line(frame, (0, track_y), (width, track_y), (0, 0, 0), 1)
    cart_x = int(x * scale + width / 2)
    cart_w, cart_h = 50, 30
    cv2.rectangle(frame, (cart_x - cart_w // 2, track_y - cart_h // 2), (cart_x + cart_w // 2, track_y + cart_h // 2),
                  (0, 0, 0), -1)
    tip = (int(cart_x + pole_len * math.sin(theta)), int(track_y - pole_len * math.cos(theta)))
    cv2.line(frame, (cart_x, track_y), tip, (202, 152, 101), 10)
    cv2.circle(frame, (cart_x, track_y), 5, (129, 132, 203), -1)
    return frame


def frame_of(env) -> np.ndarray:
    """The current screen of `env` (made by ga3c.env.make_env) as an RGB uint8 array."""
    unwrapped = env.unwrapped
    if hasattr(unwrapped, "ale"):  # 210x160: doubled so the video is watchable at a glance
        return np.repeat(np.repeat(unwrapped.ale.getScreenRGB(), 2, axis=0), 2, axis=1)
    if type(unwrapped).__name__ == "CartPoleEnv":
        return draw_cartpole(env)
    unwrapped.render_mode = "rgb_array"  # make_env builds envs without a renderer
    try:
        return np.asarray(unwrapped.render())
    except Exception as error:  # noqa: BLE001 - e.g. pygame missing
        raise RuntimeError(f"cannot render {env.spec.id if env.spec else unwrapped}: {error}") from None


def video_fps(env, game: dict) -> int:
    """Real-time playback: Atari runs at 60 Hz and we see one frame per agent step (frame_skip frames)."""
    if hasattr(env.unwrapped, "ale"):
        return max(1, round(60 / max(1, int(game.get("frame_skip", 4)))))
    return int(env.metadata.get("render_fps") or 30)


class VideoWriter:
    """An MP4 written frame by frame (no episode is held in memory). Odd sizes are padded to even."""

    def __init__(self, path: Path, fps: int):
        import imageio.v2 as imageio

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = imageio.get_writer(str(self.path), fps=fps, codec="libx264", quality=7, macro_block_size=1,
                                         ffmpeg_log_level="error", pixelformat="yuv420p")
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        if h % 2 or w % 2:
            frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
        self.writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self.writer.close()


# --- playing ---------------------------------------------------------------------------------------------
@torch.no_grad()
def play_episode(model: torch.nn.Module, env, greedy: bool, rng: np.random.Generator, seed: int | None = None,
                 max_steps: int | None = None, writer: VideoWriter | None = None,
                 should_stop=lambda: False) -> dict:
    """One episode with `model` choosing actions (argmax, or sampled from the policy). Returns its raw
    (unclipped) score and length; `truncated` is true when `max_steps` or `should_stop` cut it short."""
    obs, _ = env.reset(seed=seed)
    score, steps, done = 0.0, 0, False
    recurrent = hasattr(model, "initial_state")   # a recurrent net carries its state from step to step
    state, no_reset = (model.initial_state(1), torch.zeros(1, dtype=torch.bool)) if recurrent else (None, None)
    if writer is not None:
        writer.add(frame_of(env))
    while not done:
        if (max_steps and steps >= max_steps) or should_stop():
            return dict(score=score, steps=steps, truncated=True)
        observation = torch.as_tensor(np.asarray(obs)).unsqueeze(0)
        if recurrent:
            logits, _, state = model.step(observation, state, no_reset)
        else:
            logits, _ = model(observation)
        if greedy:
            action = int(torch.argmax(logits, dim=-1))
        else:
            probs = torch.softmax(logits.float(), dim=-1)[0].numpy().astype(np.float64)
            action = int(rng.choice(len(probs), p=probs / probs.sum()))
        obs, reward, terminated, truncated, _ = env.step(action)
        score += float(reward)
        steps += 1
        done = terminated or truncated
        if writer is not None:
            writer.add(frame_of(env))
    return dict(score=score, steps=steps, truncated=False)


def record_episode(model: torch.nn.Module, game: dict, path: Path, seed: int = 0, greedy: bool = False,
                   max_steps: int | None = None, should_stop=lambda: False) -> dict:
    """Play one episode into an MP4 at `path`; returns the episode's score, steps and the path."""
    env = make_env(game, seed=seed)
    try:
        writer = VideoWriter(path, video_fps(env, game))
        try:
            result = play_episode(model, env, greedy, np.random.default_rng(seed), seed=seed, max_steps=max_steps,
                                  writer=writer, should_stop=should_stop)
        finally:
            writer.close()
    finally:
        env.close()
    return dict(result, path=str(path), frames=writer.frames)


def wandb_video(path: Path | str, caption: str | None = None):
    import wandb

    return wandb.Video(str(path), caption=caption, format="mp4")


# --- during training -------------------------------------------------------------------------------------
class TrainingVideo(pl.Callback):
    """Every `every_minutes` of training, a copy of the current network plays one episode (at most
    `max_steps` agent steps) in a background thread; the MP4 goes to OUTPUT_DIR/videos/ and, when W&B is
    on, to the run as `video/gameplay` (with `video/score`) at the frame count when it was finished.
    The learner never waits for it: the copy is made between two updates and played on the CPU."""

    def __init__(self, server, game: dict, output_dir: Path, every_minutes: float, max_steps: int = 2000,
                 greedy: bool = False, seed: int = 0):
        self.server, self.game, self.output_dir = server, game, Path(output_dir)
        self.every_seconds, self.max_steps, self.greedy, self.seed = every_minutes * 60, max_steps, greedy, seed
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.pending: list[dict] = []      # finished videos waiting to be logged from the learner thread
        self.recorded: list[dict] = []
        self._next = math.inf
        self._lock = threading.Lock()
        self.logger = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.logger = trainer.logger
        self._next = time.monotonic() + self.every_seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._log_pending()
        if time.monotonic() < self._next or (self.thread is not None and self.thread.is_alive()):
            return
        self._next = time.monotonic() + self.every_seconds
        model = copy.deepcopy(pl_module.model).cpu().eval()
        frames = int(self.server.frames())
        self.thread = threading.Thread(target=self._record, args=(model, frames), name="ga3c-video", daemon=True)
        self.thread.start()

    def _record(self, model: torch.nn.Module, frames: int) -> None:
        path = self.output_dir / "videos" / f"frames_{frames:012d}.mp4"
        try:
            result = record_episode(model, self.game, path, seed=self.seed + frames, greedy=self.greedy,
                                    max_steps=self.max_steps, should_stop=self.stop.is_set)
        except Exception as error:  # noqa: BLE001 - a video must never stop training
            log.warning("training video failed: %s", error)
            return
        # Cut short by the end of training: not worth keeping. One that played its max_steps is whole as asked
        # (a policy that balances CartPole plays every video to max_steps, and the run may end meanwhile).
        if self.stop.is_set() and result["truncated"] and not (self.max_steps and result["steps"] >= self.max_steps):
            path.unlink(missing_ok=True)
            return
        with self._lock:
            self.pending.append(dict(result, trained_frames=frames))

    def _log_pending(self) -> None:
        with self._lock:
            pending, self.pending = self.pending, []
        for video in pending:
            self.recorded.append(video)
            log.info("training video at %s frames: score %.1f over %d steps -> %s", video["trained_frames"],
                     video["score"], video["steps"], video["path"])
            if not self.logger or type(self.logger).__name__ != "WandbLogger":
                continue
            try:
                caption = f"{video['trained_frames']:,} frames: score {video['score']:g}"
                # the x axis is frames, as for the Monitor's metrics (WandbLogger's trainer/global_step)
                self.logger.log_metrics({"video/gameplay": wandb_video(video["path"], caption),
                                         "video/score": video["score"], "video/steps": video["steps"]},
                                        step=max(int(self.server.frames()), video["trained_frames"]))
            except Exception as error:  # noqa: BLE001
                log.warning("could not log the training video to W&B: %s", error)

    def on_train_end(self, trainer, pl_module) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        self._log_pending()


def make_training_video(cfg, server, output_dir: Path) -> TrainingVideo | None:
    """The callback the `video` config asks for, or None when `video.every_minutes` is 0 (off)."""
    from omegaconf import OmegaConf

    video = cfg.get("video")
    if not video or not video.get("every_minutes"):
        return None
    return TrainingVideo(server, OmegaConf.to_container(cfg.game, resolve=True), output_dir,
                         float(video.every_minutes), max_steps=int(video.get("max_steps") or 0) or None,
                         greedy=bool(video.get("greedy", False)), seed=int(cfg.seed))
