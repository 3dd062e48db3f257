"""A thin client's requests checked against its module's spaces, and its actions as the
client applies them: every refusal here names the field and the module."""

from __future__ import annotations

import numpy as np

from app.numeric_checks import check_action_mask, check_image_values
from app.schemas import ActionRequests
from app.settings.policies import Module, PolicySet
from app.spaces.models import DiscreteSpace, MultiDiscreteSpace, num_logits
from rllink.errors import ErrorCode, ProtocolError


def refusal(message: str, code: ErrorCode = ErrorCode.INVALID_MESSAGE) -> ProtocolError:
    """The error a request gets (`invalid_message` unless said otherwise); the episode goes on."""
    return ProtocolError(code, message)


def check_playable(policies: PolicySet, module: Module) -> None:
    """A self-play opponent whose league draws scripted references is refused: a client
    plays those itself, and the gateway, which has only a stand-in model (uniformly
    random), would serve it in their place while its games counted against them."""
    if module.opponent_of is None:
        return
    league = policies.modules[module.opponent_of].self_play
    drawn = sorted(name for name, reference in (league.scripted_references if league else {}).items() if reference.play_ratio > 0)
    if drawn:
        raise refusal(
            f"module {module.module_id!r} is the self-play opponent of {module.opponent_of!r}, whose league draws the "
            f"scripted references {', '.join(map(repr, drawn))}: a client plays those itself, so a thin client cannot "
            "play this module; play it with local inference and those players (docs/multi-agent.md, scripted "
            "references), or set their play_ratio to 0"
        )


def check_obs(module: Module, obs: np.ndarray, what: str = "obs") -> None:
    space = module.observation_space
    if obs.shape != space.shape:
        raise refusal(
            f"{what} must have shape {list(space.shape)} for module {module.module_id!r}, got {list(obs.shape)}"
        )
    try:
        check_image_values(obs[None], space, what, f" (module {module.module_id!r})")
    except ValueError as exc:
        raise refusal(str(exc)) from None

def group_obs(module: Module, requests: ActionRequests, indices: list[int], batch: bool) -> np.ndarray:
    """The observations of one module's requests [n, *shape], checked against its space;
    an error names the first bad request."""
    obs = requests.obs
    if isinstance(obs, np.ndarray) and obs.shape[1:] == module.observation_space.shape:
        group = obs if len(indices) == len(obs) else obs[indices]
        try:
            check_image_values(group, module.observation_space, "obs")
            return group
        except ValueError:
            pass  # named below
    for i in indices:
        check_obs(module, obs[i], f"batch[{i}].obs" if batch else "obs")
    return np.stack([obs[i] for i in indices])

def group_masks(module: Module, requests: ActionRequests, indices: list[int], batch: bool) -> np.ndarray | None:
    """The action masks of one module's requests [n, k], checked; None for a module without masking."""
    masks = [requests.action_masks[i] for i in indices]
    for i, mask in zip(indices, masks):
        check_mask(module, mask, f"batch[{i}].action_mask" if batch else "action_mask")
    return stack_masks(module, masks)

def check_mask(module: Module, mask: np.ndarray | None, what: str) -> None:
    if mask is not None:
        try:
            check_action_mask(mask[None], module, what, per_step=False)
        except ValueError as exc:
            raise refusal(str(exc)) from None

def stack_masks(module: Module, masks: list[np.ndarray | None]) -> np.ndarray | None:
    """The requests' masks [n, k] (all allowed where one gave none); None for a module without masking."""
    if not module.action_masking:
        return None
    width = num_logits(module.action_space)
    return np.stack([np.ones(width, np.float32) if mask is None else mask for mask in masks])


def env_actions(module: Module, actions: np.ndarray) -> list:
    """What the clients apply, one per row: the index, or the sample clipped to the box's bounds."""
    space = module.action_space
    if isinstance(space, (DiscreteSpace, MultiDiscreteSpace)):
        return actions.tolist()
    low = -np.inf if space.low is None else space.low
    high = np.inf if space.high is None else space.high
    return np.clip(actions, low, high).tolist()

def logged_action(module: Module, action) -> np.ndarray:
    """A LOG_ACTION's action as an array, checked against the module's action space."""
    space = module.action_space
    if isinstance(space, DiscreteSpace):
        if isinstance(action, bool) or not isinstance(action, int) or not 0 <= action < space.n:
            raise refusal(f"action must be an integer in 0..{space.n - 1} for module {module.module_id!r}, got {action!r}")
        return np.asarray(action, dtype=np.int64)
    if isinstance(space, MultiDiscreteSpace):
        if (
            not isinstance(action, list)
            or len(action) != len(space.nvec)
            or not all(type(a) is int and 0 <= a < n for a, n in zip(action, space.nvec))
        ):
            raise refusal(
                f"action must be a list of {len(space.nvec)} integers, each in 0..nvec[i]-1 for "
                f"MultiDiscrete({list(space.nvec)}) (module {module.module_id!r}), got {action!r}"
            )
        return np.asarray(action, dtype=np.int64)
    array = np.asarray(action, dtype=np.float32)
    if array.shape != space.shape or not np.isfinite(array).all():
        raise refusal(
            f"action must be finite numbers of shape {list(space.shape)} for module {module.module_id!r}, "
            f"got {action!r}"
        )
    return array
