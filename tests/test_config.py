"""Config composition for every game x net, and the checks that turn bad values into clear messages."""
from __future__ import annotations

import functools

import pytest
from omegaconf import OmegaConf

from ga3c.config import ConfigError, validate
from ga3c.env import env_spec
from ga3c.networks import build_network

from helpers import GAMES, NETS, compose_config


@functools.cache
def game_spec(game: str) -> tuple:
    """(observation shape, action count) of a game's real env: made once per game, not once per net."""
    obs_shape, _, num_actions = env_spec(OmegaConf.to_container(compose_config(f"game={game}").game))
    return obs_shape, num_actions


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("net", NETS)
def test_every_game_and_net_composes(game, net):
    cfg = compose_config(f"game={game}", f"net={net}")
    validate(cfg)
    assert cfg.game.name == game
    obs_shape, num_actions = game_spec(game)
    if net != "lstm" and (len(obs_shape) == 1) != (net == "mlp"):   # lstm takes images and vectors
        with pytest.raises(ConfigError, match="net="):  # a conv net on vectors, or an MLP on frames
            build_network(cfg.net, obs_shape, num_actions)
    else:
        model = build_network(cfg.net, obs_shape, num_actions)
        assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize("game", ["game=breakout", "game=spaceinvaders", "game=atari game.id=ALE/Asterix-v5"])
def test_atari_games_take_the_large_net_and_the_command_line_or_the_paper_still_picks(game):
    channels = lambda *overrides: list(compose_config(*game.split(), *overrides).net.channels)  # noqa: E731
    assert channels() == [32, 64, 64]                            # conf/game/atari.yaml: net=large
    assert channels("net=small") == [16, 32]                     # the command line wins over the game file
    assert channels("experiment=paper") == [16, 32]              # the paper's own network
    assert channels("experiment=rq1_ga3c_vs_a3c") == [16, 32]    # the paper's studies keep it too


@pytest.mark.parametrize("game", ["boxing", "pong", "qbert"])
def test_boxing_pong_and_qbert_keep_the_small_net_they_learn_fastest_with(game):
    assert list(compose_config(f"game={game}").net.channels) == [16, 32]
    assert list(compose_config(f"game={game}", "net=large").net.channels) == [32, 64, 64]
    assert list(compose_config().net.channels) == [16, 32]   # Pong is the default game


def test_cartpole_picks_the_mlp_and_its_own_hyperparameters():
    cfg = compose_config("game=cartpole")
    assert cfg.net._target_.endswith("MLPActorCritic") and cfg.learner.optimizer._target_ == "torch.optim.Adam"
    pong = compose_config()
    assert pong.game.id == "ALE/Pong-v5" and pong.net._target_.endswith("ConvActorCritic")
    assert pong.net.init == "orthogonal"


def test_the_rmsprop_games_warm_up_and_the_adam_games_do_not():
    """torch RMSprop's first steps are ~10x lr (its average starts at 0): the Atari defaults warm the learning
    rate up; CartPole and the probe use Adam, which corrects its own start, and must learn in seconds."""
    for game in ("pong", "boxing"):
        cfg = compose_config(f"game={game}")
        assert cfg.learner.optimizer._target_ == "torch.optim.RMSprop" and cfg.learner.warmup_updates == 1000
    for game in ("cartpole", "cue"):
        cfg = compose_config(f"game={game}")
        assert cfg.learner.optimizer._target_ == "torch.optim.Adam" and cfg.learner.warmup_updates == 0


def test_boxing_takes_its_measured_entropy_weight_and_the_paper_still_overrides_it():
    boxing = compose_config("game=boxing")
    validate(boxing)
    assert boxing.game.id == "ALE/Boxing-v5" and boxing.game.thresholds == [30, 60, 90]
    assert boxing.learner.beta == 0.003 and compose_config().learner.beta == 0.01   # Pong keeps A2C's
    assert compose_config("game=boxing", "learner.beta=0.02").learner.beta == 0.02
    assert compose_config("game=boxing", "experiment=paper").learner.beta == 0.01


def test_amidar_takes_its_measured_entropy_schedule_and_the_paper_keeps_beta_constant():
    amidar = compose_config("game=amidar")
    validate(amidar)
    assert (amidar.learner.beta, amidar.learner.beta_decay_updates, amidar.learner.beta_final) == (0.01, 20000, 0.001)
    assert amidar.net.hidden == 512   # the large net, as every Atari game without its own net
    assert compose_config("game=breakout").learner.beta_decay_updates == 0   # other games: 0.01 throughout
    assert compose_config("game=amidar", "experiment=paper").learner.beta_decay_updates == 0


def test_any_gymnasium_id_works_with_one_override():
    cfg = compose_config("game=cartpole", "game.id=Acrobot-v1")
    validate(cfg)
    obs_shape, _, num_actions = env_spec(OmegaConf.to_container(cfg.game))
    assert obs_shape == (6,) and num_actions == 3


def test_the_large_net_is_substantially_larger():
    def params(net):
        cfg = compose_config(f"net={net}")
        return sum(p.numel() for p in build_network(cfg.net, (4, 84, 84), 6).parameters())

    assert params("large") > 2 * params("small")


def test_experiment_paper_composes_to_the_papers_values():
    for game in ("pong", "boxing", "cartpole"):
        cfg = compose_config("experiment=paper", f"game={game}")
        validate(cfg)
        assert (cfg.agents, cfg.predictors, cfg.trainers, cfg.t_max) == (32, 2, 2, 5)
        assert cfg.training_min_batch == 0 and cfg.prediction_max_batch == 128
        opt = cfg.learner.optimizer
        assert opt._target_ == "ga3c.learner.RMSpropTF"
        assert (opt.lr, opt.alpha, opt.eps, opt.momentum) == (3e-4, 0.99, 0.1, 0.0)
        lc = cfg.learner
        assert (lc.gamma, lc.gae_lambda, lc.beta, lc.log_epsilon, lc.reduction) == (0.99, 1.0, 0.01, 1e-6, "sum")
        assert (lc.grad_clip, lc.reward_clip, lc.correction, lc.normalize_advantage) == (0.0, 1.0, "none", False)
        assert (lc.warmup_updates, lc.epochs, lc.ppo_clip) == (0, 1, 0.0)
        assert cfg.net.init == "torch"


def test_counts_follow_the_machine():
    from ga3c.config import machine_counts

    assert machine_counts(2, gpu=False) == dict(agents=16, predictors=1, trainers=2, training_min_batch=128)
    assert machine_counts(16, gpu=True) == dict(agents=64, predictors=2, trainers=2, training_min_batch=128)
    assert machine_counts(4, gpu=True)["agents"] == 32  # the paper's counts on a small GPU machine
    cfg = compose_config()
    assert isinstance(cfg.agents, int) and cfg.agents >= 8 and cfg.predictors >= 1
    assert compose_config("agents=5").agents == 5
