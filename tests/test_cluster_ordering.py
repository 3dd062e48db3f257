"""The learner actor's bookkeeping of front-ends' calls: it runs each front-end's calls in
their numbered order, whatever order Ray starts them in, lets calls of a past numbering
(before a restart) through at once, and forgets clients a front-end no longer has (here
the actor's class runs in-process, without Ray's scheduling)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("ray")

from app.cluster.calls import Call  # noqa: E402
from app.cluster.learner_actor import LearnerActor  # noqa: E402
from app.cluster.packed_chunks import pack  # noqa: E402
from app.experience import blocks_of  # noqa: E402
from app.schemas import EpisodeChunk  # noqa: E402
from app.training.registry import ClientInfo  # noqa: E402

from .helpers import chunk, gateway_settings  # noqa: E402


def client(client_id: int, frontend: int = 0) -> ClientInfo:
    return ClientInfo(id=client_id, transport="tcp", peer="test", frontend=frontend)


def test_a_wait_for_training_started_first_still_waits_for_the_experience_numbered_before_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[bool, int, int]:
        actor = LearnerActor(gateway_settings(tmp_path))
        await actor.hello(0, epoch=1)
        experience = blocks_of([EpisodeChunk.model_validate(chunk(7, seed=1))], "default_policy")
        # Started in the wrong order: the wait (call 2), the experience (1), then the connection (0).
        waiting = asyncio.ensure_future(actor.wait_for_training(Call(0, 1, 2), client(1)))
        ingesting = asyncio.ensure_future(actor.ingest(Call(0, 1, 1), pack([(client(1), experience, True)])))
        await asyncio.sleep(0.05)
        held = not waiting.done() and not ingesting.done()
        await actor.connect(Call(0, 1, 0), client(1))
        version = await asyncio.wait_for(waiting, 60)
        trained = actor.service.metrics.num_env_steps_trained_lifetime
        await actor.stop()
        return held, version, trained

    held, version, trained = asyncio.run(scenario())
    assert held  # nothing ran before call 0
    assert (version, trained) == (1, 7)  # the wait came after the experience: it trained on it


def test_calls_of_a_past_numbering_run_at_once_and_a_new_hello_orders_afresh(tmp_path: Path) -> None:
    # A restarted learner (no hello yet) or a front-end that said hello again: which calls of
    # the old numbering ran is unknown, so none of them waits for another.
    async def scenario() -> tuple[bool, bool, bool]:
        actor = LearnerActor(gateway_settings(tmp_path))
        await asyncio.wait_for(actor.connect(Call(0, 1, 57), client(1)), 5)  # never said hello to this learner
        unordered = [c.id for c in actor.service.status().clients] == [1]
        await actor.hello(0, epoch=2)
        late = asyncio.ensure_future(actor.connect(Call(0, 1, 90), client(2)))  # the old numbering: at once
        early = asyncio.ensure_future(actor.connect(Call(0, 2, 1), client(3)))  # waits for call 0 of numbering 2
        await asyncio.sleep(0.05)
        late_ran, early_held = late.done(), not early.done()
        await actor.start_sampling(Call(0, 2, 0), client(1))
        await asyncio.wait_for(early, 5)
        await actor.stop()
        return unordered, late_ran, early_held

    assert asyncio.run(scenario()) == (True, True, True)


def test_a_call_that_fails_still_lets_the_next_one_go(tmp_path: Path) -> None:
    async def scenario() -> bool:
        actor = LearnerActor(gateway_settings(tmp_path))
        await actor.hello(0, epoch=1)
        following = asyncio.ensure_future(actor.connect(Call(0, 1, 1), client(1)))
        with pytest.raises(AttributeError):
            await actor.ingest(Call(0, 1, 0), [(client(1), ["not a chunk"], True)])  # not packed: fails to unpack
        await asyncio.wait_for(following, 2)  # well before the 10 s a missing call would cost
        await actor.stop()
        return True

    assert asyncio.run(scenario())


def test_a_client_the_front_end_no_longer_has_is_forgotten_by_the_learner(tmp_path: Path) -> None:
    # A disconnect lost with a dead learner: the front-end's next list of its clients clears it.
    async def scenario() -> tuple[list[int], list[int]]:
        actor = LearnerActor(gateway_settings(tmp_path))
        await actor.hello(0, epoch=1)
        await actor.hello(1, epoch=1)
        await actor.connect(Call(0, 1, 0), client(1))
        await actor.connect(Call(0, 1, 1), client(2))
        await actor.connect(Call(1, 1, 0), client(10**9 + 1, frontend=1))
        before = sorted(c.id for c in actor.service.status().clients)
        await actor.keep_only(Call(0, 1, 2), [2])  # front-end 0 has only client 2 now; front-end 1's are not its business
        after = sorted(c.id for c in actor.service.status().clients)
        await actor.stop()
        return before, after

    before, after = asyncio.run(scenario())
    assert before == [1, 2, 10**9 + 1]
    assert after == [2, 10**9 + 1]


def test_each_life_of_a_front_end_gets_its_own_number_for_its_client_ids(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        actor = LearnerActor(gateway_settings(tmp_path))
        lives = []
        for frontend, epoch in ((0, 1), (0, 2), (1, 1), (0, 1)):  # front-end 0: a new numbering, then a new actor
            _, life = await actor.hello(frontend, epoch)
            lives.append(life)
        await actor.stop()
        return lives

    assert asyncio.run(scenario()) == [1, 1, 1, 2]
