"""The data path between agent processes and the learner process, with no pickling per step.

Observations, actions, returns and answers live in one shared-memory block (`SharedBuffers`), indexed by
agent and rollout slot. The two queues of the paper carry only fixed-size records naming a place in it:

- the prediction queue: 8-byte `PREDICTION_REQUEST`s ("agent 3's slot 1, step 4 waits for an action");
- the training queue: 32-byte `ROLLOUT` records ("agent 3's slot 1 holds 5 transitions; episode over").

Both are OS pipes. A write of at most PIPE_BUF bytes is atomic, so many agents write records without a lock
and a reader takes every waiting record in one read: that one syscall is how a predictor forms its batch.
Answers go back as one byte on the agent's own pipe; the action itself is in shared memory.
No torch here: agent processes import this module.
"""
from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import re
import secrets
import select
import struct
import termios
import time
from multiprocessing.shared_memory import SharedMemory

import numpy as np

SEGMENT_PREFIX = "ga3c_"


def segment_name() -> str:
    """A new segment's name says which process made it (`ga3c_<pid>_<random>`), so a leak can be told from a
    live run's segment by looking in /dev/shm."""
    return f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"


def segment_maker(name: str) -> int | None:
    """The pid in a segment name of ga3c's (`segment_name`); None for any other name."""
    match = re.fullmatch(rf"{SEGMENT_PREFIX}(\d+)_[0-9a-f]+", name)
    return int(match.group(1)) if match else None


def remove_orphaned_segments(directory: str = "/dev/shm", min_age_seconds: float = 60.0) -> list[str]:
    """Unlink segments whose maker process is gone: a run killed with SIGKILL (or by the OOM killer) cannot
    unlink its own. Only ga3c's names, only dead makers, and only segments older than `min_age_seconds`, so a
    run starting beside another never touches a live one's. Returns the names removed."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:      # no /dev/shm (another OS): nothing to sweep
        return removed
    for name in names:
        maker = segment_maker(name)
        if maker is None or os.path.exists(f"/proc/{maker}"):
            continue
        path = os.path.join(directory, name)
        try:
            if time.time() - os.stat(path).st_mtime >= min_age_seconds:
                os.unlink(path)
                removed.append(name)
        except OSError:  # removed meanwhile, or not ours to remove
            continue
    return removed


PREDICTION_REQUEST = np.dtype([("agent", "<u2"), ("generation", "<u2"), ("slot", "<u2"), ("step", "<u2")])
ROLLOUT = np.dtype([
    ("agent", "<u2"), ("generation", "<u2"), ("slot", "<u2"), ("length", "<u2"),
    ("episode_length", "<i4"),   # agent steps of the episode that ended here (0 if none ended)
    ("episode_done", "<i4"),     # 1 if an episode ended with this rollout
    ("episode_score", "<f8"),    # its raw (unclipped) score
    ("_pad", "<i8"),
])
assert PREDICTION_REQUEST.itemsize == 8 and ROLLOUT.itemsize == 32

ANSWER_READY, ANSWER_STOP = b"\x00", b"\x01"


class RecordPipe:
    """A many-writer, many-reader queue of fixed-size numpy records over one OS pipe."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self.reader, self.writer = mp.Pipe(duplex=False)  # Connections: multiprocessing passes their fds to children
        os.set_blocking(self.reader.fileno(), False)      # several reader threads: a lost race must not block

    def put(self, record: np.ndarray) -> None:
        """Write one record (from an agent process). Atomic: records never interleave."""
        os.write(self.writer.fileno(), record.tobytes())

    def get_many(self, max_records: int, timeout: float) -> np.ndarray:
        """Every waiting record, up to max_records; an empty array after `timeout` seconds of nothing."""
        fd = self.reader.fileno()
        if not select.select([fd], [], [], timeout)[0]:
            return np.empty(0, self.dtype)
        try:
            data = os.read(fd, max_records * self.dtype.itemsize)
        except BlockingIOError:  # another reader thread took them
            return np.empty(0, self.dtype)
        return np.frombuffer(data, self.dtype)

    def depth(self) -> int:
        """Records waiting now."""
        buf = fcntl.ioctl(self.reader.fileno(), termios.FIONREAD, b"\0\0\0\0")
        return struct.unpack("i", buf)[0] // self.dtype.itemsize

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class SharedBuffers:
    """Per-agent rollout slots and answer cells in one shared-memory block.

    obs[a, s, t] is the observation agent a acted on at step t of its rollout slot s (t = t_max holds the
    bootstrap state). The agent writes it, a predictor reads it to act, a trainer copies it out for training.

    A recurrent net (spec["core"] > 0) adds its (h, c) state: `state[a]`, agent a's, advanced by the predictor
    that answers it; `entry_state[a]`, the state before its latest prediction; `start_state[a, s]`, the state
    slot s's rollout began with (the learner unrolls from it); `starts[a, s, t]`, 1 where step t begins an
    episode (the state is zeroed there). For a feed-forward net these fields have no elements.
    """

    def __init__(self, spec: dict, create: bool):
        self.spec = spec
        a, s, t = spec["max_agents"], spec["slots"], spec["t_max"]
        core = int(spec.get("core", 0))
        layout = [
            ("obs", (a, s, t + 1, *spec["obs_shape"]), spec["obs_dtype"]),
            ("actions", (a, s, t), np.int32),
            ("returns", (a, s, t), np.float32),     # n-step (or lambda-) returns, for learner.correction=none
            ("rewards", (a, s, t), np.float32),     # clipped rewards, for V-trace
            ("discounts", (a, s, t), np.float32),   # gamma, or 0 where the step ended the episode (or a life)
            ("behaviour_logp", (a, s, t), np.float32),  # log pi_behaviour(a_t | x_t) the action was drawn with
            ("bootstrap", (a, s), np.float32),      # V(x_n) of the state after a rollout's last step (acted)
            ("versions", (a, s, t), np.int32),      # model version each action was predicted with
            ("slot_busy", (a, s), np.uint8),         # 1 from shipping until a trainer copied the slot out
            ("answer_action", (a,), np.int32),
            ("answer_value", (a,), np.float32),
            ("answer_logp", (a,), np.float32),
            ("answer_version", (a,), np.int32),
            ("stop", (a,), np.uint8),                # the server asks agent a to finish
            ("produced_steps", (a,), np.int64),      # env steps taken (counted by the agent)
            ("shipped_steps", (a,), np.int64),       # env steps put on the training queue (by the agent)
            ("error", (a, 512), np.uint8),           # why an agent failed (UTF-8), for the server's log
            ("state", (a, 2, core), np.float32),            # a recurrent net's (h, c), per agent
            ("entry_state", (a, 2, core), np.float32),      # ... before the agent's latest prediction
            ("start_state", (a, s, 2, core), np.float32),   # ... the rollout in slot s began with
            ("starts", (a, s, t + 1) if core else (0,), np.uint8),  # 1 where the step begins an episode
        ]
        offsets, size = [], 0
        for name, shape, dtype in layout:
            size = -(-size // 64) * 64  # cache-line aligned fields
            offsets.append(size)
            size += int(np.prod(shape)) * np.dtype(dtype).itemsize
        if create:
            self.shm = SharedMemory(create=True, size=max(size, 1), name=segment_name())
            spec["name"] = self.shm.name
        else:
            self.shm = SharedMemory(name=spec["name"])
        for (name, shape, dtype), offset in zip(layout, offsets):
            setattr(self, name, np.ndarray(shape, dtype, self.shm.buf, offset))
        if create:
            self.slot_busy[:] = 0
            self.stop[:] = 0
            self.state[:] = 0
        self.recurrent = core > 0

    @classmethod
    def create(cls, max_agents: int, slots: int, t_max: int, obs_shape: tuple, obs_dtype,
               core: int = 0) -> "SharedBuffers":
        """`core`: the state size of a recurrent net (0: feed-forward)."""
        spec = dict(max_agents=max_agents, slots=slots, t_max=t_max, obs_shape=tuple(obs_shape),
                    obs_dtype=np.dtype(obs_dtype).str, core=int(core))
        return cls(spec, create=True)

    @classmethod
    def attach(cls, spec: dict) -> "SharedBuffers":
        return cls(spec, create=False)

    def close(self, unlink: bool = False) -> None:
        for name in list(vars(self)):
            if isinstance(getattr(self, name), np.ndarray):
                delattr(self, name)  # views must go before the mapping can close
        self.shm.close()
        if unlink:
            self.shm.unlink()
