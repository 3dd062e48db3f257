"""The connected simulators, as the training service and the REST API see them."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass
class ClientInfo:
    """One connected simulator."""

    id: int
    transport: str  # "tcp" or "ws"
    peer: str
    connected_at: float = field(default_factory=time.time)  # Unix time
    env_steps_sent: int = 0
    sampling: bool = False  # asked for the sampling config or sent experience: the barrier waits for it
    waiting: bool = False  # inside wait_for_training, its data not yet trained on
    last_weights_seq_no_sent: int | None = None
    frontend: int | None = None  # on Ray: the front-end it is connected to (app/cluster/)
    slot: int = 0  # the lowest number no other connected client holds (lowest_free_slot): a population's member is slot % its size


def lowest_free_slot(taken: Iterable[int], first: int = 0) -> int:
    """The lowest slot from `first` on that no client in `taken` holds: the clients spread
    evenly over a population's members (or a learner's exploiters), in turn."""
    held = set(taken)
    return next(n for n in itertools.count(first) if n not in held)


class ClientRegistry:
    """Numbers clients as they connect and forgets them when they leave."""

    def __init__(self) -> None:
        self._clients: dict[int, ClientInfo] = {}
        self._ids = itertools.count(1)

    def connect(self, transport: str, peer: str) -> ClientInfo:
        slot = lowest_free_slot(other.slot for other in self._clients.values())
        client = ClientInfo(id=next(self._ids), transport=transport, peer=peer, slot=slot)
        self._clients[client.id] = client
        return client

    def add(self, client: ClientInfo) -> None:
        """A client numbered elsewhere (a front-end on Ray numbers its own)."""
        self._clients[client.id] = client

    def disconnect(self, client: ClientInfo) -> None:
        self._clients.pop(client.id, None)

    @property
    def clients(self) -> list[ClientInfo]:
        return list(self._clients.values())

    def samplers(self) -> Iterator[ClientInfo]:
        """The clients the barrier waits for: those that asked for GET_CONFIG (as every
        RLlink client does before sampling) or sent experience. A client that only
        watches (PING, GET_STATE) holds nobody back. Lazy: all() stops early."""
        return (client for client in self._clients.values() if client.sampling)
