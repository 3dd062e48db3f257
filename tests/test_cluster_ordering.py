"""The learner actor's bookkeeping of front-ends' calls: it runs each front-end's calls in
their numbered order, whatever order Ray starts them in, and forgets clients a front-end
no longer has (here the actor's class runs in-process, without Ray's scheduling)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("ray")

from app.cluster.learner_actor import LearnerActor  # noqa: E402
from app.schemas import EpisodeChunk  # noqa: E402
from app.training.registry import ClientInfo  # noqa: E402

from .helpers import chunk, gateway_settings  # noqa: E402


def test_a_wait_for_training_started_first_still_waits_for_the_experience_numbered_before_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[bool, int, int]:
        actor = LearnerActor(gateway_settings(tmp_path))
        await actor.start()
        await actor.hello(0)
        client = ClientInfo(id=1, transport="tcp", peer="test", frontend=0)
        experience = [EpisodeChunk.model_validate(chunk(7, seed=1))]
        # Started in the wrong order: the wait (call 2), the experience (1), then the connection (0).
        waiting = asyncio.ensure_future(actor.wait_for_training(0, 2, client))
        ingesting = asyncio.ensure_future(actor.ingest(0, 1, [(client, experience, True)]))
        await asyncio.sleep(0.05)
        held = not waiting.done() and not ingesting.done()
        await actor.connect(0, 0, client)
        version = await asyncio.wait_for(waiting, 60)
        trained = actor.service.metrics.num_env_steps_trained_lifetime
        await actor.stop()
        return held, version, trained

    held, version, trained = asyncio.run(scenario())
    assert held  # nothing ran before call 0
    assert (version, trained) == (1, 7)  # the wait came after the experience: it trained on it


def test_a_client_the_front_end_no_longer_has_is_forgotten_by_the_learner(tmp_path: Path) -> None:
    # A disconnect lost with a dead learner: the front-end's next list of its clients clears it.
    async def scenario() -> tuple[list[int], list[int]]:
        actor = LearnerActor(gateway_settings(tmp_path))
        await actor.start()
        await actor.hello(0)
        await actor.hello(1)
        for seq, (frontend, client_id) in enumerate([(0, 1), (0, 2)]):
            await actor.connect(frontend, seq, ClientInfo(id=client_id, transport="tcp", peer="test", frontend=frontend))
        await actor.connect(1, 0, ClientInfo(id=10**9 + 1, transport="tcp", peer="test", frontend=1))
        before = sorted(client.id for client in actor.service.clients)
        await actor.keep_only(0, 2, [2])  # front-end 0 has only client 2 now; front-end 1's are not its business
        after = sorted(client.id for client in actor.service.clients)
        await actor.stop()
        return before, after

    before, after = asyncio.run(scenario())
    assert before == [1, 2, 10**9 + 1]
    assert after == [2, 10**9 + 1]
