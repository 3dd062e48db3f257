"""Who may connect: the shared token (compared in constant time) and the connection limits."""

from __future__ import annotations

import hmac
from collections.abc import Collection

from app.settings.config import Settings
from app.training.registry import ClientInfo
from rllink.errors import ErrorCode, ProtocolError


def token_matches(settings: Settings, presented: str | None) -> bool:
    """Constant-time check of a presented token against the configured one."""
    if settings.auth_token is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode(), settings.auth_token.get_secret_value().encode())


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if that is what it is."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def admission_error(settings: Settings, clients: Collection[ClientInfo], transport: str) -> ProtocolError | None:
    """Why a new connection on `transport` is refused, or None if there is room (the
    limits are each front-end's own on Ray)."""
    per_transport = {"tcp": settings.max_tcp_connections, "ws": settings.max_ws_connections}[transport]
    open_here = sum(1 for client in clients if client.transport == transport)
    if open_here >= per_transport:
        limit = f"{per_transport} {transport} connections (max_{transport}_connections)"
    elif len(clients) >= settings.max_connections:
        limit = f"{settings.max_connections} connections (max_connections)"
    else:
        return None
    return ProtocolError(ErrorCode.TOO_MANY_CONNECTIONS, f"the gateway is at its limit of {limit}; retry later", fatal=True)


