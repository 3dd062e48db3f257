"""A game may declare its spaces in GET_CONFIG (RLLINK.md, "Spaces the game declares"):
what fits gets SET_CONFIG, a mismatch an ERROR naming both spaces, before any step."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .helpers import gateway_settings, running_gateway

PENDULUM = {"observation_space": {"type": "box", "shape": [3]}, "action_space": {"type": "box", "shape": [1], "low": -2, "high": 2}}
MULTI = {
    "policies": {
        "cart": {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},
        "arm": PENDULUM,
    },
    "policy_mapping": {"cart_*": "cart", "arm_*": "arm"},
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with running_gateway(gateway_settings(tmp_path_factory.mktemp("declared"), **MULTI)) as gateway:
        yield gateway


def get_config(gateway, **declared):
    with gateway.client("tcp") as client:
        return client.request({"type": "GET_CONFIG", **declared})


@pytest.mark.parametrize(
    "declared",
    [
        {},  # declaring nothing: today's behaviour
        {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},  # the default module
        {"observation_space": {"shape": [4]}},  # a box need not say so; a field left out is not checked
        {"policies": {"arm": PENDULUM}},
        {"policies": {"cart": {"action_space": {"type": "discrete", "n": 2}}, "arm": {"observation_space": {"shape": [3]}}}},
    ],
)
def test_spaces_that_fit_get_set_config(gateway, declared):
    assert get_config(gateway, **declared)["type"] == "SET_CONFIG"


@pytest.mark.parametrize(
    ("declared", "says"),
    [
        ({"observation_space": {"type": "box", "shape": [5]}}, '[5]'),
        ({"action_space": {"type": "discrete", "n": 3}}, '"n": 3'),
        ({"policies": {"arm": {"action_space": {"type": "box", "shape": [1], "low": -1, "high": 1}}}}, '"low": -1.0'),
        ({"policies": {"arm": {"action_space": {"type": "discrete", "n": 2}}}}, '"type": "discrete"'),
        ({"policies": {"arm": {"observation_space": {"type": "box", "shape": [3], "dtype": "uint8"}}}}, None),  # invalid itself
        ({"policies": {"leg": PENDULUM}}, "does not have; its modules: cart, arm"),
    ],
)
def test_a_mismatch_gets_an_error_naming_both_spaces(gateway, declared, says):
    reply = get_config(gateway, **declared)
    assert reply["type"] == "ERROR" and reply["code"] == "invalid_message", reply
    if says is not None:
        assert says in reply["message"], reply["message"]
    if "does not have" not in (says or "") and says is not None:
        assert "the gateway's is" in reply["message"] and reply["details"]["gateway"] != reply["details"]["declared"]


def test_the_connection_stays_open_after_a_mismatch(gateway):
    with gateway.client("tcp") as client:
        refused = client.request({"type": "GET_CONFIG", "action_space": {"type": "discrete", "n": 9}})
        fitting = client.request({"type": "GET_CONFIG"})
    assert refused["type"] == "ERROR" and fitting["type"] == "SET_CONFIG"


def test_the_reference_client_names_the_mismatch_and_stops(tmp_path):
    """Pendulum's client against a CartPole gateway: one line with both spaces, exit 2, no traceback."""
    with running_gateway(gateway_settings(tmp_path)) as cartpole:
        done = subprocess.run(
            [sys.executable, "-m", "rllink_clients.cartpole", "--env", "Pendulum-v1", "--port", str(cartpole.tcp_port)],
            capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert "cannot train Pendulum-v1 through this gateway" in done.stderr and '"shape": [3]' in done.stderr
    assert "Traceback" not in done.stderr
