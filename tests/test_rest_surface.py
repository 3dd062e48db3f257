"""What the HTTP side shows, in-process: which routes auth guards, /docs offline, /metrics complete."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.http.rest_models import Metrics

from .helpers import chunk, frame, in_process

TOKEN = "s3cret-token"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with in_process(tmp_path, auth_token=TOKEN) as client:
        yield client


@pytest.mark.parametrize("path", ["/api/metrics", "/metrics", "/api/config", "/api/clients", "/api/model.onnx"])
def test_data_routes_need_the_token_when_auth_is_on(client, path):
    refused = client.get(path)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert client.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get(path, params={"token": TOKEN}).status_code == 200
    assert client.get(path, params={"token": "wrong"}).status_code == 401


@pytest.mark.parametrize(
    "path", ["/api/health", "/", "/docs", "/openapi.json", "/static/rllink.js", "/vendor/swagger-ui/swagger-ui.css"]
)
def test_code_and_descriptions_stay_open_with_auth_on(client, path):
    """They hold the project's own code and the API's description, never data (README: Security)."""
    assert client.get(path).status_code == 200


def test_openapi_declares_both_token_schemes_on_the_guarded_routes(client):
    spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerToken"] == {"type": "http", "scheme": "bearer", "description": schemes["bearerToken"]["description"]}
    assert schemes["tokenQuery"]["in"] == "query" and schemes["tokenQuery"]["name"] == "token"
    assert {"bearerToken": []} in spec["paths"]["/api/metrics"]["get"]["security"]
    assert "security" not in spec["paths"]["/api/health"]["get"]


def test_docs_page_loads_only_local_files(client):
    page = client.get("/docs").text
    urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", page)
    assert "/openapi.json" in urls and any(url.endswith("swagger-ui-bundle.js") for url in urls)
    for url in urls:
        assert url.startswith("/"), f"/docs loads {url} from elsewhere"
        assert client.get(url).status_code == 200, url


def test_prometheus_page_has_every_metrics_field(client):
    with client.websocket_connect(f"/rllink?token={TOKEN}") as ws:  # one trained episode, one evaluated: no field is empty
        ws.send_text(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(5), chunk(4, evaluation=True)]}).decode())
        assert b"SET_STATE" in ws.receive_text().encode()
    metrics = client.get("/api/metrics", params={"token": TOKEN}).json()
    assert all(value is not None for value in metrics.values()), metrics
    text = client.get("/metrics", params={"token": TOKEN}).text
    names = {name.removesuffix("_total") for name in re.findall(r"^# TYPE rllink_(\w+) ", text, re.MULTILINE)}
    if "learner_stat" in names:  # the learner's statistics: one family, labelled by stat
        names.add("learner")
    if "policy_episode_return_mean" in names:  # per module: families labelled by module_id
        names.add("policies")
    if "agent_episode_return_mean" in names:  # per agent: labelled by agent_id
        names.add("agents")
    if "serving_actions_served" in names:  # server-side inference: rllink_serving_*
        names.add("serving")
    assert [field for field in Metrics.model_fields if field.removesuffix("_total") not in names] == []
