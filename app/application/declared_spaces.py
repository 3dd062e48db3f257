"""The spaces a game declares in `GET_CONFIG`, checked against the gateway's modules.

What the game states must be true of the module: every field it gives (type, shape,
bounds, dtype, n, nvec; a dict's keys) equals the module's; a field it leaves out is not
checked. A mismatch is refused with `invalid_message` naming both spaces, before the
client has sent a step, instead of surfacing at its first chunk. A module whose spaces
the gateway was not given takes the first game's instead (`spaces_to_adopt`).
"""

from __future__ import annotations

import json
from typing import Any

from app.schemas import DeclaredSpaces, GetConfig
from app.settings.policies import Module, PolicySet
from rllink.errors import ErrorCode, ProtocolError


def declared_mismatch(request: GetConfig, policies: PolicySet) -> ProtocolError | None:
    """Why the spaces `request` declares do not fit the modules, or None."""
    for module_id, spaces in declared_spaces(request, policies).items():
        module = policies.modules.get(module_id)
        if module is None:
            return ProtocolError(
                ErrorCode.INVALID_MESSAGE,
                f"GET_CONFIG declares spaces for module {module_id!r}, which the gateway does not have; "
                f"its modules: {', '.join(policies.modules)}",
            )
        for what, said, ours in _pairs(spaces, module):
            game = said.model_dump(mode="json", exclude_unset=True)
            if _contradicts(game, ours.model_dump(mode="json")):
                return _refusal(module, what, game, ours.model_dump(mode="json", exclude_none=True))
    return None


def spaces_to_adopt(request: GetConfig, policies: PolicySet, adoptable: frozenset[str]) -> dict[str, DeclaredSpaces]:
    """The declared spaces of the modules in `adoptable` that differ from theirs: what those
    modules take instead (app/training/space_adoption.py)."""
    return {
        module_id: spaces
        for module_id, spaces in declared_spaces(request, policies).items()
        if module_id in adoptable
        and any(
            _contradicts(said.model_dump(mode="json", exclude_unset=True), ours.model_dump(mode="json"))
            for _, said, ours in _pairs(spaces, policies.modules[module_id])
        )
    }


def declared_spaces(request: GetConfig, policies: PolicySet) -> dict[str, DeclaredSpaces]:
    """The spaces `request` declares, by module id (top-level ones: the default module's)."""
    declared: dict[str, DeclaredSpaces] = dict(request.policies or {})
    if request.observation_space is not None or request.action_space is not None:
        declared.setdefault(
            policies.default_module_id,
            DeclaredSpaces(observation_space=request.observation_space, action_space=request.action_space),
        )
    return declared


def _pairs(spaces: DeclaredSpaces, module: Module) -> list[tuple[str, Any, Any]]:
    """(field, the game's space, the module's) for each space the game declared."""
    pairs = [
        ("observation_space", spaces.observation_space, module.observation_space),
        ("action_space", spaces.action_space, module.action_space),
    ]
    return [pair for pair in pairs if pair[1] is not None]


def _contradicts(said: Any, ours: Any, key: str | None = None) -> bool:
    """Whether a field the game gave differs from the module's (a dict space's keys must all match)."""
    if isinstance(said, dict):
        if not isinstance(ours, dict) or (key == "spaces" and said.keys() != ours.keys()):
            return True
        return any(name not in ours or _contradicts(value, ours[name], name) for name, value in said.items())
    return bool(said != ours)


def _refusal(module: Module, what: str, game: dict[str, Any], gateway: dict[str, Any]) -> ProtocolError:
    return ProtocolError(
        ErrorCode.INVALID_MESSAGE,
        f"the game declares {what} {json.dumps(game)} for module {module.module_id!r}, but the gateway's is "
        f"{json.dumps(gateway)}: start the gateway with the game's spaces (--{what.replace('_', '-')}, or policies) "
        "or change the game",
        details={"module_id": module.module_id, "declared": game, "gateway": gateway},
    )
