"""The REST API: in-process (the `rest` fixture) where a test only calls REST routes;
with httpx against a running gateway where real clients use RLlink meanwhile."""

from __future__ import annotations

import socket

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from .helpers import chunk, in_process


@pytest.fixture
def http(gateway):
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        yield client


def train_once(gateway, transport: str = "tcp", steps: int = 10) -> dict:
    with gateway.client(transport) as client:
        return client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(steps, reward=2.0)]})


def test_health(rest):
    body = rest.get("/api/health").json()
    assert body["status"] == "ok" and body["weights_seq_no"] == 0 and body["uptime_s"] >= 0
    head = rest.head("/api/health")  # for probes that check with HEAD
    assert head.status_code == 200 and head.content == b"" and head.headers["content-type"] == "application/json"


def test_metrics_follow_training_and_traffic(gateway, http):
    before = http.get("/api/metrics").json()
    assert before["num_training_steps"] == 0 and before["episode_return_mean"] is None
    with gateway.client("ws") as watcher:  # stays connected while we look
        assert watcher.request({"type": "PING"}) == {"type": "PONG"}
        train_once(gateway, steps=10)
        watcher.send_raw(b"00000002[]")
        assert watcher.receive()["code"] == "bad_json"
        after = http.get("/api/metrics").json()
    assert after["num_training_steps"] == 1 and after["weights_seq_no"] == 1
    assert after["num_env_steps_sampled_lifetime"] == 10 and after["num_episodes_lifetime"] == 1
    assert after["episode_return_mean"] == after["episode_return_min"] == after["episode_return_max"] == 20.0
    assert after["episode_len_mean"] == 10
    assert after["learner"]["entropy"] > 0 and after["learner"]["policy_loss"] is not None
    assert after["clients"] == {"tcp": 0, "ws": 1}
    assert after["errors"] == {"bad_json": 1}
    assert after["frames_received"]["EPISODES_AND_GET_STATE"] == 1
    assert after["env_steps_per_s"] > 0


def test_prometheus_metrics(gateway, http):
    train_once(gateway)
    response = http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "rllink_num_training_steps_total 1.0" in text
    assert "rllink_weights_seq_no 1.0" in text
    assert 'rllink_frames_received_total{type="EPISODES_AND_GET_STATE"} 1.0' in text
    assert 'rllink_learner_stat{stat="entropy"}' in text


def test_clients_lists_connected_sessions(gateway, http):
    with gateway.client("tcp") as tcp, gateway.client("ws") as ws:
        tcp.send({"type": "EPISODES", "episodes": [chunk(7)]})
        assert tcp.request({"type": "PING"}) == {"type": "PONG"}
        assert ws.request({"type": "PING"}) == {"type": "PONG"}
        clients = http.get("/api/clients").json()
    assert sorted(c["transport"] for c in clients) == ["tcp", "ws"]
    tcp_client = next(c for c in clients if c["transport"] == "tcp")
    assert tcp_client["env_steps_sent"] == 7 and tcp_client["waiting"] is False
    assert tcp_client["peer"].startswith("127.0.0.1:")


def test_config_shows_settings_but_never_the_token(tmp_path):
    with in_process(tmp_path, auth_token="hunter2", max_frame_bytes=123_456) as rest:
        body = rest.get("/api/config", headers={"Authorization": "Bearer hunter2"}).json()
    assert body["observation_space"] == {"type": "box", "shape": [4], "low": None, "high": None, "dtype": "float32"}
    assert body["action_space"] == {"type": "discrete", "n": 2}
    assert body["ppo"]["learning_rate"] > 0
    assert body["limits"]["max_frame_bytes"] == 123_456
    assert body["auth_enabled"] is True
    assert "hunter2" not in str(body)


def test_patch_config_changes_hyperparameters_live(gateway, http):
    response = http.patch("/api/config", json={"ppo": {"learning_rate": 0.0123, "ent_coef": 0.02}})
    assert response.status_code == 200, response.text
    assert response.json()["ppo"]["learning_rate"] == 0.0123
    assert http.get("/api/config").json()["ppo"]["ent_coef"] == 0.02
    train_once(gateway)  # the next training step uses them
    assert gateway.service.status().default_config.learning_rate == 0.0123


@pytest.mark.parametrize(
    "body",
    [
        {"ppo": {"learning_rate": -1}},
        {"ppo": {"learning_rate": "fast"}},
        {"ppo": {"hidden_sizes": [8]}},  # not safe to change live
        {"ppo": {"gamma": 2}},
        {"ppo": {"gamma": -0.1}},
        {"ppo": {"gae_lambda": False}},  # not a number, though pydantic would take it as 0
        {"ppo": {"learning_rate": "0.1"}},
        {"ppo": {"update_epochs": 2.5}},
        {"train_batch_size": 10},
        {"policies": {"default_policy": {"ppo": {"gamma": 2}}}},
    ],
)
def test_patch_config_refuses_bad_bodies_with_422(rest, body):
    before = rest.get("/api/config").json()
    response = rest.patch("/api/config", json=body)
    assert response.status_code == 422
    assert response.json()["detail"]
    assert rest.get("/api/config").json() == before


def test_patch_config_takes_a_discount_of_0(rest):
    """A quiz's answers are paid at once: gamma 0 is a valid discount (docs/training.md, Memory)."""
    response = rest.patch("/api/config", json={"ppo": {"gamma": 0}})
    assert response.status_code == 200, response.text
    assert response.json()["ppo"]["gamma"] == 0 and rest.get("/api/config").json()["ppo"]["gamma"] == 0


def test_patch_config_null_leaves_a_value_but_turns_target_kl_off(rest):
    assert rest.patch("/api/config", json={"ppo": {"target_kl": 0.05, "update_epochs": 3.0}}).status_code == 200
    response = rest.patch("/api/config", json={"ppo": {"learning_rate": None, "target_kl": None}})
    assert response.status_code == 200, response.text
    ppo = response.json()["ppo"]
    assert ppo["learning_rate"] > 0 and ppo["target_kl"] is None and ppo["update_epochs"] == 3


def test_a_wrong_method_gets_405_naming_every_allowed_one(rest):
    response = rest.request("OPTIONS", "/api/config")
    assert response.status_code == 405 and response.headers["allow"] == "GET, PATCH"
    assert rest.delete("/api/model.onnx").headers["allow"] == "GET, HEAD"


def test_model_download_with_etag_and_304(gateway, http):
    first = http.get("/api/model.onnx")
    assert first.status_code == 200 and first.headers["x-weights-seq-no"] == "0"
    assert first.headers["etag"] == '"0"'
    model = onnx.load_from_string(first.content)
    assert model.graph.input[0].name == "obs"
    assert http.get("/api/model.onnx", headers={"If-None-Match": '"0"'}).status_code == 304

    train_once(gateway)
    second = http.get("/api/model.onnx", headers={"If-None-Match": '"0"'})
    assert second.status_code == 200 and second.headers["etag"] == '"1"'
    assert http.get("/api/model.onnx?version=0").content == first.content
    missing = http.get("/api/model.onnx?version=99")
    assert missing.status_code == 404 and "kept versions" in missing.json()["detail"]
    assert http.get("/api/model.onnx?version=-1").status_code == 422

    session = ort.InferenceSession(second.content, providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"obs": np.zeros((3, 4), np.float32)})
    assert logits.shape == (3, 2)


def test_head_of_the_model_has_the_headers_of_get_and_no_body(rest):
    for path in ("/api/model.onnx", "/api/policies/default_policy/model.onnx"):
        got, head = rest.get(path), rest.head(path)
        assert head.status_code == 200 and head.content == b"", path
        for name in ("etag", "x-weights-seq-no", "content-type", "content-disposition", "cache-control"):
            assert head.headers[name] == got.headers[name], (path, name)
        assert head.headers["etag"] == '"0"' and int(head.headers["content-length"]) == len(got.content) > 0
        assert rest.head(path, headers={"If-None-Match": '"0"'}).status_code == 304
        assert rest.head(path, params={"version": 99}).status_code == 404
        assert rest.head(path, params={"version": -1}).status_code == 422
    assert rest.head("/api/policies/nobody/model.onnx").status_code == 404


def test_head_of_the_model_from_a_real_server_sends_no_body(gateway, http):
    """Over a socket: the HEAD answer ends with its headers, the next answer on the
    connection follows at once (a body, even one the server was not meant to send,
    would come in between)."""
    size = len(http.get("/api/model.onnx").content)
    with socket.create_connection(("127.0.0.1", gateway.http_port), timeout=30) as sock:
        sock.sendall(
            b"HEAD /api/model.onnx HTTP/1.1\r\nHost: gateway\r\n\r\n"
            b"GET /api/health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n"
        )
        received = b""
        while data := sock.recv(65536):
            received += data
    head, rest_of_it = received.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}
    assert lines[0] == "HTTP/1.1 200 OK", lines
    assert headers["etag"] == '"0"' and headers["x-weights-seq-no"] == "0" and headers["content-length"] == str(size)
    assert rest_of_it.startswith(b"HTTP/1.1 200 OK\r\n"), rest_of_it[:200]  # the health check's answer, no model bytes before it


def test_rest_needs_the_token_when_auth_is_on(tmp_path):
    with in_process(tmp_path, auth_token="hunter2") as rest:
        denied = rest.get("/api/metrics")
        assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
        assert rest.get("/api/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert rest.get("/api/metrics", headers={"Authorization": "Bearer hunter2"}).status_code == 200
        assert rest.get("/api/model.onnx?token=hunter2").status_code == 200
        assert rest.head("/api/model.onnx").status_code == 401
        assert rest.head("/api/model.onnx?token=hunter2").status_code == 200
        assert rest.get("/metrics", headers={"Authorization": "Bearer hunter2"}).status_code == 200
        assert rest.get("/metrics").status_code == 401
        assert rest.get("/api/health").status_code == 200  # liveness stays open


def test_cors_is_explicit(tmp_path):
    origin = "http://game.example"
    with in_process(tmp_path, cors_origins=[origin]) as rest:
        allowed = rest.get("/api/metrics", headers={"Origin": origin})
        other = rest.get("/api/metrics", headers={"Origin": "http://evil.example"})
        preflight = rest.options(
            "/api/model.onnx",
            headers={"Origin": origin, "Access-Control-Request-Method": "HEAD", "Access-Control-Request-Headers": "authorization"},
        )
    assert allowed.headers["access-control-allow-origin"] == origin
    assert "access-control-allow-origin" not in other.headers
    # A game page may check the model's version with HEAD before downloading it.
    assert preflight.status_code == 200 and "HEAD" in preflight.headers["access-control-allow-methods"]


def test_openapi_describes_every_route(rest):
    spec = rest.get("/openapi.json").json()
    paths = spec["paths"]
    for path in ["/api/health", "/api/metrics", "/api/config", "/api/clients", "/api/model.onnx", "/metrics"]:
        assert path in paths, path
    assert "patch" in paths["/api/config"]
    metrics_schema = paths["/api/metrics"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert metrics_schema["$ref"].endswith("/Metrics")
