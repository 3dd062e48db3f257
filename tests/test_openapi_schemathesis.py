"""Schemathesis against the OpenAPI schema of a real running gateway: generated requests
(valid and invalid) to every REST operation never get a 5xx, and every response conforms
to the schema (status code, content type, headers, body)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from .conftest import RunningGateway, gateway_settings, running_gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    settings_ = gateway_settings(Path(tmp_path_factory.mktemp("schemathesis")))
    with running_gateway(settings_) as running:
        with running.client("tcp") as client:  # one trained version, so the metrics hold numbers
            reply = client.request(
                {
                    "type": "EPISODES_AND_GET_STATE",
                    "episodes": [{"obs": [[0.0] * 4] * 4, "actions": [0, 1, 0], "rewards": [1.0] * 3, "terminated": True}],
                }
            )
            assert reply["weights_seq_no"] == 1
        yield running


@pytest.fixture(scope="module")
def api_schema(gateway: RunningGateway):
    return schemathesis.openapi.from_url(f"{gateway.base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_within_its_schema(case, gateway):
    case.call_and_validate(base_url=gateway.base_url, timeout=30)
