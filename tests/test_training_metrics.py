"""Episode accounting (app/training/metrics.py): chunks joined into episodes per client and
agent, and the bound on unfinished episodes remembered."""

from __future__ import annotations

from app.experience import ChunkBlock
from app.schemas import EpisodeChunk
from app.training import metrics as metrics_module
from app.training.metrics import TrainingMetrics
from tests.helpers import chunk

MODULE = "default_policy"


def block(*chunks: dict) -> ChunkBlock:
    return ChunkBlock.of([EpisodeChunk.model_validate(values) for values in chunks], MODULE)


def test_an_episode_sums_its_chunks_and_one_continued_throughout_outlives_the_bound(monkeypatch) -> None:
    """Beyond MAX_OPEN_EPISODES unfinished episodes the least recently continued are
    forgotten: an episode continued all along keeps its whole return, one left since the
    start ends with the return of its last chunk only."""
    monkeypatch.setattr(metrics_module, "MAX_OPEN_EPISODES", 50)
    metrics = TrainingMetrics([MODULE])
    metrics.record_chunks(1, block(chunk(2, reward=1.0, terminated=False, episode_id="left")))
    for index in range(200):  # 200 episodes opened and never ended, one continued in every message
        metrics.record_chunks(1, block(
            chunk(1, reward=1.0, terminated=False, episode_id="kept"),
            chunk(1, reward=0.5, terminated=False, episode_id=f"other-{index}"),
        ))  # fmt: skip
    metrics.record_chunks(1, block(
        chunk(3, reward=1.0, terminated=True, episode_id="kept"),
        chunk(4, reward=1.0, terminated=True, episode_id="left"),
    ))  # fmt: skip
    assert list(metrics.episode_returns) == [203.0, 4.0]
    assert list(metrics.episode_lengths) == [203, 4]


def test_an_agent_without_episode_ids_ends_one_episode_and_starts_the_next_in_one_message() -> None:
    """Chunks without episode_id join in order: one that is done ends its episode, the
    agent's next chunk (in the same message) starts a new one."""
    metrics = TrainingMetrics([MODULE])
    metrics.record_chunks(7, block(chunk(2, reward=1.0, terminated=False, agent_id="a")))
    metrics.record_chunks(7, block(
        chunk(3, reward=1.0, terminated=True, agent_id="a"),
        chunk(5, reward=2.0, terminated=False, agent_id="a"),
    ))  # fmt: skip
    metrics.record_chunks(7, block(chunk(1, reward=2.0, truncated=True, terminated=False, agent_id="a")))
    assert list(metrics.episode_returns) == [5.0, 12.0]
    assert list(metrics.episode_lengths) == [5, 6]
