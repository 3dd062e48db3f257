"""Limits, timeouts, auth and TLS over real sockets."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from websockets.sync.client import connect

from rllink.framing import encode_frame
from rllink_clients.rllink_client import RLlinkClient

from .helpers import (
    PING,
    PONG,
    TcpPeer,
    chunk,
    frame,
    gateway_settings,
    read_until_closed,
    recv_exactly,
    running_gateway,
    wait_until,
    waiting_transports,
)

TOKEN = "s3cret-token"


# -- Timeouts and limits ----------------------------------------------------------


def test_a_client_stalling_after_half_a_header_is_dropped_and_counted(tmp_path):
    with running_gateway(gateway_settings(tmp_path, frame_timeout_s=0.5)) as gateway:
        staller = TcpPeer.connect(gateway, timeout_s=20)
        staller.send(b"0000")
        with gateway.client("ws") as other:  # others are served meanwhile
            assert other.request({"type": "PING"}) == {"type": "PONG"}
        error = staller.receive()
        assert error["code"] == "frame_timeout"
        assert staller.is_closed()
        assert gateway.traffic.errors["frame_timeout"] == 1


def test_an_idle_client_is_closed_but_one_awaiting_weights_is_not(tmp_path):
    # Only the barrier trains here (no timeout, no full batch): the waiter's SET_STATE
    # comes once the idler, the other sampling client, is gone.
    settings = gateway_settings(tmp_path, idle_timeout_s=0.5, train_batch_size=10_000, barrier_timeout_s=60)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway, timeout_s=20) as idler:
        idler.send(frame({"type": "GET_CONFIG"}))  # it samples: the barrier waits for it
        assert idler.receive()["type"] == "SET_CONFIG"
        waiter = gateway.client("tcp")
        waiter.send({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(5)]})
        wait_until(lambda: waiting_transports(gateway) == ["tcp"], what="the waiter to wait")
        # The idler's last byte comes after the waiter's: by the time the idler is dropped
        # for idling, the waiter has been silent for longer than the idle timeout too.
        idler.send(PING)
        assert idler.receive() == {"type": "PONG"}
        assert idler.receive()["code"] == "idle_timeout"
        assert idler.is_closed()
        # The idler gone, every sampling client waits: the barrier trains, and the waiter,
        # never dropped, gets its weights.
        assert waiter.receive()["type"] == "SET_STATE"
        assert waiter.request({"type": "PING"}) == {"type": "PONG"}  # still connected
        assert gateway.traffic.errors == {"idle_timeout": 1}
        waiter.close()


def test_connections_over_the_limit_get_an_error_and_others_keep_working(tmp_path):
    settings = gateway_settings(tmp_path, max_connections=4, max_tcp_connections=3, max_ws_connections=3)
    with running_gateway(settings) as gateway:
        tcp = [gateway.client("tcp") for _ in range(3)]
        for client in tcp:
            assert client.request({"type": "PING"}) == {"type": "PONG"}
        extra = gateway.client("tcp")  # the 4th TCP connection: ERROR at once, then closed
        assert extra.receive()["code"] == "too_many_connections"
        with pytest.raises(ConnectionError):
            extra.receive()
        extra.close()
        ws = gateway.client("ws")
        assert ws.request({"type": "PING"}) == {"type": "PONG"}  # 4 in all: still room
        with connect(gateway.ws_url) as fifth:
            assert b"too_many_connections" in fifth.recv(timeout=10).encode()
        for client in [*tcp, ws]:
            assert client.request({"type": "PING"}) == {"type": "PONG"}
            client.close()
        # Room again once clients leave.
        wait_until(lambda: not gateway.service.status().clients, what="the clients to be gone")
        with gateway.client("tcp") as again:
            assert again.request({"type": "PING"}) == {"type": "PONG"}


def test_too_many_steps_in_one_message_is_refused_and_the_connection_stays(tmp_path):
    with running_gateway(gateway_settings(tmp_path, max_steps_per_message=50)) as gateway, gateway.client("tcp") as c:
        c.send({"type": "EPISODES", "episodes": [chunk(30), chunk(30)]})
        error = c.receive()
        assert error["code"] == "invalid_message" and "max_steps_per_message" in error["message"]
        assert c.request({"type": "PING"}) == {"type": "PONG"}


# -- Auth -------------------------------------------------------------------------


@pytest.fixture
def secured(tmp_path):
    with running_gateway(gateway_settings(tmp_path, auth_token=TOKEN)) as gateway:
        yield gateway


def test_tcp_needs_the_token_in_the_first_ping(secured, caplog):
    with secured.client("tcp") as client:
        client.send({"type": "GET_CONFIG"})
        error = client.receive()
        assert error["code"] == "unauthorized" and TOKEN not in str(error)
        with pytest.raises(ConnectionError):
            client.receive()
    with secured.client("tcp") as client:
        assert client.request({"type": "PING", "token": "wrong"})["code"] == "unauthorized"
    with secured.client("tcp") as client:
        assert client.request({"type": "PING", "token": TOKEN}) == {"type": "PONG"}
        assert client.request({"type": "GET_CONFIG"})["type"] == "SET_CONFIG"
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("how", ["header", "query", "ping"])
def test_websocket_accepts_the_token_by_header_query_or_ping(secured, how):
    url = secured.ws_url
    headers = {"Authorization": f"Bearer {TOKEN}"} if how == "header" else None
    with connect(url + (f"?token={TOKEN}" if how == "query" else ""), additional_headers=headers) as ws:
        if how == "ping":
            ws.send(encode_frame(json.dumps({"type": "PING", "token": TOKEN}).encode()).decode())
            assert ws.recv(timeout=10) == PONG.decode()
        ws.send('00000022{"type": "GET_CONFIG"}')
        assert "SET_CONFIG" in ws.recv(timeout=10)


def test_websocket_with_a_wrong_or_no_token_is_refused(secured):
    with connect(secured.ws_url + "?token=nope") as ws:
        assert '"unauthorized"' in ws.recv(timeout=10)
    with connect(secured.ws_url) as ws:
        ws.send(PING.decode())
        assert '"unauthorized"' in ws.recv(timeout=10)


# -- TLS --------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def test_tls_on_the_tcp_bridge_and_the_websocket(tmp_path, certificate):
    cert, key = certificate
    settings = gateway_settings(tmp_path, tls_certfile=cert, tls_keyfile=key)
    context = ssl.create_default_context(cafile=str(cert))
    with running_gateway(settings) as gateway:
        with socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=10) as plain:
            plain.sendall(PING)  # no TLS handshake: the bridge does not speak plain RLlink
            # It ends the connection (a TLS alert at most; a timeout here fails the test), never answers.
            assert PONG not in read_until_closed(plain)
        with socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(PING)
                assert recv_exactly(tls, len(PONG)) == PONG
        with connect(f"wss://127.0.0.1:{gateway.http_port}/rllink", ssl=context) as ws:
            ws.send(PING)
            assert ws.recv(timeout=10) == PONG


def test_rllink_client_speaks_tls(tmp_path, certificate):
    cert, key = certificate
    settings = gateway_settings(tmp_path, tls_certfile=cert, tls_keyfile=key)
    with running_gateway(settings) as gateway:
        for transport, port in (("tcp", gateway.tcp_port), ("ws", gateway.http_port)):
            with RLlinkClient(transport, "127.0.0.1", port, tls_cafile=str(cert)) as client:
                assert client.request({"type": "PING"}) == {"type": "PONG"}
