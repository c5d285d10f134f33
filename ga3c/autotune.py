"""Dynamic auto-tuning of the three counts N_A (agents), N_P (predictors), N_T (trainers) while training runs.

Two parts:

* Policies (pure Python: no processes, no torch, testable against a simulated throughput landscape). A policy
  is told the objective measured over each window with the counts it asked for, and answers with a `Decision`:
  the counts to run in the next window, the setting it keeps, and why.
    - `GA3CPolicy`: the paper's dynamic adjustment, faithfully (random -1/0/+1 step of each count every
      window, kept if throughput rose over the previous window, else reverted).
    - `CompassPolicy`: a noise-aware compass (per-coordinate pattern) search: multiplicative steps for agents,
      +-1 for predictors and trainers; a move is kept only when it is better with confidence, rejected when it
      is confidently not worth it, re-measured (alternating with the kept setting) while undecided; it stops
      perturbing once no neighbour is better and re-probes when the settled throughput shifts.
* `AutoTuner`, a thin pytorch_lightning Callback: it listens to the monitor's windows, turns them into the
  objective over its own measurement windows, asks the policy, calls `server.set_counts`, logs every decision
  (run log, W&B, OUTPUT_DIR/autotune.jsonl) and keeps the policy state in checkpoints (run_state.extra).
"""
from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

log = logging.getLogger(__name__)

OBJECTIVES = ("tps", "samples_per_s", "fps")


class Counts(NamedTuple):
    agents: int
    predictors: int
    trainers: int

    def __str__(self) -> str:
        return f"{self.agents}/{self.predictors}/{self.trainers}"


@dataclass(frozen=True)
class Bounds:
    """Inclusive bounds of the three counts (lower bound 1 each, as in the paper; upper bounds are ours)."""
    max_agents: int = 64
    max_predictors: int = 8
    max_trainers: int = 8
    min_agents: int = 1
    min_predictors: int = 1
    min_trainers: int = 1

    def __post_init__(self):
        for low, high in ((self.min_agents, self.max_agents), (self.min_predictors, self.max_predictors),
                          (self.min_trainers, self.max_trainers)):
            if not 1 <= low <= high:
                raise ValueError(f"bad autotune bounds {self}")

    @property
    def low(self) -> Counts:
        return Counts(self.min_agents, self.min_predictors, self.min_trainers)

    @property
    def high(self) -> Counts:
        return Counts(self.max_agents, self.max_predictors, self.max_trainers)

    def clip(self, c) -> Counts:
        return Counts(*(min(max(int(v), lo), hi) for v, lo, hi in zip(c, self.low, self.high)))


@dataclass
class Decision:
    """What a policy did after one measurement window."""
    window: int            # index of the window just measured (0 = first)
    measured: Counts       # the counts in force during that window
    value: float           # the objective measured over it
    before: Counts         # the kept setting before this decision
    after: Counts          # the kept setting after it
    next: Counts           # the counts to run in the next window
    action: str            # start | kept | reverted | measure | settled | reprobe
    note: str = ""

    def as_dict(self) -> dict:
        d = asdict(self)
        for key in ("measured", "before", "after", "next"):
            d[key] = list(getattr(self, key))
        return d


def _counts(value) -> Counts | None:
    return None if value is None else Counts(*(int(v) for v in value))


# --- the paper's policy -------------------------------------------------------------------------------------
class GA3CPolicy:
    """The original GA3C dynamic adjustment (ThreadDynamicAdjustment.py), faithfully.

    Every window it moves each count of the kept setting by a random step in {-1, 0, +1} (redrawn if, after
    clipping to the bounds, no count moves), runs the new setting for one window and keeps it if the
    objective rose compared with the previous window (`>=`, as the original reverted only when the count of
    trainings fell), otherwise reverts to the kept setting. As in the original, the baseline of each
    comparison is simply the previous window, whichever setting ran in it (after a revert: the rejected one).
    The first window (the initial wait) only gives the first baseline.
    """

    name = "ga3c"

    def __init__(self, start, bounds: Bounds, seed: int = 0):
        self.bounds = bounds
        self.kept = bounds.clip(start)
        self.current = self.kept
        self.last_value: float | None = None
        self.window = 0
        self.rng = random.Random(seed)

    @property
    def incumbent(self) -> Counts:
        return self.kept

    def _random_step(self, base: Counts) -> Counts:
        if self.bounds.low == self.bounds.high:
            return base
        while True:
            step = [self.rng.randint(-1, 1) for _ in range(3)]
            proposal = self.bounds.clip(tuple(b + s for b, s in zip(base, step)))
            if proposal != base:
                return proposal

    def update(self, value: float, var: float | None = None, dof: int = 0) -> Decision:
        """`var`, `dof`: ignored (the original compared two single windows)."""
        measured, before = self.current, self.kept
        if self.last_value is None:
            action, note = "start", "first window: baseline"
        elif value >= self.last_value:
            self.kept, action, note = measured, "kept", f"rose from {self.last_value:.4g}"
        else:
            action, note = "reverted", f"fell from {self.last_value:.4g}"
        self.last_value = value
        self.current = self._random_step(self.kept)
        decision = Decision(self.window, measured, value, before, self.kept, self.current, action, note)
        self.window += 1
        return decision

    def state_dict(self) -> dict:
        state = self.rng.getstate()
        return dict(policy=self.name, kept=list(self.kept), current=list(self.current), last_value=self.last_value,
                    window=self.window, rng=[state[0], list(state[1]), state[2]])

    def load_state_dict(self, state: dict) -> None:
        self.kept, self.current = self.bounds.clip(state["kept"]), self.bounds.clip(state["current"])
        self.last_value, self.window = state["last_value"], int(state["window"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


# --- our policy ---------------------------------------------------------------------------------------------
@dataclass
class CompassParams:
    z: float = 1.0                 # keep a move when its gain exceeds z standard errors (one-sided ~84 %)
    z_reject: float = 1.0          # reject it when its gain + z_reject s.e. stays below min_gain
    min_gain: float = 0.02         # a move must gain at least this (relative) to be worth keeping
    noise_prior: float = 0.05      # prior relative noise of one window's measurement ...
    prior_weight: float = 4.0      # ... worth this many degrees of freedom against the pooled estimate
    outlier_clip: float = 0.15     # a deviation (log) counts at most this much in the noise estimate: one window
                                   # measured while agents start (live: 705 against ~1,400) must not inflate the
                                   # noise, and so stall every decision, for the whole memory
    transient_sd: float = 0.3      # a window whose monitor windows spread more than this (s.d. of their mean
                                   # log; live: < 0.14 normally, 0.75-1.2 while agents start) is a transient: it
                                   # is not counted and the setting is measured once more
    max_repeats: int = 3           # windows a candidate is measured at most; then the point estimate decides
                                   # (still undecided by then: the two are close, so either choice costs little)
    memory: int = 12               # measurements older than this many windows are forgotten (drift)
    agent_ratios: tuple = (2.0, 1.41)   # multiplicative steps of every count, coarse to fine (each at least +-1)
    shift_threshold: float = 0.12  # settled: re-probe when the recent mean moves this much (relative) ...
    shift_windows: int = 3         # ... over this many windows ...
    shift_z: float = 3.0           # ... and this many standard errors (tested every window: few false alarms)
    reprobe_every: int = 30        # settled: also re-probe after this many windows (0 = only on a shift), ...
    reprobe_backoff: float = 2.0   # ... times this after each re-probe that confirmed the setting

    @classmethod
    def from_dict(cls, d: dict) -> "CompassParams":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if "agent_ratios" in known:
            known["agent_ratios"] = tuple(float(r) for r in known["agent_ratios"])
        return cls(**known)


@dataclass
class _Stats:
    n: int
    mean: float   # of log(value)


class CompassPolicy:
    """Noise-aware compass search over (N_A, N_P, N_T).

    * Search. From the kept setting (the incumbent) it polls neighbours one at a time: each count times or
      divided by a ratio (agents 2, then 1.41; predictors and trainers 2, then +-1; each at least +-1). After
      a kept move it first tries another step the same way (pattern move). The first neighbour that is
      better with confidence becomes the incumbent; when none is, the ratio shrinks (only the new moves are
      tried); when none is at the finest ratio, the search has converged.
    * Noise. Every comparison is of log-throughput means over the recent windows (`memory`) of the two
      settings, with a standard error from a pooled estimate of the relative noise of one window (repeated
      windows of a setting, the spread of the monitor windows inside each window, and `noise_prior`; each
      deviation clipped at `outlier_clip`, so one transient window cannot stall later decisions). A move
      is kept when its gain exceeds both `min_gain` and `z` standard errors; rejected when even its optimistic
      gain (`+ z_reject` s.e.) stays below `min_gain`; otherwise the candidate and the incumbent are measured
      again alternately (so slow drift cancels), at most `max_repeats` windows for the candidate, then the
      point estimate decides. Neighbours that recent windows already show to be worse are not measured again.
    * Settle. Once converged it stops perturbing and only measures the incumbent. When the mean of the last
      `shift_windows` windows moves from the earlier ones by more than `shift_threshold` and `shift_z`
      standard errors (the game changed phase, the machine got busier), it forgets the old measurements and
      searches again from the incumbent with the finer agent step. It also re-probes after `reprobe_every`
      settled windows, waiting `reprobe_backoff` times longer each time the re-probe confirmed the setting.
    """

    name = "compass"

    def __init__(self, start, bounds: Bounds, seed: int = 0, params: CompassParams | None = None):
        self.bounds, self.p = bounds, params or CompassParams()
        self.seed = seed   # the search is deterministic; kept for the adapter's symmetry
        self.incumbent: Counts = bounds.clip(start)
        self.current: Counts = self.incumbent
        self.candidate: Counts | None = None
        self.window = 0
        self.level = 0                       # index into agent_ratios
        self.poll: list[Counts] = []         # neighbours still to try at this incumbent and level
        self.rejected: set[Counts] = set()   # neighbours of this incumbent rejected already
        self.direction: tuple[int, int] | None = None   # (coordinate, sign) of the last kept move
        self.samples: dict[Counts, list[tuple[int, float]]] = {}   # setting -> [(window, value)]
        self.window_noise: list[tuple[int, float, int]] = []        # (window, variance of its log value, dof)
        self.peak = 0.0                      # the highest value measured
        self.phase = "search"                # search | settled
        self.baseline: float | None = None   # log level of the incumbent when it settled
        self.baseline_n = 0
        self.settled_at = 0
        self.reprobe_interval = self.p.reprobe_every
        self.reprobe_origin: Counts | None = None   # the setting a scheduled re-probe started from
        self.remeasuring = False             # the last window was a transient, not counted
        self._new_poll()

    # --- statistics ---
    def _log(self, value: float) -> float:
        return math.log(max(value, 0.01 * self.peak, 1e-9))

    def _recent(self, c: Counts) -> list[float]:
        """Log values of c's windows still remembered."""
        oldest = self.window - self.p.memory
        return [self._log(v) for w, v in self.samples.get(c, []) if w > oldest]

    def stats(self, c: Counts) -> _Stats:
        values = self._recent(c)
        return _Stats(len(values), sum(values) / len(values) if values else math.nan)

    def noise(self) -> float:
        """Relative noise (std of log-throughput) of one window, pooled over settings, with a prior."""
        clip = self.p.outlier_clip ** 2
        ss, dof = self.p.prior_weight * self.p.noise_prior ** 2, self.p.prior_weight
        for _, var, n in self.window_noise:   # within-window spreads, as measured by the adapter
            ss += min(var, clip) * n
            dof += n
        for c in self.samples:
            values = self._recent(c)
            if len(values) >= 2:
                mean = sum(values) / len(values)
                ss += sum(min((v - mean) ** 2, clip) for v in values)
                dof += len(values) - 1
        return math.sqrt(ss / dof)

    def compare(self, c: Counts) -> tuple[str, float, float]:
        """('better' | 'worse' | 'unsure', gain, s.e.) of candidate c against the incumbent."""
        sc, si = self.stats(c), self.stats(self.incumbent)
        if sc.n == 0 or si.n == 0:
            return "unsure", math.nan, math.nan
        gain = sc.mean - si.mean
        se = self.noise() * math.sqrt(1 / sc.n + 1 / si.n)
        if gain > self.p.min_gain and gain > self.p.z * se:
            return "better", gain, se
        if gain + self.p.z_reject * se < self.p.min_gain:
            return "worse", gain, se
        if sc.n >= self.p.max_repeats:
            return ("better" if gain > self.p.min_gain else "worse"), gain, se
        return "unsure", gain, se

    # --- the search ---
    def _neighbours(self) -> list[tuple[tuple[int, int], Counts]]:
        ratio = self.p.agent_ratios[self.level]
        # Predictors and trainers move by the coarse ratio too, then by +-1: from 4 predictors, 2 is one step,
        # not two +-1 steps of a few per cent each that noise hides (seen live on Pong from 64/4/4).
        moves = []
        for i, n in enumerate(self.incumbent):
            r = ratio if i == 0 or self.level == 0 else 1.0
            up, down = list(self.incumbent), list(self.incumbent)
            up[i], down[i] = max(n + 1, round(n * r)), min(n - 1, round(n / r))
            moves += [((i, +1), Counts(*up)), ((i, -1), Counts(*down))]
        # every neighbour polled at this incumbent was rejected (or kept: then the incumbent changed), so at a
        # finer ratio only the new moves are tried
        if self.direction is not None:   # pattern: first try the way that just worked
            moves.sort(key=lambda m: m[0] != self.direction)
        out = []
        for _, c in moves:
            if self.bounds.clip(c) == c and c != self.incumbent and c not in self.rejected and c not in out:
                out.append(c)
        return out

    def _new_poll(self) -> None:
        self.poll = self._neighbours()

    def _next_to_measure(self) -> tuple[Counts, str]:
        """Pick what the next window measures during the search."""
        if self.stats(self.incumbent).n == 0:
            return self.incumbent, "measure the kept setting"
        while True:
            while self.poll:
                c = self.poll.pop(0)
                verdict, gain, se = self.compare(c)
                if verdict == "worse":   # recent windows already say so: no need to spend one
                    self.rejected.add(c)
                    continue
                self.candidate = c
                return c, "try"
            if self.level + 1 < len(self.p.agent_ratios):
                self.level += 1
                self._new_poll()
                continue
            return self._settle(), "converged"

    def _settle(self) -> Counts:
        self.phase, self.candidate = "settled", None
        values = self._recent(self.incumbent)
        self.baseline, self.baseline_n = sum(values) / len(values), len(values)
        self.settled_at = self.window
        if self.reprobe_origin is not None and self.reprobe_origin == self.incumbent:
            self.reprobe_interval = int(self.reprobe_interval * self.p.reprobe_backoff)   # confirmed: wait longer
        else:
            self.reprobe_interval = self.p.reprobe_every
        self.reprobe_origin = None
        return self.incumbent

    def _move(self, c: Counts) -> None:
        old = self.incumbent
        diff = [n - o for n, o in zip(c, old)]
        coordinate = next(i for i, d in enumerate(diff) if d)
        self.direction = (coordinate, 1 if diff[coordinate] > 0 else -1)
        self.incumbent, self.candidate = c, None
        self.rejected = {old}
        self._new_poll()

    def _reprobe(self, why: str, shifted: bool) -> str:
        self.reprobe_origin = None
        if shifted:   # the landscape moved (when exactly, within the last windows, is unknown): forget the past
            self.samples = {self.incumbent: self.samples.get(self.incumbent, [])[-1:]}
            self.window_noise = [n for n in self.window_noise if n[0] >= self.window]
        self.phase, self.baseline, self.direction = "search", None, None
        self.level = 0
        self.rejected = set()
        self._new_poll()
        return why

    def update(self, value: float, var: float | None = None, dof: int = 0) -> Decision:
        """Take the objective measured over the last window (with the counts `self.current`); `var` (with `dof`
        degrees of freedom), if known, estimates the variance of its log from within the window (e.g. the
        spread of its sub-windows): it joins the pooled noise estimate."""
        measured, before = self.current, self.incumbent
        if var is not None and dof > 0 and math.isfinite(var) and var > self.p.transient_sd ** 2 \
                and not self.remeasuring:
            self.remeasuring = True   # once: a setting that is erratic every time is judged on its values
            decision = Decision(self.window, measured, value, before, self.incumbent, self.current, "measure",
                                f"transient window (spread {math.sqrt(var):.0%}): not counted, measured again")
            self.window += 1
            return decision
        self.remeasuring = False
        # a stalled window (0/s) is very bad, not infinitely bad: floor it at 1 % of the best seen so far, so one
        # such window cannot blow up the noise estimate
        self.peak = max(self.peak, value)
        self.samples.setdefault(measured, []).append((self.window, float(value)))
        if var is not None and dof > 0 and math.isfinite(var):
            self.window_noise.append((self.window, float(var), int(dof)))
        oldest = self.window - self.p.memory   # forget what can no longer be used
        self.samples = {c: [s for s in v if s[0] > oldest] for c, v in self.samples.items()}
        self.samples = {c: v for c, v in self.samples.items() if v}
        self.window_noise = [n for n in self.window_noise if n[0] > oldest]
        action, note = "measure", ""
        if self.phase == "settled":
            action, note = "settled", ""
            # the last shift_windows windows against the earlier ones still remembered: a sudden shift shows,
            # a slow drift moves both and does not
            k = self.p.shift_windows
            recent = [self._log(v) for w, v in self.samples.get(self.incumbent, []) if w > self.window - k]
            earlier = [self._log(v) for w, v in self.samples.get(self.incumbent, [])
                       if self.window - self.p.memory < w <= self.window - k]
            if len(recent) >= k and len(earlier) >= 2:
                self.baseline, self.baseline_n = sum(earlier) / len(earlier), len(earlier)
                shift = sum(recent) / len(recent) - self.baseline
                se = self.noise() * math.sqrt(1 / len(recent) + 1 / len(earlier))
                if abs(shift) > self.p.shift_threshold and abs(shift) > self.p.shift_z * se:
                    action, note = "reprobe", self._reprobe(f"throughput shifted {math.expm1(shift):+.1%}", True)
            if action == "settled" and self.p.reprobe_every and self.window - self.settled_at >= self.reprobe_interval:
                action, note = "reprobe", self._reprobe(f"scheduled re-probe after {self.reprobe_interval} windows "
                                                        "settled", False)
                self.reprobe_origin = self.incumbent
        if self.phase == "search":
            if self.candidate is not None:
                verdict, gain, se = self.compare(self.candidate)
                detail = f"gain {math.expm1(gain):+.1%} +- {se:.1%}" if not math.isnan(gain) else ""
                if verdict == "better":
                    action, note = "kept", f"{self.candidate} better than {self.incumbent}: {detail}"
                    self._move(self.candidate)
                elif verdict == "worse":
                    action, note = "reverted", f"{self.candidate} not better than {self.incumbent}: {detail}"
                    self.rejected.add(self.candidate)
                    self.candidate = None
                else:
                    # undecided: measure whichever of the two has waited longer, so drift cancels out
                    last = lambda c: max((w for w, _ in self.samples.get(c, [])), default=-1)  # noqa: E731
                    self.current = self.incumbent if last(self.incumbent) < last(self.candidate) else self.candidate
                    note = f"undecided ({detail}): measure {self.current} again"
                    decision = Decision(self.window, measured, value, before, self.incumbent, self.current,
                                        "measure", note)
                    self.window += 1
                    return decision
            nxt, why = self._next_to_measure()
            if why == "converged":
                action = "settled" if action == "measure" else action
                note = (note + "; " if note else "") + f"converged at {self.incumbent}"
            self.current = nxt
        else:
            self.current = self.incumbent
        decision = Decision(self.window, measured, value, before, self.incumbent, self.current, action, note)
        self.window += 1
        return decision

    @property
    def converged(self) -> bool:
        return self.phase == "settled"

    def state_dict(self) -> dict:
        return dict(policy=self.name, incumbent=list(self.incumbent), current=list(self.current),
                    candidate=None if self.candidate is None else list(self.candidate), window=self.window,
                    level=self.level, poll=[list(c) for c in self.poll], rejected=[list(c) for c in self.rejected],
                    direction=None if self.direction is None else list(self.direction),
                    samples=[[list(c), [list(s) for s in v]] for c, v in self.samples.items()],
                    window_noise=[list(n) for n in self.window_noise], peak=self.peak,
                    phase=self.phase, baseline=self.baseline, baseline_n=self.baseline_n,
                    settled_at=self.settled_at, reprobe_interval=self.reprobe_interval,
                    reprobe_origin=None if self.reprobe_origin is None else list(self.reprobe_origin),
                    remeasuring=self.remeasuring)

    def load_state_dict(self, state: dict) -> None:
        self.incumbent, self.current = _counts(state["incumbent"]), _counts(state["current"])
        self.candidate = _counts(state["candidate"])
        self.window, self.level = int(state["window"]), int(state["level"])
        self.poll = [_counts(c) for c in state["poll"]]
        self.rejected = {_counts(c) for c in state["rejected"]}
        self.direction = None if state["direction"] is None else tuple(state["direction"])
        self.samples = {_counts(c): [(int(w), float(v)) for w, v in s] for c, s in state["samples"]}
        self.window_noise = [(int(w), float(v), int(n)) for w, v, n in state.get("window_noise", [])]
        self.peak = float(state.get("peak", 0.0))
        self.phase, self.baseline = state["phase"], state["baseline"]
        self.baseline_n, self.settled_at = int(state["baseline_n"]), int(state["settled_at"])
        self.reprobe_interval = int(state["reprobe_interval"])
        self.reprobe_origin = _counts(state["reprobe_origin"])
        self.remeasuring = bool(state.get("remeasuring", False))


POLICIES = {"ga3c": GA3CPolicy, "compass": CompassPolicy}


def make_policy(name: str, start, bounds: Bounds, seed: int = 0, params: dict | None = None):
    if name == "ga3c":
        return GA3CPolicy(start, bounds, seed)
    if name == "compass":
        return CompassPolicy(start, bounds, seed, CompassParams.from_dict(params or {}))
    raise ValueError(f"unknown autotune policy {name!r}; known: {', '.join(POLICIES)} (or 'off')")


def objective_value(objective: str, rates: dict, lag: float, lag_penalty: float) -> float:
    """The number a policy maximises: one of OBJECTIVES, divided by (1 + lag_penalty * policy lag)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"autotune.objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    value = float(rates[objective])
    if lag_penalty and not math.isnan(lag):
        value /= 1.0 + lag_penalty * max(lag, 0.0)
    return value


# --- the Lightning adapter ----------------------------------------------------------------------------------
try:
    import pytorch_lightning as _pl
    _Callback = _pl.Callback
except ImportError:  # pragma: no cover - the policies stay usable without Lightning
    _Callback = object


@dataclass
class _Mark:
    wall: float
    frames: int
    trained: int
    updates: int
    lags: list = field(default_factory=list)
    subs: list = field(default_factory=list)   # log objective of each monitor window in it


class AutoTuner(_Callback):
    """Runs a policy on the live server. Measurement windows are made of the monitor's windows
    (log.every_seconds each): after `wait_seconds`, each lasts at least `period_seconds`; after a change of
    counts that adds agents the first `settle_seconds` are not measured (agent processes start, queues refill)."""

    def __init__(self, policy, server, monitor, run_state, objective: str = "tps", lag_penalty: float = 0.0,
                 wait_seconds: float = 10.0, period_seconds: float = 20.0, settle_seconds: float = 0.0,
                 output_dir=None):
        import threading
        from pathlib import Path

        if objective not in OBJECTIVES:
            raise ValueError(f"autotune.objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        self.policy, self.server, self.monitor, self.run_state = policy, server, monitor, run_state
        self.objective, self.lag_penalty = objective, float(lag_penalty)
        self.wait, self.period, self.settle = float(wait_seconds), float(period_seconds), float(settle_seconds)
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.decisions: list[Decision] = []
        self._lock = threading.Lock()
        self._mark: _Mark | None = None
        self._measure_from = math.inf
        self._tolerance = 0.25 * float(getattr(monitor, "every_seconds", 1.0))

    # --- Lightning hooks ---
    def on_fit_start(self, trainer, pl_module) -> None:
        state = self.run_state.extra.get("autotune")
        if state and state.get("policy") == self.policy.name:
            self.policy.load_state_dict(state)
            log.info("autotune (%s): resumed at window %d, counts %s", self.policy.name, self.policy.window,
                     self.policy.current)
            self._apply(self.policy.current)
        self._measure_from = self.monitor.wall_seconds() + self.wait
        self._save_state()
        self.monitor.listeners.append(self.on_window)
        log.info("autotune (%s): objective %s, first window after %.0f s, windows of %.0f s (settle %.0f s), "
                 "bounds %s..%s", self.policy.name, self.objective, self.wait, self.period, self.settle,
                 self.policy.bounds.low, self.policy.bounds.high)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._detach()

    def teardown(self, trainer, pl_module, stage) -> None:
        self._detach()

    def _detach(self) -> None:
        if self.on_window in self.monitor.listeners:
            self.monitor.listeners.remove(self.on_window)

    # --- measuring ---
    @staticmethod
    def _mark_of(m: dict) -> _Mark:
        return _Mark(float(m["wall_seconds"]), int(m["frames"]), int(m["trained_steps"]), int(m["updates"]))

    def on_window(self, m: dict) -> None:
        """A monitor window ended (called from the learner or the watchdog thread)."""
        with self._lock:
            if self.server.stopping.is_set():
                return
            now = float(m["wall_seconds"])
            if self._mark is None:
                # start after the wait (or settle time), once the run is producing: with many agents starting
                # on a busy machine the first windows may train nothing at all
                producing = isinstance(m.get(self.objective), (int, float)) and m[self.objective] > 0
                if now + 1e-9 >= self._measure_from - self._tolerance and producing:
                    self._mark = self._mark_of(m)
                return
            lag = m.get("policy_lag_mean", math.nan)
            if isinstance(lag, (int, float)) and not math.isnan(lag):
                self._mark.lags.append(float(lag))
            sub = m.get(self.objective, math.nan)
            if isinstance(sub, (int, float)) and sub > 0:
                self._mark.subs.append(math.log(objective_value(self.objective, m, lag, self.lag_penalty)))
            dt = now - self._mark.wall
            if dt < self.period - self._tolerance:
                return
            rates = dict(fps=(m["frames"] - self._mark.frames) / dt,
                         samples_per_s=(m["trained_steps"] - self._mark.trained) / dt,
                         tps=(m["updates"] - self._mark.updates) / dt)
            lag = sum(self._mark.lags) / len(self._mark.lags) if self._mark.lags else math.nan
            value = objective_value(self.objective, rates, lag, self.lag_penalty)
            subs, var, dof = self._mark.subs, None, 0
            if len(subs) >= 2:   # the spread of its monitor windows: variance of the mean of their logs
                mean = sum(subs) / len(subs)
                var, dof = sum((x - mean) ** 2 for x in subs) / (len(subs) - 1) / len(subs), len(subs) - 1
            decision = self.policy.update(value, var, dof)
            self.decisions.append(decision)
            changed = self._apply(decision.next)
            self._record(decision, rates, lag, dt, m)
            # only new agents need time (processes and envs start, their first rollouts fill); threads start
            # at once and removed agents are gone at once, so those windows start now
            if changed and self.settle > 0 and decision.next.agents > decision.measured.agents:
                self._mark, self._measure_from = None, now + self.settle
            else:
                self._mark = self._mark_of(m)

    def current_counts(self) -> Counts:
        return Counts(self.server.num_agents, len(self.server.predictors), len(self.server.trainers))

    def _apply(self, counts: Counts) -> bool:
        if counts == self.current_counts():
            return False
        try:
            self.server.set_counts(*counts)
        except Exception as error:  # noqa: BLE001 - tuning must never end the run
            log.error("autotune: set_counts%s failed: %r", tuple(counts), error)
            return False
        return True

    def _record(self, d: Decision, rates: dict, lag: float, dt: float, m: dict) -> None:
        log.info("autotune window %d: NA/NP/NT %s ran %.1f s: %s %.4g (tps %.1f, samples/s %.0f, fps %.0f, lag %.1f) "
                 "-> %s; kept %s -> %s; next %s%s", d.window, d.measured, dt, self.objective, d.value, rates["tps"],
                 rates["samples_per_s"], rates["fps"], lag, d.action, d.before, d.after, d.next,
                 f" ({d.note})" if d.note else "")
        row = dict(d.as_dict(), wall_seconds=float(m["wall_seconds"]), frames=int(m["frames"]), seconds=dt,
                   objective=self.objective, policy=self.policy.name, lag=lag, **rates,
                   produced_steps=m.get("produced_steps"), trained_steps=m.get("trained_steps"),
                   discarded_steps=m.get("discarded_steps"), in_flight_steps=m.get("in_flight_steps"))
        if self.output_dir is not None:
            try:
                with open(self.output_dir / "autotune.jsonl", "a") as f:
                    f.write(json.dumps(row, default=float) + "\n")
            except OSError as error:
                log.warning("autotune: cannot write autotune.jsonl: %s", error)
        logger = self.monitor.logger
        if logger:
            metrics = {"autotune/value": d.value, "autotune/window": d.window,
                       "autotune/kept": float(d.action == "kept"), "autotune/reverted": float(d.action == "reverted"),
                       "autotune/changed": float(d.next != d.measured),
                       "autotune/settled": float(d.action == "settled"),
                       **{f"autotune/measured_{k}": v for k, v in d.measured._asdict().items()},
                       **{f"autotune/kept_{k}": v for k, v in d.after._asdict().items()},
                       **{f"autotune/next_{k}": v for k, v in d.next._asdict().items()},
                       **{f"autotune/{k}": v for k, v in rates.items()}}
            if not math.isnan(lag):
                metrics["autotune/lag"] = lag
            try:
                logger.log_metrics(metrics, step=int(m["frames"]))   # same step as this window's metrics
            except Exception as error:  # noqa: BLE001
                log.warning("autotune: W&B logging failed: %s", error)
        self._save_state()

    def _save_state(self) -> None:
        self.run_state.extra["autotune"] = self.policy.state_dict()


def make_autotuner(cfg, server, monitor, run_state) -> AutoTuner:
    """The hook run.py calls when cfg.autotune.name != 'off'."""
    at = cfg.autotune
    bounds = Bounds(max_agents=max(int(cfg.agents), int(at.max_agents)),
                    max_predictors=max(int(cfg.predictors), int(at.max_predictors)),
                    max_trainers=max(int(cfg.trainers), int(at.max_trainers)))
    bounds = Bounds(max_agents=min(bounds.max_agents, server.max_agents), max_predictors=bounds.max_predictors,
                    max_trainers=bounds.max_trainers)
    seed = int(at.get("seed") if at.get("seed") is not None else cfg.seed)
    params = {k: v for k, v in at.get("params", {}).items()} if at.get("params") is not None else {}
    policy = make_policy(str(at.name), Counts(int(cfg.agents), int(cfg.predictors), int(cfg.trainers)), bounds,
                         seed, params)
    return AutoTuner(policy, server, monitor, run_state, objective=str(at.objective),
                     lag_penalty=float(at.get("lag_penalty", 0.0) or 0.0), wait_seconds=float(at.wait_seconds),
                     period_seconds=float(at.period_seconds), settle_seconds=float(at.get("settle_seconds", 0.0)),
                     output_dir=cfg.output_dir)
