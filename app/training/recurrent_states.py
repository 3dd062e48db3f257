"""A recurrent module's chunks must say what state they begin from (RLLINK.md "Recurrent
policies"): one that starts its episode may leave `state_in` out (zeros), one that goes on
with an episode may not, since the learner would start its sequences from the wrong state."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from operator import or_

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


class RecurrentEpisodes:
    """Which episodes of recurrent modules each client has sent steps of and not ended, so
    that a front-end on Ray refuses a continued chunk without `state_in` itself (the learner
    elsewhere could only drop it, unseen by its client). At most `limit` are remembered; the
    least recently continued go first, as the learner's metrics forget theirs."""

    def __init__(self, policies: PolicySet, limit: int) -> None:
        self._policies = policies
        self._recurrent = frozenset(module_id for module_id, module in policies.modules.items() if module.state_size)
        self._limit = limit
        self._open: dict[tuple[int, str | None, str | None, bool], None] = {}  # in order of last use

    def check_and_record(self, client_id: int, blocks: Sequence[ChunkBlock]) -> None:
        """Raise as `check_states` does (nothing recorded then), else note the blocks' episodes."""
        if not self._recurrent:
            return
        check_states(blocks, self._policies, lambda block, index: self._key(client_id, block, index) in self._open)
        for block in blocks:
            if block.module_id not in self._recurrent:
                continue
            for index, ended in enumerate(map(or_, block.is_terminated, block.is_truncated)):
                if block.episode_id[index] is None:
                    continue  # never checked: a chunk that names no episode is one of its own
                key = self._key(client_id, block, index)
                self._open.pop(key, None)
                if not ended:
                    self._open[key] = None
        for key in list(itertools.islice(self._open, max(0, len(self._open) - self._limit))):
            del self._open[key]

    def forget(self, client_id: int) -> None:
        """The client left: its episodes are over."""
        for key in [key for key in self._open if key[0] == client_id]:
            del self._open[key]

    @staticmethod
    def _key(client_id: int, block: ChunkBlock, index: int) -> tuple[int, str | None, str | None, bool]:
        return client_id, block.episode_id[index], block.agent_id[index], block.evaluation[index]
