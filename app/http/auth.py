"""Optional shared-secret auth, the same secret for REST, WebSocket and TCP.

Off unless `auth_token` is set. REST routes declare it with FastAPI's security classes
(a bearer token, or `?token=` for browsers that cannot set headers), so the OpenAPI
document names the schemes and /docs can send the token. Tokens are compared in
constant time and never logged, echoed in errors, or shown in `/api/config`.
"""

from __future__ import annotations

from fastapi import Depends, HTTPException, Security
from fastapi.security import APIKeyQuery, HTTPAuthorizationCredentials, HTTPBearer

from app.application.admission import token_matches
from app.http.dependencies import get_settings
from app.settings.config import Settings

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="bearerToken",
    description="The gateway's `auth_token`, as `Authorization: Bearer <token>` (when auth is on).",
)
query_scheme = APIKeyQuery(
    name="token",
    auto_error=False,
    scheme_name="tokenQuery",
    description="The gateway's `auth_token` as `?token=`, for browsers that cannot set headers (when auth is on).",
)


def require_token(
    settings: Settings = Depends(get_settings),
    bearer: HTTPAuthorizationCredentials | None = Security(bearer_scheme),
    query_token: str | None = Security(query_scheme),
) -> None:
    """REST dependency: `Authorization: Bearer <token>` or `?token=` when auth is on."""
    if settings.auth_token is None:
        return
    presented = bearer.credentials if bearer is not None else query_token
    if not token_matches(settings, presented):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong token: send 'Authorization: Bearer <token>' or ?token=",
            headers={"WWW-Authenticate": "Bearer"},
        )
