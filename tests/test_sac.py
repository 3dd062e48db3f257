"""SAC (algorithm: sac) for Box actions (test_sac_discrete.py: for Discrete ones): it learns Pendulum over real sockets without making
clients wait for each version, its ONNX actor computes what torch computes, the squashed
Gaussian's log-probs agree between numpy (clients, serving) and torch (the learner), its
checkpoint restores every part exactly, and misuse is refused with a clear message."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import httpx
import numpy as np
import onnxruntime as ort
import pytest
import torch

from app.experience import blocks_of
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.spaces.models import BoxSpace, DiscreteSpace, MultiDiscreteSpace
from app.training.algorithms.sac.config import SACConfig
from app.training.algorithms.sac.learner import SACLearner
from app.training.algorithms.sac.networks import LOG_STD_MIN, SquashedGaussianActor
from app.training.algorithms.sac.onnx_head import GSDE_EXPLORING_NOTE, export_onnx
from app.training.checkpoints import CheckpointMismatch
from app.training.onnx_export import load_payload
from app.training.service import LocalTrainingService
from rllink.action_dists import PinkNoise, sample_squashed_gaussian, squashed_gaussian_logp
from rllink_clients.gym_client import OnnxPolicy, run
from rllink_clients.thin_client import run_thin

from .helpers import gateway_settings, learner_of, running_gateway, wait_until

OBS_SPACE = BoxSpace(shape=(3,))
ACTION_SPACE = BoxSpace(shape=(1,), low=-2.0, high=2.0)
# Smaller networks than the default (256, 256): the same algorithm, four times faster on 2 cores.
FAST_SAC = SACConfig(hidden_sizes=(64, 64), learning_starts=1000)


def pendulum_settings(tmp_path, **overrides) -> Settings:
    values = dict(algorithm="sac", observation_space=OBS_SPACE, action_space=ACTION_SPACE, env_steps_per_sample=200, sac=FAST_SAC)
    return gateway_settings(tmp_path, **{**values, **overrides})


@pytest.mark.e2e
def test_sac_learns_pendulum_over_tcp_and_clients_do_not_wait_for_each_version(tmp_path):
    with running_gateway(pendulum_settings(tmp_path)) as gateway, gateway.client("tcp", timeout=120) as client:
        config = client.request({"type": "GET_CONFIG"})
        result = run(client, "Pendulum-v1", target_return=-400, max_env_steps=25_000, seed=0, evaluation_interval=0)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    assert config["action_distribution"] == "squashed_gaussian" and config["force_on_policy"] is False
    # Random play scores about -1,200 on Pendulum; -400 means it swings up and balances.
    assert result.reached_target, (result.env_steps, result.mean_return)
    assert np.mean(result.first_returns) < -900
    assert metrics["dropped_env_steps"].get("stale", 0) == 0  # off-policy: nothing is stale
    learner = metrics["learner"]
    assert learner["gradient_steps"] >= 1 and learner["alpha"] > 0 and learner["buffer_size"] >= 1000


def test_the_reference_client_loads_each_model_once_however_many_requests_bring_it(tmp_path):
    """SAC answers every request with the latest version, which outlasts many requests of 50
    env steps (none is published before learning_starts): the client reloads only a new one."""
    with running_gateway(pendulum_settings(tmp_path, env_steps_per_sample=50)) as gateway, gateway.client("tcp") as client:
        client.request({"type": "GET_CONFIG"})
        result = run(client, "Pendulum-v1", target_return=None, max_env_steps=1_500, seed=0, evaluation_interval=0)
    requests = result.env_steps // 50
    loaded, versions = result.models_loaded, result.weights_seq_no + 1
    assert requests == 30 and 1 <= loaded <= versions < requests, (loaded, versions)


@pytest.mark.e2e
def test_a_thin_client_gets_actions_inside_the_box_and_sac_trains_on_its_episodes(tmp_path):
    settings = pendulum_settings(tmp_path, sac=FAST_SAC.model_copy(update={"learning_starts": 200}))
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=120) as client:
        result = run_thin(client, "Pendulum-v1", target_return=None, max_env_steps=1000, seed=0)
        wait_until(lambda: gateway.service.metrics.num_env_steps_trained_lifetime == 1000, 60, "the episodes to train")
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    assert result.env_steps == 1000 and result.episodes == 5
    assert metrics["num_env_steps_sampled_lifetime"] == 1000
    assert metrics["weights_seq_no"] >= 1 and metrics["learner"]["gradient_steps"] >= 1


def test_the_onnx_actor_computes_what_torch_computes():
    torch.manual_seed(0)
    for obs_shape in ((3,), (2, 3)):
        actor = SquashedGaussianActor(BoxSpace(shape=obs_shape), BoxSpace(shape=(2,), low=-1, high=3), (32, 16))
        with torch.no_grad():
            actor.fc_logstd.weight.mul_(50)  # push log std into both ends of its range
        obs = np.random.default_rng(0).normal(size=(64, *obs_shape)).astype(np.float32)
        session = ort.InferenceSession(export_onnx(actor, 7), providers=["CPUExecutionProvider"])
        (onnx_out,) = session.run(None, {"obs": obs})
        with torch.no_grad():
            expected = actor(torch.from_numpy(obs)).numpy()
        assert onnx_out.shape == (64, 4)
        np.testing.assert_allclose(onnx_out, expected, rtol=1e-5, atol=1e-5)
        log_std = onnx_out[:, 2:]
        assert log_std.min() >= -5 - 1e-5 and log_std.max() <= 2 + 1e-5


def test_a_gsde_actor_exports_its_state_dependent_std_and_a_drawn_theta_as_its_mean():
    """gSDE's std of u is sqrt(features^2 @ exp(2 log_std)); the exploring model's mean is
    mean + features @ theta with a tiny constant log std, so clients' own noise adds nothing."""
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS_SPACE, BoxSpace(shape=(2,), low=-1, high=3), (32, 16), gsde_log_std_init=-2.0)
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    with torch.no_grad():
        expected = actor(torch.from_numpy(obs)).numpy()
        features = actor.body(torch.from_numpy(obs)).numpy()
    std = np.sqrt(features**2 @ np.exp(-4.0 * np.ones((16, 2))) + 1e-6)
    np.testing.assert_allclose(np.exp(expected[:, 2:]), std, rtol=1e-4)
    policy = ort.InferenceSession(export_onnx(actor, 7), providers=["CPUExecutionProvider"]).run(None, {"obs": obs})[0]
    np.testing.assert_allclose(policy, expected, rtol=1e-5, atol=1e-5)

    theta = actor.exploration_noise(np.random.default_rng(1))
    assert theta.shape == (16, 2) and 0.05 < theta.std() < 0.3  # entries N(0, exp(-2)^2)
    played = ort.InferenceSession(export_onnx(actor, 7, exploration_noise=theta), providers=["CPUExecutionProvider"])
    assert [o.name for o in played.get_outputs()] == ["action_dist_inputs", "action_dist_inputs_noise_free"]
    played_out, noise_free = played.run(None, {"obs": obs})
    np.testing.assert_allclose(played_out[:, :2], expected[:, :2] + features @ theta, rtol=1e-4, atol=1e-5)
    assert np.all(played_out[:, 2:] == LOG_STD_MIN)
    # Its second output is the same without the noise: the mode evaluation episodes play.
    np.testing.assert_allclose(noise_free[:, :2], expected[:, :2], rtol=1e-5, atol=1e-5)
    assert np.all(noise_free[:, 2:] == LOG_STD_MIN)


def test_gsde_draws_a_new_theta_every_gsde_sample_every_versions(tmp_path):
    cfg = SACConfig(hidden_sizes=(16,), learning_starts=10_000, exploration="gsde", gsde_sample_every=2)
    learner = SACLearner(cfg, OBS_SPACE, ACTION_SPACE, seed=0, checkpoint_dir=tmp_path, onnx_input_name="obs")
    thetas = []
    for version in range(1, 6):
        state, _ = learner.train(blocks_of(random_chunks(1, 10, seed=version), "x"), weights_seq_no=version)
        thetas.append(learner.exploration_noise.copy())
        assert load_payload(state.onnx_gzip_b64).SerializeToString() != state.onnx_bytes  # SET_STATE's explores
    same = [np.array_equal(a, b) for a, b in zip(thetas, thetas[1:])]
    assert same == [True, False, True, False]  # versions 1-2, 3-4, 5


def test_squashed_gaussian_sampling_and_log_probs_agree_with_the_learners():
    torch.manual_seed(1)
    actor = SquashedGaussianActor(OBS_SPACE, BoxSpace(shape=(2,), low=-2, high=2), (16,))
    obs = torch.randn(1000, 3)
    with torch.no_grad():
        dist_inputs = actor(obs).double().numpy()
    actions, logp = sample_squashed_gaussian(dist_inputs, -2.0, 2.0, np.random.default_rng(0))
    assert actions.min() >= -2 and actions.max() <= 2
    np.testing.assert_allclose(squashed_gaussian_logp(dist_inputs, actions, -2.0, 2.0), logp, rtol=1e-4, atol=1e-3)
    # The learner's log-prob of its own samples is the same formula.
    with torch.no_grad():
        torch.manual_seed(2)
        torch_actions, torch_logp = actor.sample(obs)
    numpy_logp = squashed_gaussian_logp(dist_inputs, torch_actions.double().numpy(), -2.0, 2.0)
    np.testing.assert_allclose(numpy_logp, torch_logp.double().numpy(), rtol=1e-3, atol=2e-3)
    deterministic, _ = sample_squashed_gaussian(dist_inputs, -2.0, 2.0, np.random.default_rng(0), explore=False)
    np.testing.assert_allclose(deterministic, 2 * np.tanh(dist_inputs[:, :2]))


def random_chunks(count: int, steps: int, seed: int, discrete: bool = False) -> list[EpisodeChunk]:
    """Chunks of random Pendulum-like steps (CartPole-like with `discrete`: 4 numbers, actions 0 or 1)."""
    rng = np.random.default_rng(seed)
    return [
        EpisodeChunk.model_validate(
            {
                "obs": rng.normal(size=(steps + 1, 4 if discrete else 3)).tolist(),
                "actions": rng.integers(0, 2, steps).tolist() if discrete else rng.uniform(-2, 2, (steps, 1)).tolist(),
                "rewards": rng.normal(size=steps).tolist(),
                "is_terminated": bool(i % 2),
                "is_truncated": False,
            }
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("discrete", "exploration"), [(False, "gaussian"), (True, "gaussian"), (False, "gsde")], ids=["box", "discrete", "gsde"]
)
def test_a_checkpoint_restores_networks_optimisers_and_alpha_exactly(tmp_path, discrete, exploration):
    cfg = SACConfig(hidden_sizes=(32, 32), learning_starts=50, batch_size=32, exploration=exploration)
    spaces = (BoxSpace(shape=(4,)), DiscreteSpace(n=2)) if discrete else (OBS_SPACE, ACTION_SPACE)
    make = lambda seed: SACLearner(cfg, *spaces, seed=seed, checkpoint_dir=tmp_path, onnx_input_name="obs")  # noqa: E731
    trained = make(0)
    _, stats = trained.train(blocks_of(random_chunks(4, 50, seed=0, discrete=discrete), "x"), weights_seq_no=3)
    assert stats["gradient_steps"] == 200 and stats["alpha"] != cfg.initial_alpha  # it trained, alpha moved

    restored = make(1)  # other initial weights
    assert restored.restore() and restored.weights_seq_no == 3
    for name, part in trained._parts().items():
        expected, actual = part.state_dict(), restored._parts()[name].state_dict()
        if name == "sac":
            assert expected.keys() == actual.keys()
            for key in expected:
                assert torch.equal(expected[key], actual[key]), key
        else:  # optimiser states: step counts and moments
            for param_id, state in expected["state"].items():
                for key, value in state.items():
                    assert torch.equal(value, actual["state"][param_id][key]), (name, key)
    assert restored.sac.log_alpha.item() == trained.sac.log_alpha.item()
    assert restored.export().onnx_bytes == trained.export().onnx_bytes
    if exploration == "gsde":  # its std is learnt: the entropy term moved it from its start
        assert not torch.equal(trained.sac.actor.gsde_log_std, torch.full_like(trained.sac.actor.gsde_log_std, cfg.gsde_log_std_init))


@pytest.mark.parametrize(
    ("settings", "alpha"), [({}, 1.0), ({"autotune": False}, 0.2), ({"alpha": 0.5}, 0.5), ({"alpha": 0.5, "autotune": False}, 0.5)]
)
def test_alpha_starts_at_1_with_autotune_and_at_0_2_without_unless_set(tmp_path, settings, alpha):
    cfg = SACConfig(hidden_sizes=(8,), **settings)
    learner = SACLearner(cfg, OBS_SPACE, ACTION_SPACE, seed=0, checkpoint_dir=tmp_path, onnx_input_name="obs")
    assert learner.sac.log_alpha.exp().item() == pytest.approx(alpha)


def test_a_checkpoint_of_the_other_exploration_is_refused_naming_the_setting(tmp_path):
    make = lambda exploration, folder: SACLearner(  # noqa: E731
        SACConfig(hidden_sizes=(16,), exploration=exploration),
        OBS_SPACE,
        ACTION_SPACE,
        seed=0,
        checkpoint_dir=tmp_path / folder,
        onnx_input_name="obs",
    )
    make("gsde", "a").save()
    with pytest.raises(CheckpointMismatch, match="saved with exploration=gsde but the settings give no exploration"):
        make("gaussian", "a").restore()
    # A white-noise checkpoint names no exploration: the message says it was saved without one.
    make("gaussian", "b").save()
    with pytest.raises(CheckpointMismatch, match=r"saved without exploration \(its default then\) but the settings give exploration=gsde"):
        make("gsde", "b").restore()


def test_a_ppo_checkpoint_is_refused_by_a_sac_gateway_naming_the_algorithm(tmp_path):
    async def start_and_stop(settings: Settings) -> None:
        service = LocalTrainingService(settings)
        await service.start()
        await service.stop()

    ppo = gateway_settings(tmp_path, observation_space=OBS_SPACE, action_space=ACTION_SPACE)
    asyncio.run(start_and_stop(ppo))
    with pytest.raises(CheckpointMismatch, match=r"saved without algorithm \(its default then\) but the settings give algorithm=sac"):
        asyncio.run(start_and_stop(pendulum_settings(tmp_path)))


def test_sac_needs_a_discrete_space_or_a_bounded_box_and_patch_changes_its_sac_settings_only(tmp_path):
    multi_discrete = MultiDiscreteSpace(nvec=[2, 3])
    with pytest.raises(ValueError, match="sac needs a discrete action space or a box with finite low and high"):
        gateway_settings(tmp_path, algorithm="sac", action_space=multi_discrete)
    with pytest.raises(ValueError, match="finite low and high"):
        gateway_settings(tmp_path, algorithm="sac", observation_space=OBS_SPACE, action_space=BoxSpace(shape=(1,)))
    with pytest.raises(ValueError, match="action_masking trains with ppo only"):
        gateway_settings(tmp_path, algorithm="sac", action_masking=True)  # CartPole's Discrete(2)
    with running_gateway(pendulum_settings(tmp_path)) as gateway:
        url = f"{gateway.base_url}/api/config"
        refused = {
            "ppo": httpx.patch(url, json={"ppo": {"learning_rate": 0.01}}),
            "ppo for it": httpx.patch(url, json={"policies": {"default_policy": {"ppo": {"learning_rate": 0.01}}}}),
            "buffer": httpx.patch(url, json={"sac": {"q_lr": 0.002, "buffer_size": 10}}),
            "invalid": httpx.patch(url, json={"sac": {"q_lr": 0.002, "tau": 2}}),
        }
        changed = httpx.patch(url, json={"sac": {"q_lr": 0.002, "utd_ratio": 2}, "policies": {"default_policy": {"sac": {"tau": 0.01}}}})
        config = httpx.get(url).json()
        learner = learner_of(gateway.service)
    assert refused["ppo"].status_code == 409 and "no module trains with ppo" in refused["ppo"].text
    assert refused["ppo for it"].status_code == 409 and "trains with sac, not ppo" in refused["ppo for it"].text
    assert refused["buffer"].status_code == 422 and "buffer_size" in refused["buffer"].text  # not in the patch's schema
    assert refused["invalid"].status_code == 422
    assert changed.status_code == 200, changed.text
    sac = config["policies"]["default_policy"]["sac"]
    assert (sac["q_lr"], sac["utd_ratio"], sac["tau"], sac["policy_lr"]) == (0.002, 2, 0.01, FAST_SAC.policy_lr)
    assert learner.cfg.q_lr == 0.002 and learner.cfg.tau == 0.01  # the learner's next step uses them
    assert config["algorithm"] == "sac" and sac["hidden_sizes"] == [64, 64]
    assert config["force_on_policy"] is False and config["device"] == "cpu"


def test_owed_gradient_steps_go_on_in_versions_of_bounded_size_without_new_data(tmp_path):
    """1,000 transitions at utd_ratio 1 owe 1,000 gradient steps: done 250 per version, so
    clients see a new policy every 250 steps, not one after all 1,000."""

    async def scenario() -> tuple[list[float], float, int]:
        cfg = SACConfig(hidden_sizes=(16,), learning_starts=100, batch_size=16, updates_per_version=250)
        service = LocalTrainingService(pendulum_settings(tmp_path, sac=cfg))
        await service.start()
        client = service.connect("tcp", "a")
        service.ingest(client, random_chunks(10, 100, seed=3))
        for _ in range(600):  # wait until nothing is owed (bounded: 60 s)
            await asyncio.sleep(0.1)
            learner = learner_of(service)
            if not learner.owes_updates and not service.status().training_in_progress:
                break
        version = service.current_state().weights_seq_no
        await service.stop()
        return learner.owed_updates, service.metrics.num_env_steps_trained_lifetime, version

    owed, trained, version = asyncio.run(scenario())
    assert owed == 0 and trained == 1000
    assert version == 4  # 1,000 owed gradient steps in versions of 250


EPISODES_SENT = 10  # 2,000 env steps; the 5th brings the buffer to learning_starts (1,000)


@pytest.mark.e2e
def test_sac_trains_on_every_step_of_episodes_sent_without_ever_waiting(tmp_path):
    """A client faster than the learner sends EPISODES (no reply) and never waits: its data
    is trained on all the same, the owed gradient steps going on after it stops. (That SAC
    learns from such stale data is the Pendulum test above: its client never waits either.)"""
    rng = np.random.default_rng(0)
    env = gym.make("Pendulum-v1")
    with running_gateway(pendulum_settings(tmp_path)) as gateway, gateway.client("tcp", timeout=120) as client:
        config = client.request({"type": "GET_CONFIG"})
        policy_of = lambda state: OnnxPolicy(state, "obs", config["action_space"], rng, config["action_distribution"])  # noqa: E731
        policy = policy_of(client.request({"type": "GET_STATE"}))
        for episode in range(EPISODES_SENT):
            obs, _ = env.reset(seed=episode)
            chunk = {"obs": [obs.tolist()], "actions": [], "rewards": [], "is_terminated": False, "is_truncated": True}
            for _ in range(200):
                action, _, _ = policy.act(obs)
                obs, reward, _, _, _ = env.step(action)
                chunk["actions"].append(action), chunk["rewards"].append(float(reward)), chunk["obs"].append(obs.tolist())
            client.send({"type": "EPISODES", "episodes": [chunk]})
            policy = policy_of(client.request({"type": "GET_STATE"}))  # the latest version, never waited for
        learner = learner_of(gateway.service)
        wait_until(lambda: not learner.owes_updates and not gateway.service.status().training_in_progress, 300, "the owed gradient steps")
        final = client.request({"type": "GET_STATE"})
        trained = gateway.service.metrics.num_env_steps_trained_lifetime
        gradient_steps = learner.sac.updates

    assert trained == 200 * EPISODES_SENT
    # One gradient step per env step received from the one that filled the buffer to
    # learning_starts on: episodes 5 to 10, 1,200 steps, in versions of at most 250.
    assert gradient_steps == 200 * (EPISODES_SENT - FAST_SAC.learning_starts // 200 + 1)
    assert final["weights_seq_no"] >= 1200 // FAST_SAC.updates_per_version


def mean_and_log_std(onnx_bytes: bytes, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output 0's mean and log std (Pendulum's one action)."""
    (out,) = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"]).run(["action_dist_inputs"], {"obs": obs})
    return out[:, :1], out[:, 1:]


@pytest.mark.e2e
def test_gsde_clients_get_a_new_noise_draw_each_version_and_rest_serves_the_noise_free_policy(tmp_path):
    """Through a real gateway: each version's SET_STATE model carries its own state-dependent
    noise in the mean (log std LOG_STD_MIN), while /api/model.onnx stays the learner's policy,
    whose mean is the mode evaluation and a shipped game play. No gradient steps (learning_starts
    not reached), so the policy is the same in every version and only the noise changes."""
    sac = FAST_SAC.model_copy(update={"exploration": "gsde", "learning_starts": 1_000_000})
    obs = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    played, served, greedy_actions = {}, {}, {}
    settings = pendulum_settings(tmp_path, sac=sac, env_steps_per_sample=20)  # a version per chunk
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=60) as client:
        client.request({"type": "GET_CONFIG"})
        for i in range(3):
            before = gateway.service.current_state().weights_seq_no
            rng = np.random.default_rng(i)
            chunk = {"obs": rng.normal(size=(21, 3)).tolist(), "actions": rng.uniform(-2, 2, (20, 1)).tolist()}
            client.send({"type": "EPISODES", "episodes": [{**chunk, "rewards": [0.0] * 20, "is_terminated": True, "is_truncated": False}]})
            wait_until(lambda: gateway.service.current_state().weights_seq_no > before, 60, "a new version")  # noqa: B023
            state = client.request({"type": "GET_STATE"})
            model = httpx.get(f"{gateway.base_url}/api/model.onnx")
            assert model.headers["X-Weights-Seq-No"] == str(state["weights_seq_no"])
            played[state["weights_seq_no"]] = load_payload(state["onnx_file"])
            served[state["weights_seq_no"]] = model.content
            # A client's greedy action (an evaluation episode's) from the SET_STATE model is the
            # noise-free policy's mode: tanh of its mean, scaled to the action space.
            greedy = OnnxPolicy(state, "obs", ACTION_SPACE.model_dump(), np.random.default_rng(0), "squashed_gaussian")
            greedy_actions[state["weights_seq_no"]] = np.array([greedy.act(o, explore=False)[0] for o in obs])
        actor = learner_of(gateway.service).sac.actor
        with torch.no_grad():
            expected = actor(torch.from_numpy(obs)).numpy()

    assert len(played) == 3
    noises = []
    for version, model in played.items():
        props = {p.key: p.value for p in model.metadata_props}
        assert props["exploration"] == GSDE_EXPLORING_NOTE and props["weights_seq_no"] == str(version)
        mean, log_std = mean_and_log_std(model.SerializeToString(), obs)
        assert np.all(log_std == LOG_STD_MIN)
        clean_mean, clean_log_std = mean_and_log_std(served[version], obs)
        np.testing.assert_allclose(np.concatenate([clean_mean, clean_log_std], axis=1), expected, rtol=1e-5, atol=1e-5)
        assert np.all(clean_log_std > LOG_STD_MIN)  # the policy's own std: gSDE's, state-dependent
        noises.append(mean - clean_mean)
        np.testing.assert_allclose(greedy_actions[version], 2.0 * np.tanh(clean_mean), rtol=1e-5, atol=1e-5)
        assert np.abs(greedy_actions[version] - 2.0 * np.tanh(mean)).max() > 1e-3  # not the exploring mean's
    for noise in noises:
        assert 1e-4 < np.abs(noise).mean() < 10 and noise.std() > 1e-5  # finite, and different per state
    for a, b in ((0, 1), (1, 2), (0, 2)):
        assert np.abs(noises[a] - noises[b]).mean() > 1e-4  # a new draw each version


@pytest.mark.e2e
def test_a_thin_clients_exploring_steps_play_the_versions_gsde_noise_as_a_local_client_does(tmp_path):
    """The gateway plays a thin client's exploring steps with the SET_STATE model a local client
    runs (this version's noise features(s) @ theta in the mean, log std LOG_STD_MIN), not white
    noise of gSDE's std, and its evaluation steps with the policy's mode."""
    sac = FAST_SAC.model_copy(update={"exploration": "gsde", "learning_starts": 1_000_000})
    obs = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    settings = pendulum_settings(tmp_path, sac=sac, env_steps_per_sample=1000, evaluation_interval=0)
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=60) as client:
        client.request({"type": "GET_CONFIG"})
        rng = np.random.default_rng(1)  # a chunk, for a version with drawn noise (version 0 has none)
        chunk = {"obs": rng.normal(size=(21, 3)).tolist(), "actions": rng.uniform(-2, 2, (20, 1)).tolist(), "rewards": [0.0] * 20}
        client.send({"type": "EPISODES", "episodes": [{**chunk, "is_terminated": True, "is_truncated": False}]})
        wait_until(lambda: gateway.service.current_state().weights_seq_no > 0, 60, "a version with noise")
        state = client.request({"type": "GET_STATE"})
        ids = [client.request({"type": "START_EPISODE"})["episode_id"] for _ in obs]
        replies = {
            explore: client.request({"type": "GET_ACTION", "batch": [
                {"episode_id": i, "obs": o.tolist(), "explore": explore} for i, o in zip(ids, obs)
            ]})
            for explore in (True, False)
        }
        served = httpx.get(f"{gateway.base_url}/api/model.onnx").content
    assert {reply["weights_seq_no"] for reply in replies.values()} == {state["weights_seq_no"]}
    exploring_mean, _ = mean_and_log_std(load_payload(state["onnx_file"]).SerializeToString(), obs)
    clean_mean, clean_log_std = mean_and_log_std(served, obs)
    explored, greedy = (np.array(replies[explore]["actions"]) for explore in (True, False))
    assert np.abs(2.0 * np.tanh(exploring_mean) - 2.0 * np.tanh(clean_mean)).mean() > 0.1  # the noise shows
    assert clean_log_std.min() > -2  # white noise of gSDE's own std would be far from the exploring mean
    np.testing.assert_allclose(explored, 2.0 * np.tanh(exploring_mean), atol=0.08)  # std exp(LOG_STD_MIN): 0.007
    np.testing.assert_allclose(greedy, 2.0 * np.tanh(clean_mean), rtol=1e-5, atol=1e-5)


# learn_suite's MountainCarContinuous-v0 settings (bench/learn_suite.py), 64x64 networks as there.
SPARSE_SAC = SACConfig(
    hidden_sizes=(64, 64),
    q_lr=3e-4,
    policy_lr=3e-4,
    gamma=0.9999,
    tau=0.01,
    buffer_size=50_000,
    batch_size=512,
    learning_starts=1,
    utd_ratio=0.25,
    policy_frequency=1,
    autotune=False,
    alpha=0.1,
    exploration="gsde",
)


@pytest.mark.e2e
def test_gsde_reaches_the_sparse_reward_of_mountain_car_that_white_noise_never_finds(tmp_path):
    """MountainCarContinuous-v0 pays +100 at the flag, -0.1 a^2 each step; white noise each
    step (exploration gaussian) never got there in 45k env steps (issue #35). gSDE's noise,
    redrawn every 32 env steps (a version per 32-step message, waited for), gets there in
    its first episodes: the car's best training episode (at most 6 of them) is over 50."""
    settings = gateway_settings(
        tmp_path,
        algorithm="sac",
        observation_space=BoxSpace(shape=(2,)),
        action_space=BoxSpace(shape=(1,), low=-1.0, high=1.0),
        env_steps_per_sample=32,
        max_training_backlog=0,
        sac=SPARSE_SAC,
    )
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=120) as client:
        result = run(client, "MountainCarContinuous-v0", target_return=None, max_env_steps=6_000, seed=0)
    assert max(result.recent_returns) > 50, list(result.recent_returns)  # without the flag: at most 0


def lag_correlation(series: np.ndarray, lag: int) -> float:
    """The correlation of a series [steps, ...] with itself `lag` steps later, over every column."""
    return float(np.corrcoef(series[:-lag].ravel(), series[lag:].ravel())[0, 1])


def test_pink_noise_draws_are_standard_normal_each_step_and_drift_over_many():
    """rllink.action_dists.PinkNoise: each draw N(0, 1), as white noise's, so the sample's
    distribution is the policy's; neighbouring draws close, draws 64 steps apart still alike."""
    rng = np.random.default_rng(0)
    processes = PinkNoise.start(rng, 4, 2)
    draws = np.stack([PinkNoise.step(processes, rng) for _ in range(50_000)])  # [steps, episodes, dims]
    assert abs(draws.mean()) < 0.05 and 0.95 < draws.std() < 1.05
    assert lag_correlation(draws, 1) > 0.75 and lag_correlation(draws, 64) > 0.25
    episodes_apart = np.corrcoef(draws[:, 0, 0], draws[:, 1, 0])[0, 1]
    assert abs(episodes_apart) < 0.1  # each episode's processes are its own


@pytest.mark.parametrize("exploration, noise", [("pink", "pink"), ("gaussian", "white")])
def test_a_thin_clients_exploring_actions_drift_with_pink_noise_where_sac_explores_so(tmp_path, exploration, noise):
    """SET_CONFIG's action_noise says how a module's clients sample; the gateway samples a thin
    client's episodes that way itself: with pink noise (the default), an episode's pre-squash
    noise drifts from step to step and two episodes' do not move together; with white, neither."""
    sac = FAST_SAC.model_copy(update={"exploration": exploration, "learning_starts": 1_000_000})  # one version throughout
    obs = [0.1, -0.2, 0.3]
    with running_gateway(pendulum_settings(tmp_path, sac=sac, evaluation_interval=0)) as gateway, \
            gateway.client("tcp", timeout=60) as client:
        config = client.request({"type": "GET_CONFIG"})
        ids = [client.request({"type": "START_EPISODE"})["episode_id"] for _ in range(2)]
        actions = np.array([
            client.request({"type": "GET_ACTION", "batch": [{"episode_id": i, "obs": obs} for i in ids]})["actions"]
            for _ in range(400)
        ])[:, :, 0]  # [steps, episodes]
        served = httpx.get(f"{gateway.base_url}/api/model.onnx").content
        (listed,) = httpx.get(f"{gateway.base_url}/api/policies").json()
    assert config["action_noise"] == config["policies"]["default_policy"]["action_noise"] == listed["action_noise"] == noise
    mean, log_std = mean_and_log_std(served, np.array([obs], np.float32))
    unit = (np.arctanh(np.clip(actions / 2.0, -0.999999, 0.999999)) - mean[0, 0]) / np.exp(log_std[0, 0])
    assert 0.7 < unit.std() < 1.3  # each step's draw is N(0, 1) either way
    if noise == "pink":
        assert lag_correlation(unit, 1) > 0.6, lag_correlation(unit, 1)
        assert abs(np.corrcoef(unit[:, 0], unit[:, 1])[0, 1]) < 0.3
    else:
        assert abs(lag_correlation(unit, 1)) < 0.2, lag_correlation(unit, 1)


@pytest.mark.e2e
def test_sacs_default_pink_noise_finds_mountain_cars_flag_in_its_first_episodes(tmp_path):
    """MountainCarContinuous-v0 pays +100 at the flag; white noise never finds it (the test
    above). SAC's defaults, pink noise in the reference client, get there in the first few
    episodes: its best training episode of at most 4 is over 50."""
    settings = gateway_settings(
        tmp_path,
        algorithm="sac",
        observation_space=BoxSpace(shape=(2,)),
        action_space=BoxSpace(shape=(1,), low=-1.0, high=1.0),
        sac=SACConfig(hidden_sizes=(64, 64)),  # the defaults, smaller networks: the test is about exploring
    )
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=120) as client:
        result = run(client, "MountainCarContinuous-v0", target_return=None, max_env_steps=4_000, seed=0, evaluation_interval=0)
    assert max(result.recent_returns) > 50, list(result.recent_returns)  # without the flag: at most 0
