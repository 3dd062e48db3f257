"""RLlink over real sockets: a running uvicorn server and the TCP bridge, both transports."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time

import onnx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from rllink.framing import Encoding, encode_frame

from .helpers import (
    PING,
    PONG,
    TcpPeer,
    chunk,
    gateway_settings,
    recv_exactly,
    running_gateway,
    tcp_socket,
    wait_until,
    waiting_transports,
)

TRANSPORTS = ["tcp", "ws"]


# -- The documented frames -------------------------------------------------------


def test_docs_ping_frame_over_tcp_gets_the_docs_pong_frame(gateway):
    with tcp_socket(gateway) as sock:
        sock.sendall(PING)
        assert recv_exactly(sock, len(PONG)) == PONG


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_docs_ping_over_websocket_is_answered_in_the_same_opcode(gateway, binary):
    with connect(gateway.ws_url) as ws:
        ws.send(PING if binary else PING.decode())
        reply = ws.recv(timeout=10)
        assert reply == (PONG if binary else PONG.decode())


def test_tcp_frames_split_byte_by_byte_and_coalesced(gateway):
    with tcp_socket(gateway) as sock:
        for byte in PING:
            sock.send(bytes([byte]))
            time.sleep(0.001)  # each byte in its own segment, most likely; the reply is the same either way
        assert recv_exactly(sock, len(PONG)) == PONG
        peer = TcpPeer(sock)
        peer.send(PING * 3 + b'00000022{"type": "GET_CONFIG"}' + PING[:5])
        frames = peer.receive_many(4)
        assert [f["type"] for f in frames] == ["PONG", "PONG", "PONG", "SET_CONFIG"]
        peer.send(PING[5:])
        assert peer.receive() == {"type": "PONG"}


def test_websocket_frames_split_across_messages_and_coalesced(gateway):
    with connect(gateway.ws_url) as ws:
        for i in range(len(PING)):
            ws.send(PING[i : i + 1])
        assert ws.recv(timeout=10) == PONG
        ws.send((PING * 3).decode())
        assert [ws.recv(timeout=10) for _ in range(3)] == [PONG.decode()] * 3


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("encoding", list(Encoding), ids=lambda e: e.value)
def test_every_message_type_in_both_encodings(gateway, transport, encoding):
    with gateway.client(transport, encoding=encoding, binary=True) as client:
        assert client.request({"type": "PING"}) == {"type": "PONG"}

        config = client.request({"type": "GET_CONFIG"})
        assert config["type"] == "SET_CONFIG"
        assert config["env_steps_per_sample"] == gateway.settings.env_steps_per_sample
        assert config["force_on_policy"] is True
        assert config["observation_space"] == {"type": "box", "shape": [4], "dtype": "float32"}
        assert config["action_space"] == {"type": "discrete", "n": 2}
        assert config["onnx_input_name"] == "obs"

        state = client.request({"type": "GET_STATE"})
        assert state["type"] == "SET_STATE"
        model = onnx.load_from_string(gzip.decompress(base64.b64decode(state["onnx_file"])))
        assert [i.name for i in model.graph.input] == ["obs"]
        first_version = state["weights_seq_no"]

        client.send({"type": "EPISODES", "episodes": [chunk(5)], "env_steps": 5})
        assert client.request({"type": "PING"}) == {"type": "PONG"}, "EPISODES must get no reply"

        trained = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(8)], "timesteps": 8})
        assert trained["type"] == "SET_STATE"
        assert trained["weights_seq_no"] == first_version + 1


# -- Errors ----------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "bad_json"),
        (b"\x81\xa4type", "bad_msgpack"),
        (b'{"episodes": []}', "unknown_type"),
        (b'{"type": "SET_STATE", "onnx_file": "", "weights_seq_no": 1}', "unknown_type"),
        (b'{"type": "EPISODES", "episodes": [{"obs": [[0, 0, 0, 0]], "actions": [0], "rewards": [1]}]}',
         "invalid_message"),
    ],
)
def test_invalid_frames_get_an_error_and_the_connection_stays_open(gateway, transport, body, code):
    with gateway.client(transport, binary=True) as client:
        client.send_raw(encode_frame(body))
        error = client.receive()
        assert error["type"] == "ERROR" and error["code"] == code and error["message"]
        assert client.request({"type": "PING"}) == {"type": "PONG"}


@pytest.mark.parametrize(("header", "code"), [(b"12ab5678", "bad_header"), (b"99999999", "frame_too_large")])
def test_corrupt_or_oversized_header_gets_an_error_then_tcp_closes(gateway, header, code):
    with TcpPeer.connect(gateway, timeout_s=10) as peer:
        peer.send(PING + header + b"{}")
        frames = peer.receive_many(2)
        assert frames[0] == {"type": "PONG"}
        assert frames[1]["type"] == "ERROR" and frames[1]["code"] == code
        assert peer.is_closed(), "the gateway should have closed the connection"


def test_corrupt_header_over_websocket_gets_an_error_then_closes(gateway):
    with connect(gateway.ws_url) as ws:
        ws.send(b"xxxxxxxx")
        error = json.loads(ws.recv(timeout=10)[8:])
        assert error["code"] == "bad_header"
        # The gateway closes the WebSocket: recv raises ConnectionClosed (a timeout, had
        # the gateway kept the connection open, is a TimeoutError and fails the test).
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)


def test_a_stalled_half_frame_blocks_no_one_else(gateway):
    with tcp_socket(gateway) as stalled, gateway.client("ws") as other:
        stalled.sendall(PING[:11])
        assert other.request({"type": "PING"}) == {"type": "PONG"}
        stalled.sendall(PING[11:])
        assert recv_exactly(stalled, len(PONG)) == PONG


# -- Many clients ----------------------------------------------------------------


def test_fifty_clients_across_both_transports_train_one_policy(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=50 * 10, barrier_timeout_s=30)
    with running_gateway(settings) as gateway:
        results: dict[int, list] = {}
        errors: list[BaseException] = []
        ready = threading.Barrier(50)

        def run(index: int) -> None:
            try:
                with gateway.client(TRANSPORTS[index % 2], timeout=60) as client:
                    # GET_CONFIG, as every RLlink client starts; its reply proves the
                    # gateway has registered this client, and the barrier now waits for it.
                    assert client.request({"type": "GET_CONFIG"})["type"] == "SET_CONFIG"
                    ready.wait(timeout=30)
                    first = client.request({"type": "GET_STATE"})["weights_seq_no"]
                    reply = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(10)]})
                    results[index] = [first, reply["weights_seq_no"]]
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors[:3]
        assert len(results) == 50
        # All 500 steps fill exactly one train batch: everyone gets the same new version.
        assert {tuple(v) for v in results.values()} == {(0, 1)}
        clients = gateway.traffic.connections_total
        assert clients["tcp"] == 25 and clients["ws"] == 25


def test_a_client_leaving_while_waiting_for_state_harms_nobody(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=100_000, barrier_timeout_s=60)
    with running_gateway(settings) as gateway:
        leaver = gateway.client("tcp")
        stayer = gateway.client("ws")
        for client in (leaver, stayer):  # both sample: the barrier waits for both
            assert client.request({"type": "GET_CONFIG"})["type"] == "SET_CONFIG"
        leaver.send({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(10)]})
        # The leaver now waits: the barrier needs the stayer too.
        wait_until(lambda: waiting_transports(gateway) == ["tcp"], what="the leaver to wait")
        leaver.close()
        reply = stayer.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(10)]})
        assert reply["type"] == "SET_STATE" and reply["weights_seq_no"] == 1
        stayer.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_replies_keep_request_order_while_one_waits_for_training(tmp_path, transport):
    """PING, GET_STATE and EPISODES are answered at once when nothing is pending, but not
    ahead of an EPISODES_AND_GET_STATE still waiting for its training step."""
    settings = gateway_settings(tmp_path, train_batch_size=100_000, barrier_timeout_s=60)
    with running_gateway(settings) as gateway:
        waiter, other = gateway.client(transport), gateway.client("tcp")
        for client in (waiter, other):  # both sample: the barrier waits for both
            assert client.request({"type": "GET_CONFIG"})["type"] == "SET_CONFIG"
        assert waiter.request({"type": "PING"}) == {"type": "PONG"}  # nothing pending: at once
        queued = [{"type": "PING"}, {"type": "EPISODES", "episodes": [chunk(5)]}, {"type": "GET_STATE"}]
        trade = {"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(10)]}
        wire = [waiter.encode(message) for message in [trade, *queued]]
        expected_bytes = gateway.traffic.bytes_received + sum(map(len, wire))
        for data in wire:
            waiter.send_raw(data)
        # Once the gateway has read every byte, the three requests behind the waiting one are queued.
        wait_until(lambda: gateway.traffic.bytes_received >= expected_bytes, what="the requests to arrive")
        wait_until(lambda: waiting_transports(gateway) == [transport], what="the waiter to wait")
        assert gateway.service.metrics.num_env_steps_sampled_lifetime == 10  # EPISODES is held back
        assert other.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(10)]})["weights_seq_no"] == 1
        replies = [waiter.receive() for _ in range(3)]
        assert [reply["type"] for reply in replies] == ["SET_STATE", "PONG", "SET_STATE"]
        assert replies[0]["weights_seq_no"] == replies[2]["weights_seq_no"] == 1
        assert gateway.service.metrics.num_env_steps_sampled_lifetime == 25
        waiter.close()
        other.close()


@pytest.mark.parametrize("deflate", [True, False])
def test_websocket_compression_follows_the_setting(tmp_path, deflate):
    with running_gateway(gateway_settings(tmp_path, ws_per_message_deflate=deflate)) as gateway:
        # The websockets client offers permessage-deflate, as browsers do.
        with connect(gateway.ws_url) as ws:
            extensions = ws.response.headers.get("Sec-WebSocket-Extensions", "")
            ws.send(encode_frame(b'{"type": "PING"}'))
            assert ws.recv(timeout=10) == encode_frame(b'{"type": "PONG"}')
    assert ("permessage-deflate" in extensions) is deflate
