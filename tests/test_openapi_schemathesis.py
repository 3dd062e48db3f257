"""Schemathesis against the OpenAPI schema of a real running gateway with auth on:
generated requests (valid and invalid) to every REST operation never get a 5xx, every
response conforms to the schema (status code, content type, headers, body), and every
operation that declares the token refuses requests without it or with a wrong one.

A real server rather than the app in-process: schemathesis sends its auth probes through
its own transport, which in-process would run a second lifespan of the same app.
(Schemathesis' pytest plugin is not used: it does not run under pytest 9.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from .helpers import RunningGateway, chunk, gateway_settings, running_gateway

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    settings_ = gateway_settings(Path(tmp_path_factory.mktemp("schemathesis")), auth_token=TOKEN)
    with running_gateway(settings_) as running:
        with running.client("tcp") as client:  # one trained version, so the metrics hold numbers
            assert client.request({"type": "PING", "token": TOKEN}) == {"type": "PONG"}
            reply = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(3)]})
            assert reply["weights_seq_no"] == 1, reply
        yield running


def test_every_operation_answers_within_its_schema(gateway):
    schema = schemathesis.openapi.from_url(f"{gateway.base_url}/openapi.json")
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @EXAMPLES
        @given(case=operation.as_strategy())
        def call_and_validate(case) -> None:
            case.call_and_validate(base_url=gateway.base_url, headers=AUTH, timeout=30)

        call_and_validate()
        tested.append(operation.label)
    assert {"GET /api/metrics", "PATCH /api/config", "GET /api/model.onnx"} <= set(tested), tested
