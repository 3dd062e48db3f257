"""Several modules in one gateway, over real sockets: what clients are told, what they get,
how chunks find their module, what is refused, REST per module, checkpoints per module."""

from __future__ import annotations

import asyncio
import logging

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from app.gateway import Gateway, StartupError
from app.settings.config import Settings
from app.training.onnx_export import load_payload, tempered_policy

from .helpers import TcpPeer, WsPeer, chunk, frame, gateway_settings, running_gateway, wait_until

CARTPOLE = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}}
PENDULUM = {
    "observation_space": {"type": "box", "shape": [3]},
    "action_space": {"type": "box", "shape": [1], "low": -2.0, "high": 2.0},
}
DUEL = {
    "observation_space": {"type": "box", "shape": [2]},
    "action_space": {"type": "discrete", "n": 3},
    "self_play": {"snapshot_every": 1, "window": 3, "play_against_latest_ratio": 0.0},
}
POLICIES = {"cart": CARTPOLE, "pend": {**PENDULUM, "ppo": {"learning_rate": 0.001}}, "duel": DUEL}
MAPPING = {"cart_*": "cart", "pend*": "pend", "duel_a": "duel", "duel_b": "duel_opponent"}


def multi_settings(tmp_path, policies=POLICIES, mapping=MAPPING, **overrides) -> Settings:
    return gateway_settings(tmp_path, policies=policies, policy_mapping=mapping, **overrides)


def pend_chunk(steps: int = 4, **fields) -> dict:
    rng = np.random.default_rng(steps)
    return {
        "obs": rng.uniform(-1, 1, (steps + 1, 3)).tolist(),
        "actions": rng.uniform(-2, 2, (steps, 1)).tolist(),
        "rewards": [-1.0] * steps,
        "is_terminated": False,
        "is_truncated": True,
        **fields,
    }


def duel_chunk(steps: int = 2, **fields) -> dict:
    return {"obs": [[0.0, 1.0]] * (steps + 1), "actions": [1] * steps, "rewards": [0.0] * steps,
            "is_terminated": True, "is_truncated": False, **fields}


def unaccounted(gateway) -> int:
    """Env steps received but neither trained, dropped nor pending (must be 0 when idle)."""
    metrics = gateway.service.metrics
    return (
        metrics.num_env_steps_sampled_lifetime
        - metrics.num_env_steps_trained_lifetime
        - sum(metrics.dropped_env_steps.values())
        - gateway.service.status().pending_env_steps
        - gateway.service.status().training_env_steps
    )


def test_clients_are_told_every_module_and_get_every_model(tmp_path):
    with running_gateway(multi_settings(tmp_path)) as gateway, TcpPeer.connect(gateway) as tcp:
        tcp.send(frame({"type": "GET_CONFIG"}) + frame({"type": "GET_STATE"}))
        config, state = tcp.receive_many(2)
    assert list(config["policies"]) == ["cart", "pend", "duel", "duel_opponent"]
    assert config["policy_mapping"] == MAPPING and config["default_module_id"] == "cart"
    assert config["observation_space"] == config["policies"]["cart"]["observation_space"]  # the default module's
    assert config["action_distribution"] == "categorical"
    assert config["policies"]["pend"]["action_distribution"] == "gaussian"
    assert [m for m, p in config["policies"].items() if not p["trainable"]] == ["duel_opponent"]
    assert set(state["onnx_files"]) == set(config["policies"])
    assert state["onnx_file"] == state["onnx_files"]["cart"]
    for module_id, description in config["policies"].items():
        model = load_payload(state["onnx_files"][module_id])
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        obs = np.zeros((5, *description["observation_space"]["shape"]), np.float32)
        (out,) = session.run(None, {description["onnx_input_name"]: obs})
        width = {"categorical": description["action_space"].get("n"), "gaussian": 2}[description["action_distribution"]]
        assert out.shape == (5, width), module_id


def test_one_step_trains_every_module_with_data_from_both_transports(tmp_path):
    # At the barrier, a module trains from env_steps_per_sample steps: both below will.
    settings = multi_settings(tmp_path, train_batch_size=100_000, env_steps_per_sample=4)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as tcp, WsPeer(gateway) as ws:
        for peer in (tcp, ws):  # both sample: the barrier waits for both
            peer.send(frame({"type": "GET_CONFIG"}))
            peer.receive()
        tcp.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [
            chunk(5, agent_id="cart_0", episode_id="e1"), chunk(7, agent_id="cart_1", episode_id="e1"),
        ]}))
        ws.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [pend_chunk(4, agent_id="pend", episode_id="e2")]}))
        tcp_state, ws_state = tcp.receive(), ws.receive()
        assert tcp_state["weights_seq_no"] == ws_state["weights_seq_no"] == 1  # one step for both
        policies = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies").json()}
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    assert policies["cart"]["num_env_steps_trained_lifetime"] == 12 and policies["cart"]["weights_seq_no"] == 1
    assert policies["pend"]["num_env_steps_trained_lifetime"] == 4 and policies["pend"]["weights_seq_no"] == 1
    assert policies["duel"]["num_env_steps_trained_lifetime"] == 0 and policies["duel"]["weights_seq_no"] == 0
    assert policies["pend"]["ppo"]["learning_rate"] == 0.001 and policies["cart"]["ppo"]["learning_rate"] == 0.003
    assert policies["cart"]["episode_return_mean"] == 6.0 and policies["pend"]["episodes_in_window"] == 1
    assert metrics["agents"]["cart_1"]["episode_return_mean"] == 7.0 and metrics["agents"]["pend"]["episode_return_mean"] == -4.0
    assert metrics["num_env_steps_trained_lifetime"] == 16
    # The duel module was not trained: its model is still version 0's, the others are new.
    assert tcp_state["onnx_files"]["duel"] != tcp_state["onnx_files"]["cart"]
    assert load_payload(tcp_state["onnx_files"]["duel"]).metadata_props[0].value == "0"
    assert load_payload(tcp_state["onnx_files"]["pend"]).metadata_props[0].value == "1"


BAD_CHUNKS = [
    (chunk(3, agent_id="stranger"), "agent 'stranger' maps to no module"),
    (chunk(3, agent_id="pend_1"), "each observation must have shape [3] (module 'pend')"),
    (chunk(3, module_id="nope"), "module_id 'nope' is not a module of this gateway"),
    (duel_chunk(agent_id="duel_b"), "'duel_opponent' is the frozen self-play opponent of 'duel'"),
    (duel_chunk(module_id="duel_opponent"), "frozen self-play opponent"),
    (pend_chunk(module_id="cart"), "each observation must have shape [4] (module 'cart')"),
    (duel_chunk(agent_id="duel_a", is_terminated=False, outcome="win"), "outcome belongs on the chunk that ends"),
]


@pytest.mark.parametrize(("bad", "problem"), BAD_CHUNKS, ids=[p for _, p in BAD_CHUNKS])
def test_bad_multi_agent_input_is_refused_clearly_and_nothing_is_lost(tmp_path, bad, problem):
    settings = multi_settings(tmp_path, train_batch_size=100_000)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as bad_client, TcpPeer.connect(gateway) as good:
        good.send(frame({"type": "EPISODES", "episodes": [chunk(5, agent_id="cart_0")]}))
        bad_client.send(frame({"type": "EPISODES", "episodes": [chunk(2, agent_id="cart_9"), bad]}))
        error = bad_client.receive()
        assert error["type"] == "ERROR" and error["code"] == "invalid_message"
        assert problem in error["message"] and "episodes.1" in error["message"], error["message"]
        bad_client.send(frame({"type": "PING"}))
        assert bad_client.receive()["type"] == "PONG"  # still usable
        wait_until(lambda: gateway.service.status().pending_env_steps == 5, 10, "the good client's steps")
        assert gateway.service.metrics.num_env_steps_sampled_lifetime == 5  # nothing of the refused message
        assert unaccounted(gateway) == 0


def test_each_module_model_is_served_with_etags(tmp_path):
    with running_gateway(multi_settings(tmp_path)) as gateway:
        base = gateway.base_url
        pend = httpx.get(f"{base}/api/policies/pend/model.onnx")
        assert pend.status_code == 200 and pend.headers["etag"] == '"0"'
        assert 'filename="pend-v0.onnx"' in pend.headers["content-disposition"]
        session = ort.InferenceSession(pend.content, providers=["CPUExecutionProvider"])
        assert session.get_inputs()[0].shape == ["batch", 3]
        assert httpx.get(f"{base}/api/policies/pend/model.onnx", headers={"If-None-Match": '"0"'}).status_code == 304
        missing = httpx.get(f"{base}/api/policies/nope/model.onnx")
        assert missing.status_code == 404 and "cart, pend, duel, duel_opponent" in missing.json()["detail"]
        assert httpx.get(f"{base}/api/model.onnx").content == httpx.get(f"{base}/api/policies/cart/model.onnx").content


def test_patch_changes_one_module_or_all_and_refuses_without_changing_anything(tmp_path):
    with running_gateway(multi_settings(tmp_path)) as gateway:
        base = gateway.base_url
        changed = httpx.patch(f"{base}/api/config", json={"policies": {"pend": {"ppo": {"learning_rate": 0.0005}}}})
        assert changed.status_code == 200, changed.text
        policies = changed.json()["policies"]
        assert policies["pend"]["ppo"]["learning_rate"] == 0.0005 and policies["cart"]["ppo"]["learning_rate"] == 0.003
        assert policies["duel_opponent"]["ppo"] is None and policies["duel_opponent"]["opponent_of"] == "duel"
        for bad, status in (
            ({"policies": {"duel_opponent": {"ppo": {"gamma": 0.9}}}}, 422),
            ({"ppo": {"gamma": 0.9}, "policies": {"pend": {"ppo": {"learning_rate": -1}}}}, 422),
            ({"ppo": {"gamma": 0.9}, "policies": {"nope": {"ppo": {"gamma": 0.9}}}}, 404),
        ):
            refused = httpx.patch(f"{base}/api/config", json=bad)
            assert refused.status_code == status, (bad, refused.text)
        config = httpx.get(f"{base}/api/config").json()
        assert [p["ppo"]["gamma"] for p in config["policies"].values() if p["ppo"]] == [0.995, 0.995, 0.5]  # duel: self-play's
        everyone = httpx.patch(f"{base}/api/config", json={"ppo": {"ent_coef": 0.01}}).json()["policies"]
        assert [p["ppo"]["ent_coef"] for p in everyone.values() if p["ppo"]] == [0.01, 0.01, 0.01]
        assert everyone["pend"]["ppo"]["learning_rate"] == 0.0005


def test_patch_of_ppo_or_sac_changes_the_modules_that_train_with_it(tmp_path):
    policies = {"cart": CARTPOLE, "pend": {**PENDULUM, "algorithm": "sac", "sac": {"hidden_sizes": [16]}}}
    with running_gateway(multi_settings(tmp_path, policies=policies, mapping={"cart*": "cart", "pend*": "pend"})) as gateway:
        url = f"{gateway.base_url}/api/config"
        both = httpx.patch(url, json={"ppo": {"gamma": 0.9}, "sac": {"gamma": 0.95}})
        wrong = httpx.patch(url, json={"ppo": {"gamma": 0.8}, "policies": {"pend": {"ppo": {"gamma": 0.8}}}})
        config = httpx.get(url).json()["policies"]
    assert both.status_code == 200, both.text
    assert wrong.status_code == 409 and "'pend' trains with sac, not ppo" in wrong.text
    assert (config["cart"]["ppo"]["gamma"], config["cart"]["sac"]) == (0.9, None)  # and nothing of the refused patch
    assert config["pend"]["sac"]["gamma"] == 0.95


DUEL_ONLY = {"policies": {"duel": DUEL}, "mapping": {"duel_a": "duel", "duel_b": "duel_opponent"}}


def play_duel_games(gateway, games: int) -> None:
    """A training step per game; the learner (duel_a) loses the first and wins the rest."""
    with TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "GET_STATE"}))
        version = peer.receive()["weights_seq_no"]
        for game in range(games):
            outcome = "loss" if game == 0 else "win"
            game_chunks = [duel_chunk(agent_id="duel_a", episode_id=f"g{game}", weights_seq_no=version, outcome=outcome)]
            peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": game_chunks}))
            reply = peer.receive()
            assert reply["type"] == "SET_STATE", reply
            version = reply["weights_seq_no"]


def league_now(gateway) -> tuple[dict, bytes]:
    """/api/policies' self_play of the duel module, and the ONNX its opponent plays now."""
    duel = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies").json()}["duel"]["self_play"]
    return duel, gateway.service.current_state().modules["duel_opponent"].onnx_bytes


def test_a_restart_keeps_the_self_play_league_its_ratings_and_snapshots(tmp_path):
    settings = multi_settings(tmp_path, **DUEL_ONLY)
    with running_gateway(settings) as gateway:
        play_duel_games(gateway, 6)
        before, opponent_before = league_now(gateway)
    league_dir = tmp_path / "checkpoints" / "duel" / "league"
    files = sorted(path.name for path in league_dir.iterdir())

    with running_gateway(settings) as gateway:
        after, opponent_after = league_now(gateway)
    assert before["rated_games"] == 6 and before["elo"] > 1000, before
    assert [s["weights_seq_no"] for s in before["snapshots"]] == [4, 5, 6]  # a snapshot per version, a window of 3
    assert files == ["4.onnx", "5.onnx", "6.onnx", "league.json"]  # older snapshots' files are gone
    assert {k: after[k] for k in ("elo", "rated_games", "snapshots")} == {k: before[k] for k in ("elo", "rated_games", "snapshots")}
    # The opponent of the restarted version is one of the restored snapshots, byte for byte as the
    # league plays it (at the default temperature of a discrete action space, 2); the files are as trained.
    assert before["snapshots"][0]["tempered_elo"] is not None  # rated apart, and restored (the snapshots' equality above)
    snapshot_bytes = {tempered_policy((league_dir / name).read_bytes(), 2.0) for name in files if name.endswith(".onnx")}
    assert opponent_after in snapshot_bytes and opponent_before in snapshot_bytes


@pytest.mark.parametrize("change", ["another input name", "a damaged league", "the policy started afresh"])
def test_a_league_that_no_longer_fits_starts_again_without_its_old_files(tmp_path, change, caplog):
    with running_gateway(multi_settings(tmp_path, **DUEL_ONLY)) as gateway:
        play_duel_games(gateway, 3)
    module_dir = tmp_path / "checkpoints" / "duel"
    overrides = {}
    if change == "another input name":
        overrides["onnx_input_name"] = "observations"
    elif change == "a damaged league":
        (module_dir / "league" / "3.onnx").write_bytes(b"cut sho")
    else:
        (module_dir / "policy.pt").unlink()  # as the gateway advises to start afresh
        overrides["seed"] = 1  # other weights: the old run's snapshot files of the same versions differ
    settings = multi_settings(tmp_path, **DUEL_ONLY, **overrides)
    with caplog.at_level(logging.INFO, logger="app.training"), running_gateway(settings) as gateway:
        league, opponent = league_now(gateway)
        play_duel_games(gateway, 1)
        files = sorted(path.name for path in (module_dir / "league").iterdir())
        latest = gateway.service.current_state().modules["duel"].onnx_bytes
    assert (league["elo"], league["rated_games"]) == (1000.0, 0), league
    version = 0 if change == "the policy started afresh" else 3  # a restored learner keeps its version
    assert [s["weights_seq_no"] for s in league["snapshots"]] == [version]
    assert files == [f"{version}.onnx", f"{version + 1}.onnx", "league.json"]
    assert (module_dir / "league" / f"{version + 1}.onnx").read_bytes() == latest  # this run's, not an old file of that name
    if change != "the policy started afresh":
        assert "not restored, it starts again" in caplog.text


def test_settings_refuse_a_mapping_onto_no_module_and_bad_module_ids(tmp_path):
    with pytest.raises(ValueError, match="maps 'x_\\*' to 'ghost', which is not a module"):
        multi_settings(tmp_path, mapping={"x_*": "ghost"})
    with pytest.raises(ValueError, match="module id '../up'"):
        multi_settings(tmp_path, policies={"../up": CARTPOLE})
    with pytest.raises(ValueError, match="unknown PPO hyperparameters: speed"):
        multi_settings(tmp_path, policies={"a": {**CARTPOLE, "ppo": {"speed": 1}}})


async def _start_and_stop(settings: Settings) -> None:
    gateway = Gateway(settings)
    await gateway.start()
    await gateway.stop()


def test_a_restart_says_which_modules_it_restored_starts_fresh_or_refuses(tmp_path, caplog):
    first = {"cart": CARTPOLE, "pend": PENDULUM, "old": CARTPOLE}
    asyncio.run(_start_and_stop(multi_settings(tmp_path, policies=first, mapping=None, tcp_enabled=False, decode_workers=0)))
    caplog.set_level(logging.INFO, logger="app.training")
    second = {"cart": CARTPOLE, "pend": PENDULUM, "new": CARTPOLE}
    asyncio.run(_start_and_stop(multi_settings(tmp_path, policies=second, mapping=None, tcp_enabled=False, decode_workers=0)))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("checkpoints in")]
    assert "restored cart at weights_seq_no 0, pend at weights_seq_no 0" in line
    assert "training starts fresh for new" in line and "ignored (no such module): old" in line

    third = {"cart": CARTPOLE, "pend": CARTPOLE}  # pend's spaces changed
    with pytest.raises(StartupError) as refused:
        asyncio.run(_start_and_stop(multi_settings(tmp_path, policies=third, mapping=None, tcp_enabled=False, decode_workers=0)))
    message = str(refused.value)
    assert "restored cart at weights_seq_no 0" in message and "refused pend:" in message
    assert "observation_space" in message and "--checkpoint-dir" in message and "\n" not in message


def test_modules_of_every_new_space_train_together_each_with_its_own_model(tmp_path):
    # An image module, a masked MultiDiscrete module and a dict module in one gateway: one
    # step trains all three, and each ONNX takes what its module describes.
    image = {"type": "box", "shape": [2, 6, 6], "dtype": "uint8"}
    policies = {
        "grid": {"observation_space": image, "action_space": {"type": "discrete", "n": 4}},
        "team": {"observation_space": {"type": "box", "shape": [2]}, "action_space": {"type": "multi_discrete", "nvec": [3, 2]},
                 "action_masking": True},
        "mixed": {"observation_space": {"type": "dict", "spaces": {"cam": image, "pos": {"type": "box", "shape": [2]}}},
                  "action_space": {"type": "discrete", "n": 2}},
    }
    rng = np.random.default_rng(0)
    chunks = [
        {"module_id": "grid", "obs": rng.integers(0, 256, (4, 2, 6, 6)).tolist(), "actions": [0, 3, 1],
         "rewards": [1.0] * 3, "is_terminated": True, "is_truncated": False},
        {"module_id": "team", "obs": [[0.5, -0.5]] * 3, "actions": [[2, 0], [0, 1]], "rewards": [1.0] * 2,
         "action_mask": [[0, 0, 1, 1, 1], [1, 1, 1, 0, 1]], "is_terminated": True, "is_truncated": False},
        {"module_id": "mixed", "obs": [rng.integers(0, 256, 72).tolist() + [0.1, 0.2] for _ in range(3)], "actions": [1, 0],
         "rewards": [1.0] * 2, "is_terminated": True, "is_truncated": False},
    ]
    settings = multi_settings(tmp_path, policies=policies, mapping={}, train_batch_size=100_000, env_steps_per_sample=2)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as tcp:  # each module holds enough to train
        tcp.send(frame({"type": "GET_CONFIG"}))
        config = tcp.receive()
        tcp.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": chunks}))
        state = tcp.receive()
        policies_now = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies").json()}
    assert state["type"] == "SET_STATE" and state["weights_seq_no"] == 1, state
    assert {m: p["num_env_steps_trained_lifetime"] for m, p in policies_now.items()} == {"grid": 3, "team": 2, "mixed": 2}
    assert [config["policies"][m].get("onnx_action_mask_input_name") for m in policies] == [None, "action_mask", None]
    assert config["policies"]["team"]["action_distribution"] == "multi_categorical"
    assert policies_now["team"]["action_masking"] is True and policies_now["grid"]["action_masking"] is False
    inputs = {}
    for module_id in policies:
        session = ort.InferenceSession(load_payload(state["onnx_files"][module_id]).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        inputs[module_id] = [(i.name, i.shape[1:]) for i in session.get_inputs()]
    assert inputs == {
        "grid": [("obs", [2, 6, 6])],
        "team": [("obs", [2]), ("action_mask", [5])],
        "mixed": [("obs", [74])],
    }


def test_a_game_whose_two_seats_one_module_played_counts_once_against_itself(tmp_path):
    policies = {"shared": CARTPOLE, "other": CARTPOLE}
    mapping = {"p_*": "shared", "q_*": "other"}
    with running_gateway(multi_settings(tmp_path, policies, mapping)) as gateway, TcpPeer.connect(gateway) as peer:
        games = [  # one shared policy on both seats, then against the other module
            chunk(3, episode_id="g1", agent_id="p_0", outcome="win"), chunk(2, episode_id="g1", agent_id="p_1", outcome="loss"),
            chunk(3, episode_id="g2", agent_id="p_0", outcome="win"), chunk(2, episode_id="g2", agent_id="q_1", outcome="loss"),
            chunk(4, episode_id="g3", agent_id="p_1", outcome="draw"), chunk(4, episode_id="g3", agent_id="q_0", outcome="draw"),
        ]
        peer.send(frame({"type": "EPISODES", "episodes": games}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    shared, other = metrics["policies"]["shared"], metrics["policies"]["other"]
    assert shared["games"] == {"win": 1, "loss": 0, "draw": 1, "against_itself": 1} and shared["win_rate"] == 0.5
    assert other["games"] == {"win": 0, "loss": 1, "draw": 1, "against_itself": 0} and other["win_rate"] == 0.0
