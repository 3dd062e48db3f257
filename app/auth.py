"""Optional shared-secret auth, the same secret for REST, WebSocket and TCP.

Off unless `auth_token` is set. Tokens are compared in constant time and never logged,
echoed in errors, or shown in `/api/config`.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request

from app.config import Settings
from app.dependencies import get_settings
from app.protocol import ErrorCode, ProtocolError


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


def unauthorized(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.UNAUTHORIZED, message, fatal=True)


def require_token(request: Request, settings: Settings = Depends(get_settings)) -> None:
    """REST dependency: `Authorization: Bearer <token>` or `?token=` when auth is on."""
    if settings.auth_token is None:
        return
    presented = bearer_token(request.headers.get("authorization")) or request.query_params.get("token")
    if not token_matches(settings, presented):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong token: send 'Authorization: Bearer <token>' or ?token=",
            headers={"WWW-Authenticate": "Bearer"},
        )
