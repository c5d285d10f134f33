"""Unit tests of the pieces: returns, loss, optimizer, agent bootstrapping, predictor batching, trainer batching."""
from __future__ import annotations

import queue
import threading
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from ga3c.agent import discounted_returns, run_agent
from ga3c.learner import AUTOCAST_DTYPES, Learner, RMSpropTF, a3c_loss, resolve_precision
from ga3c.monitor import Counters, Monitor, ScoreWindow
from ga3c.networks import ConvActorCritic, MLPActorCritic
from ga3c.predictor import Predictor
from ga3c.shared_memory import ANSWER_READY, ANSWER_STOP, PREDICTION_REQUEST, ROLLOUT, RecordPipe, SharedBuffers
from ga3c.trainer import ExperienceDataset, TrainerThread


# --- n-step returns ------------------------------------------------------------------------------------
def test_returns_terminal_bootstraps_zero():
    returns = discounted_returns(np.array([1.0, 0.0, 2.0], np.float32), bootstrap=0.0, gamma=0.5)
    # R2 = 2, R1 = 0 + 0.5 * 2 = 1, R0 = 1 + 0.5 * 1 = 1.5
    np.testing.assert_allclose(returns, [1.5, 1.0, 2.0])


def test_returns_truncated_bootstraps_value():
    returns = discounted_returns(np.array([1.0, 1.0], np.float32), bootstrap=4.0, gamma=0.5)
    # R1 = 1 + 0.5 * 4 = 3, R0 = 1 + 0.5 * 3 = 2.5
    np.testing.assert_allclose(returns, [2.5, 3.0])


class Chain(gym.Env):
    """Deterministic test env: reward 1 per step; terminates after `terminate_at` steps or truncates after
    `truncate_at`. Observations count the steps."""

    def __init__(self, terminate_at: int = 1000, truncate_at: int = 1000):
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at, self.truncate_at, self.t = terminate_at, truncate_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, action], np.float32)
        return obs, 1.0, self.t >= self.terminate_at, self.t >= self.truncate_at, {}


gym.register("tests/Chain-v0", entry_point=Chain)


def play_agent(game: dict, t_max: int, rollouts: int, value: float = 10.0, gamma: float = 0.5):
    """Run the real agent loop in a thread, acting as its predictor (action 0, V = value); return the rollouts."""
    buffers = SharedBuffers.create(1, 2, t_max, (2,), np.float32)
    predictions, training = RecordPipe(PREDICTION_REQUEST), RecordPipe(ROLLOUT)
    import multiprocessing as mp
    import os

    answer_reader, answer_writer = mp.Pipe(duplex=False)
    thread = threading.Thread(target=run_agent, args=(0, 0, buffers.spec, game, 0, t_max, gamma, 0.0,
                                                      predictions.writer, training.writer, answer_reader))
    thread.start()
    got = []
    try:
        while len(got) < rollouts:
            for request in predictions.get_many(16, timeout=0.01):
                buffers.answer_action[0], buffers.answer_value[0], buffers.answer_version[0] = 0, value, 3
                os.write(answer_writer.fileno(), ANSWER_READY)
            for record in training.get_many(16, timeout=0.01):
                s, n = int(record["slot"]), int(record["length"])
                got.append(dict(length=n, returns=buffers.returns[0, s, :n].copy(),
                                obs=buffers.obs[0, s, :n, 0].copy(), done=bool(record["episode_done"]),
                                score=float(record["episode_score"]), versions=buffers.versions[0, s, :n].copy()))
                buffers.slot_busy[0, s] = 0
    finally:
        buffers.stop[0] = 1
        os.write(answer_writer.fileno(), ANSWER_STOP)
        thread.join(5)
    assert not thread.is_alive()
    return got, buffers


def test_agent_full_rollout_bootstraps_with_value_and_trains_last_transition():
    got, _ = play_agent({"id": "tests/Chain-v0", "max_episode_frames": None}, t_max=3, rollouts=2)
    first, second = got
    assert first["length"] == 3 and not first["done"]
    # rewards 1,1,1 then bootstrap V=10: R2 = 1 + 5 = 6, R1 = 4, R0 = 3
    np.testing.assert_allclose(first["returns"], [3.0, 4.0, 6.0])
    np.testing.assert_array_equal(first["obs"], [0, 1, 2])
    np.testing.assert_array_equal(second["obs"], [3, 4, 5])  # the bootstrap state starts the next rollout
    assert (first["versions"] == 3).all()


def test_agent_terminal_bootstraps_zero():
    gym.register("tests/ChainTerm-v0", entry_point=Chain, kwargs=dict(terminate_at=2))
    got, _ = play_agent({"id": "tests/ChainTerm-v0"}, t_max=5, rollouts=2)
    assert got[0]["length"] == 2 and got[0]["done"] and got[0]["score"] == 2.0
    np.testing.assert_allclose(got[0]["returns"], [1.5, 1.0])  # last transition kept, V(terminal) = 0


def test_agent_truncation_bootstraps_value():
    gym.register("tests/ChainTrunc-v0", entry_point=Chain, kwargs=dict(truncate_at=2))
    got, _ = play_agent({"id": "tests/ChainTrunc-v0"}, t_max=5, rollouts=1)
    assert got[0]["length"] == 2 and got[0]["done"]
    np.testing.assert_allclose(got[0]["returns"], [1 + 0.5 * 6, 1 + 0.5 * 10])  # bootstrap V(s_T) = 10


# --- loss and optimizer --------------------------------------------------------------------------------
def test_a3c_loss_matches_hand_computation():
    logits = torch.tensor([[0.0, 0.0], [np.log(3.0), 0.0]])   # pi = [.5,.5] and [.75,.25]
    values = torch.tensor([1.0, 2.0])
    actions = torch.tensor([0, 1])
    returns = torch.tensor([3.0, 0.5])
    eps, beta = 1e-6, 0.01
    out = a3c_loss(logits, values, actions, returns, beta=beta, log_epsilon=eps, value_coef=0.5, reduction="sum")
    adv = np.array([2.0, -1.5])
    logp = np.log(np.array([0.5, 0.25]) + eps)
    policy = -(logp * adv).sum()
    p = np.array([[0.5, 0.5], [0.75, 0.25]])
    entropy = -(p * np.log(p + eps)).sum()
    value = ((np.array([3.0, 0.5]) - np.array([1.0, 2.0])) ** 2).sum()
    assert out["policy_loss"].item() == pytest.approx(policy, rel=1e-5)
    assert out["entropy"].item() == pytest.approx(entropy, rel=1e-5)
    assert out["value_loss"].item() == pytest.approx(value, rel=1e-5)
    assert out["loss"].item() == pytest.approx(policy - beta * entropy + 0.5 * value, rel=1e-5)
    mean = a3c_loss(logits, values, actions, returns, beta=beta, log_epsilon=eps, value_coef=0.5, reduction="mean")
    assert mean["loss"].item() == pytest.approx(out["loss"].item() / 2, rel=1e-5)


def test_ppo_clip_stops_the_gradient_of_samples_outside_the_band():
    """learner.ppo_clip: -min(r A, clip(r) A) with r = pi / mu. Sample 0 (A > 0, r = 1.5 > 1.2) is clipped:
    no gradient; sample 1 (A < 0, r = 1) gets the plain policy gradient."""
    logits = torch.tensor([[0.0, 0.0], [np.log(3.0), 0.0]], requires_grad=True)   # pi = [.5,.5], [.75,.25]
    actions, returns, values = torch.tensor([0, 1]), torch.tensor([3.0, 0.5]), torch.tensor([1.0, 2.0])
    behaviour_logp = torch.log(torch.tensor([0.5 / 1.5, 0.25]))
    out = a3c_loss(logits, values, actions, returns, 0.0, 1e-6, 0.0, "sum", behaviour_logp=behaviour_logp,
                   ppo_clip=0.2)
    assert out["policy_loss"].item() == pytest.approx(-(1.2 * 2.0 + 1.0 * -1.5), rel=1e-5)
    assert out["ppo_clipped_share"].item() == 0.5
    out["loss"].backward()
    assert logits.grad[0].abs().sum() == 0
    plain = torch.tensor([[np.log(3.0), 0.0]], requires_grad=True)
    a3c_loss(plain, values[1:], actions[1:], returns[1:], 0.0, 0.0, 0.0, "sum")["loss"].backward()
    np.testing.assert_allclose(logits.grad[1].numpy(), plain.grad[0].numpy(), rtol=1e-5)


def test_experience_dataset_repeats_each_batch_and_counts_its_samples_once():
    """learner.epochs = 3: each assembled batch is 3 updates in a row; samples count once (trained_steps), so
    the run's accounting (produced = trained + discarded + in flight) and its rates stay true."""
    server = SimpleNamespace(batch_queue=queue.Queue(), stopping=threading.Event(), steps_to_learner=0,
                             monitor=SimpleNamespace(tick=lambda: None))
    for n in (4, 6):
        server.batch_queue.put(dict(obs=torch.randn(n, 4), actions=torch.zeros(n, dtype=torch.long),
                                    returns=torch.zeros(n), versions=torch.zeros(n, dtype=torch.long)))
    counters = Counters()
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda p: torch.optim.SGD(p, lr=0.0), counters=counters,
                      epochs=3)
    seen = []
    for batch in ExperienceDataset(server, epochs=3):
        seen.append((len(batch["actions"]), batch.get("repeat", 0)))
        learner.on_train_batch_start(batch, 0)
        learner.on_train_batch_end(None, batch, 0)
        if len(seen) == 6:
            server.stopping.set()
    assert seen == [(4, 0), (4, 1), (4, 2), (6, 0), (6, 1), (6, 2)]
    assert counters["trained_steps"] == 10 and server.steps_to_learner == 10


def test_advantage_does_not_train_the_value_through_the_policy_term():
    values = torch.tensor([1.0], requires_grad=True)
    out = a3c_loss(torch.zeros(1, 2), values, torch.tensor([0]), torch.tensor([3.0]), 0.0, 1e-6, 0.0, "sum")
    out["loss"].backward()
    assert values.grad is None or values.grad.abs().sum() == 0


def test_the_learner_replaces_its_published_metrics_never_changes_them():
    """The monitor (watchdog thread) iterates learner.last_metrics while the learner steps on: a dict once
    published must not change size (adding grad_norm to it crashed the watchdog once, and the run hung)."""
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda params: torch.optim.Adam(params, lr=1e-3))
    logits, values = learner.model(torch.zeros(3, 4))
    (logits.sum() + values.sum()).backward()
    published = {"loss": torch.tensor(1.0), "grad_norm": torch.tensor(0.5)}
    learner.last_metrics = published
    learner._step_metrics = {"loss": torch.tensor(2.0)}
    learner.on_before_optimizer_step(None)
    assert published == {"loss": torch.tensor(1.0), "grad_norm": torch.tensor(0.5)}
    assert set(learner.last_metrics) == {"loss", "grad_norm"} and learner.last_metrics["grad_norm"] > 0
    assert learner.last_metrics["loss"] == 2.0


def test_learning_rate_warms_up_linearly_per_update_then_holds():
    """learner.warmup_updates: Lightning steps the schedule every update (not every epoch), lr/N at the first
    update up to lr at the N-th, then lr."""
    import pytorch_lightning as pl

    n = 6
    batch = dict(obs=torch.randn(n, 4), actions=torch.randint(0, 2, (n,)), returns=torch.randn(n),
                 versions=torch.zeros(n, dtype=torch.long))
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda p: torch.optim.RMSprop(p, lr=1e-3), reduction="mean",
                      warmup_updates=4)
    seen = []

    class Record(pl.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            seen.append(optimizer.param_groups[0]["lr"])

    trainer = pl.Trainer(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Record()], accelerator="cpu")
    trainer.fit(learner, torch.utils.data.DataLoader([batch] * 6, batch_size=None))
    assert seen == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert Learner(MLPActorCritic((4,), 2, [8]), lambda p: torch.optim.RMSprop(p, lr=1e-3)).configure_optimizers() \
        .__class__ is torch.optim.RMSprop   # 0 = no schedule at all


def test_rmsprop_tf_matches_tensorflow_formula():
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = RMSpropTF([p], lr=0.1, alpha=0.9, eps=0.1)
    p.grad = torch.tensor([2.0])
    opt.step()
    ms = 0.9 * 1.0 + 0.1 * 4.0           # accumulator starts at 1
    assert p.item() == pytest.approx(1.0 - 0.1 * 2.0 / np.sqrt(ms + 0.1))


def test_networks_shapes():
    conv = ConvActorCritic((4, 84, 84), 6, [16, 32], [8, 4], [4, 2], 256)
    logits, value = conv(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and value.shape == (3,)
    mlp = MLPActorCritic((4,), 2, [8])
    logits, value = mlp(torch.zeros(5, 4))
    assert logits.shape == (5, 2) and value.shape == (5,)
    with pytest.raises(ValueError, match="net=mlp"):
        ConvActorCritic((4,), 2, [16], [8], [4], 32)


# --- predictor and trainer threads on the real shared memory and pipes ---------------------------------
class FakeServer:
    def __init__(self, agents=8, t_max=5, obs=(4,)):
        self.buffers = SharedBuffers.create(agents, 2, t_max, obs, np.float32)
        self.prediction_queue, self.training_queue = RecordPipe(PREDICTION_REQUEST), RecordPipe(ROLLOUT)
        self.batch_queue = queue.Queue(maxsize=100)
        self.generations = np.zeros(agents, np.uint16)
        self.learner = SimpleNamespace(model=MLPActorCritic(obs, 3, [16]), device=torch.device("cpu"), version=7,
                                       autocast_dtype=None)
        self.counters = Counters()
        self.episodes = []
        self.monitor = SimpleNamespace(record_episode=lambda score, length: self.episodes.append((score, length)))
        self.answered, self.errors = [], []

    def answer(self, index, generation):
        self.answered.append(index)

    def fail(self, message, error):
        self.errors.append(message)


def test_predictor_batches_all_waiting_requests_in_one_forward_pass():
    server = FakeServer()
    request = np.zeros(1, PREDICTION_REQUEST)
    for agent in range(6):  # six agents ask at once, one of them a dead agent's stale request
        request["agent"], request["generation"] = agent, 0 if agent < 5 else 9
        server.prediction_queue.put(request)
    predictor = Predictor(server, 0, max_batch=128)
    predictor.start()
    try:
        assert_eventually(lambda: len(server.answered) == 5)
        time.sleep(0.2)
    finally:
        predictor.stopping.set()
        predictor.join(2)
    assert predictor.batches == 1 and predictor.predictions == 5
    assert sorted(server.answered) == [0, 1, 2, 3, 4]
    assert (server.buffers.answer_version[:5] == 7).all()
    assert set(server.buffers.answer_action[:5]) <= {0, 1, 2}


def test_predictor_acts_with_a_bf16_copy_refreshed_per_learner_update():
    server = FakeServer()
    server.learner.model = ConvActorCritic((4, 84, 84), 3, [16, 32], [8, 4], [4, 2], 64)
    server.learner.autocast_dtype = torch.bfloat16
    predictor = Predictor(server, 0, max_batch=128)
    model, version = predictor.acting_model()
    assert version == 7 and next(model.parameters()).dtype == torch.bfloat16
    obs = torch.randint(0, 255, (5, 4, 84, 84), dtype=torch.uint8)
    with torch.inference_mode():
        low_logits, low_values = model(obs)
        logits, values = server.learner.model(obs)
    assert torch.allclose(low_logits.float(), logits, atol=0.05) and torch.allclose(low_values.float(), values, atol=0.05)

    with torch.no_grad():  # a learner update: the copy follows at the next version, not before
        for p in server.learner.model.parameters():
            p.add_(0.5)
    assert predictor.acting_model()[0] is model and not torch.equal(
        model.value.bias.float(), server.learner.model.value.bias.to(torch.bfloat16).float())
    server.learner.version = 8
    model, version = predictor.acting_model()
    assert version == 8
    assert torch.equal(model.value.bias, server.learner.model.value.bias.to(torch.bfloat16))


def test_precision_auto_picks_bf16_only_for_conv_nets_on_native_bf16_hardware():
    conv = ConvActorCritic((4, 84, 84), 3, [16, 32], [8, 4], [4, 2], 64)
    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert resolve_precision("auto", conv, "cpu") == ("bf16-mixed" if native else "32-true")
    assert resolve_precision("auto", MLPActorCritic((4,), 2, [16]), "cpu") == "32-true"
    assert resolve_precision("32-true", conv, "cpu") == "32-true"
    assert AUTOCAST_DTYPES.get("bf16-mixed") == torch.bfloat16 and AUTOCAST_DTYPES.get("32-true") is None


def test_bf16_mixed_a3c_gradients_agree_with_fp32():
    torch.manual_seed(0)
    model = ConvActorCritic((4, 84, 84), 6, [16, 32], [8, 4], [4, 2], 256)
    obs = torch.randint(0, 255, (64, 4, 84, 84), dtype=torch.uint8)
    actions, returns = torch.randint(0, 6, (64,)), torch.randn(64)

    def gradient(autocast: bool) -> torch.Tensor:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits, values = model(obs)
            loss = a3c_loss(logits, values, actions, returns, 0.01, 1e-6, 0.5, "sum")["loss"]
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    full, mixed = gradient(False), gradient(True)
    assert torch.nn.functional.cosine_similarity(full, mixed, dim=0) > 0.99


def test_predictor_respects_max_batch():
    server = FakeServer()
    request = np.zeros(1, PREDICTION_REQUEST)
    for agent in range(8):
        request["agent"] = agent
        server.prediction_queue.put(request)
    predictor = Predictor(server, 0, max_batch=3)
    predictor.start()
    try:
        assert_eventually(lambda: len(server.answered) == 8)
    finally:
        predictor.stopping.set()
        predictor.join(2)
    assert predictor.batches == 3  # 3 + 3 + 2


def ship_rollouts(server, count, length, t_max=5):
    record = np.zeros(1, ROLLOUT)
    for i in range(count):
        agent, slot = i % 8, (i // 8) % 2
        server.buffers.returns[agent, slot, :length] = i
        server.buffers.slot_busy[agent, slot] = 1
        record["agent"], record["slot"], record["length"] = agent, slot, length
        record["episode_done"], record["episode_score"], record["episode_length"] = i == 0, 21.0, 100
        server.training_queue.put(record)


@pytest.mark.parametrize("min_batch, expected", [(0, 5), (12, 15), (30, 30)])
def test_trainer_honours_training_min_batch(min_batch, expected):
    server = FakeServer()
    ship_rollouts(server, 12, 5)
    trainer = TrainerThread(server, 0, min_batch=min_batch, max_batch=64)
    trainer.start()
    try:
        assert_eventually(lambda: server.batch_queue.qsize() * expected >= 60 // expected * expected)
    finally:
        trainer.stopping.set()
        trainer.join(2)
    sizes = [len(b["actions"]) for b in list(server.batch_queue.queue)]
    assert sizes and all(size == expected for size in sizes), sizes
    assert not server.buffers.slot_busy.any()            # every copied slot is released to its agent
    assert server.episodes == [(21.0, 100)]
    produced = 60
    assert sum(sizes) + server.counters["discarded_steps"] == produced


def test_two_trainers_share_the_queue_without_losing_rollouts():
    server = FakeServer()
    ship_rollouts(server, 16, 5)
    trainers = [TrainerThread(server, i, min_batch=10, max_batch=64) for i in range(2)]
    for t in trainers:
        t.start()
    try:
        assert_eventually(lambda: sum(len(b["actions"]) for b in list(server.batch_queue.queue)) == 80)
    finally:
        for t in trainers:
            t.stopping.set()
            t.join(2)
    assert server.counters["discarded_steps"] == 0 and server.counters["rollouts"] == 16


def assert_eventually(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    assert predicate()


def test_lambda_returns_interpolate_between_one_step_and_n_step():
    rewards, values = np.array([1.0, 1.0], np.float32), np.array([5.0, 3.0], np.float32)
    n_step = discounted_returns(rewards, 4.0, 0.5, values, lam=1.0)
    np.testing.assert_allclose(n_step, discounted_returns(rewards, 4.0, 0.5))
    one_step = discounted_returns(rewards, 4.0, 0.5, values, lam=0.0)
    np.testing.assert_allclose(one_step, [1 + 0.5 * 3.0, 1 + 0.5 * 4.0])  # r_t + gamma * V(s_{t+1})
    half = discounted_returns(rewards, 4.0, 0.5, values, lam=0.5)
    np.testing.assert_allclose(half, [1 + 0.5 * (0.5 * 3.0 + 0.5 * 3.0), 3.0])


def test_score_window_means_and_stop_score():
    """score_mean_100 is the mean of the last `size` episodes (NaN before the first); stop_score counts only
    on a full window, is reported once, with the run's clock at that episode."""
    window = ScoreWindow(3, stop_score=5.0, clock=lambda: 42.0)
    assert all(np.isnan(window.means()))
    assert [window.add(s, 10) for s in (9.0, 9.0)] == [False, False]   # mean 9 but the window is not full
    assert window.means() == (9.0, 10.0) and window.seconds_to_stop_score is None
    assert window.add(0.0, 40) is True and window.seconds_to_stop_score == 42.0   # (9 + 9 + 0) / 3 = 6 >= 5
    assert window.means() == (6.0, 20.0)
    assert ScoreWindow(2, None, lambda: 0.0).add(1e9, 1) is False   # no stop_score: never stops


def test_episodes_ending_while_the_run_stops_at_stop_score_leave_the_reported_score(tmp_path):
    """stop_score reached -> the run stops; episodes that end during the stop (worse ones, here) are counted
    but must not pull the reported score below the stop_score its stop_reason names (A3C's CartPole test saw
    472.3 with 'reached stop_score=475')."""
    from omegaconf import OmegaConf

    from ga3c.algos.a3c_monitor import A3CMonitor

    a3c = A3CMonitor(OmegaConf.create({"log": {"score_window": 3}, "stop_score": 10}), tmp_path,
                     SimpleNamespace(snapshot=dict), None, {}, 0, 1)
    assert [a3c.episode(10.0, 5) for _ in range(3)] == [False, False, True]
    assert a3c.episode(0.0, 5) is False and list(a3c.score_window.scores) == [10.0] * 3

    stops = []
    server = SimpleNamespace(frames=lambda: 0, all_predictors=[], all_trainers=[], counters=Counters(),
                             learner=SimpleNamespace(version=0, busy_seconds=0.0), request_stop=stops.append)
    ga3c = Monitor(server, tmp_path, 5.0, False, 3, 10)
    for score in (10.0, 10.0, 10.0, 0.0, 0.0):
        ga3c.record_episode(score, 5)
    assert list(ga3c.score_window.scores) == [10.0] * 3 and server.counters["episodes"] == 5
    assert stops == ["score_mean_100 reached stop_score=10"]


def test_a_resumed_run_goes_on_with_the_score_window_of_its_checkpoint(tmp_path):
    """GA3C's RunState and A3C's checkpoint save the window's episodes; a run resumed from either (GA3C from an
    A3C checkpoint too) reports score_mean_100 over them at once instead of starting empty."""
    from omegaconf import OmegaConf

    from ga3c.algos.a3c_monitor import A3CMonitor
    from ga3c.algos.a3c_model import lightning_checkpoint
    from ga3c.algos.ga3c import RunState
    from ga3c.runtime import checkpoint_run_state

    def ga3c_run(window: int):
        server = SimpleNamespace(frames=lambda: 0, all_predictors=[], all_trainers=[], counters=Counters(),
                                 learner=SimpleNamespace(version=0, busy_seconds=0.0), request_stop=print,
                                 counter_totals=dict, seed_counter=0)
        monitor = Monitor(server, tmp_path, 5.0, False, window, None)
        return RunState(server, monitor, None), monitor

    first, first_monitor = ga3c_run(3)
    for score, length in ((1.0, 10), (2.0, 20), (3.0, 30), (4.0, 40)):
        first_monitor.record_episode(score, length)
    state = first.state_dict()
    assert state["score_window"] == dict(scores=[2.0, 3.0, 4.0], lengths=[20, 30, 40])

    resumed, resumed_monitor = ga3c_run(3)
    resumed.load_state_dict(state)
    assert resumed_monitor.score_window.means() == (3.0, 30.0)
    assert "score_window" not in resumed.extra             # not handed on as another component's state
    smaller, smaller_monitor = ga3c_run(2)                  # a smaller log.score_window keeps the latest
    smaller.load_state_dict(state)
    assert smaller_monitor.score_window.means() == (3.5, 35.0)

    model, a3c_window = MLPActorCritic((4,), 2, [8]), dict(scores=[5.0, 7.0], lengths=[50, 70])
    a3c_checkpoint = lightning_checkpoint(model, torch.optim.Adam(model.parameters()), {}, 1.0, 1, None, a3c_window)
    a3c = A3CMonitor(OmegaConf.create({"log": {"score_window": 3}, "stop_score": None}), tmp_path,
                     SimpleNamespace(snapshot=dict), None, checkpoint_run_state(a3c_checkpoint), 0, 1)
    assert a3c.score_window.means() == (6.0, 60.0) and a3c.score_window.state_dict() == a3c_window
    from_a3c, from_a3c_monitor = ga3c_run(3)
    from_a3c.load_state_dict(checkpoint_run_state(a3c_checkpoint))
    assert from_a3c_monitor.score_window.means() == (6.0, 60.0)
