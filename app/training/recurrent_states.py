"""A recurrent module's chunks must say what state they begin from (RLLINK.md "Recurrent
policies"): one that starts its episode may leave `state_in` out (zeros), one that goes on
with an episode may not, since the learner would start its sequences from the wrong state."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.experience import ChunkBlock
from app.settings.policies import PolicySet
from rllink.errors import ErrorCode, ProtocolError


def check_states(blocks: Sequence[ChunkBlock], policies: PolicySet, continues: Callable[[ChunkBlock, int], bool]) -> None:
    """Raise ProtocolError (invalid_message, naming the field and both sizes) for the first
    chunk of a recurrent module without `state_in` that `continues` an episode already begun."""
    for block in blocks:
        state_size = policies.modules[block.module_id].state_size
        if not state_size:
            continue
        for index, state in enumerate(block.state_in):
            if state is None and block.episode_id[index] is not None and continues(block, index):
                raise ProtocolError(
                    ErrorCode.INVALID_MESSAGE,
                    f"episode {block.episode_id[index]!r} goes on in a chunk without state_in: module "
                    f"{block.module_id!r} is recurrent, so a chunk that continues an episode must carry state_in, "
                    f"state_size = {state_size} numbers, got 0; nothing of this message was taken",
                    details={"field": "state_in"},
                )
