"""Every self-play learner's league at work (the league itself is self_play.py's): restored and
saved beside the checkpoints, the opponent drawn for each version, the games of each message
counted, and each learner's main exploiter (SelfPlayConfig.exploiter) judged after every
training step: an exploiter that has beaten the learner often enough joins the league as a
frozen player, and one that has not within its env steps starts again; either way from the
learner's weights (copied by the learners, as a population's exploit copies them).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.experience import ChunkBlock
from app.settings.hyperparameters import ExploiterConfig
from app.settings.policies import PolicySet, exploiter_id
from app.training.league_files import LeagueFiles
from app.training.learner_host import LearnerProcess, LearnerThread
from app.training.policy_state import PolicyState
from app.training.self_play import SCORES, Game, League

logger = logging.getLogger("app.training")

JOINS, STARTS_AGAIN = "joins the league", "starts again"


@dataclass
class Exploiter:
    """A learner's main exploiter: its scores in its recent games against the learner, and its
    env steps, since it last started from the learner's weights."""

    learner_id: str
    config: ExploiterConfig
    scores: deque[float] = field(init=False)  # its last `games` scores
    env_steps: int = 0
    joined: int = 0  # frozen copies added to the league so far
    restarts: int = 0  # times it started again without joining

    def __post_init__(self) -> None:
        self.scores = deque(maxlen=self.config.games)

    @property
    def module_id(self) -> str:
        return exploiter_id(self.learner_id)

    def record(self, games: list[Game]) -> None:
        self.scores.extend(SCORES[game.outcome] for game in games)

    @property
    def win_rate(self) -> float | None:
        """Its mean score over its last `games` games against the learner; None before it has that many."""
        return sum(self.scores) / len(self.scores) if len(self.scores) >= self.config.games else None

    def decision(self) -> str | None:
        """JOINS once it scores `win_rate` over `games` games; else STARTS_AGAIN after `max_env_steps`."""
        if (rate := self.win_rate) is not None and rate >= self.config.win_rate:
            return JOINS
        return STARTS_AGAIN if self.env_steps >= self.config.max_env_steps else None

    def started_again(self, joined: bool) -> None:
        self.scores.clear()
        self.env_steps = 0
        self.joined += joined
        self.restarts += not joined


class Leagues:
    """The leagues and exploiters of one TrainingService; every method runs on its event loop."""

    def __init__(self, policies: PolicySet, checkpoint_dir: Path, seed: int, learners: LearnerThread | LearnerProcess) -> None:
        learning = [module for module in policies.trainable if module.self_play is not None]
        self.by_module = {
            module.module_id: League(module.self_play, seed=seed, temperature=module.opponent_temperature)  # type: ignore[arg-type]
            for module in learning
        }
        self.exploiters = {
            exploiter_id(module.module_id): Exploiter(module.module_id, module.self_play.exploiter)  # type: ignore[union-attr]
            for module in learning
            if module.self_play.exploiter is not None  # type: ignore[union-attr]
        }
        self._files = LeagueFiles(checkpoint_dir, self.by_module, learners.run)
        self._call = learners.call

    async def restore(self, restored: dict[str, int], exports: dict[str, PolicyState]) -> None:
        """Each league as saved with its learner's checkpoint; an exploiter without a checkpoint
        starts from its learner's weights."""
        for module_id in self.by_module:
            await self._files.restore(module_id, module_id in restored, exports[module_id].onnx_bytes)
        for exploiter in self.exploiters.values():
            if exploiter.module_id not in restored:
                await self._copy_learner(exploiter, exports)

    async def save(self) -> None:
        await self._files.save()

    def opponent(self, learner_id: str, weights_seq_no: int, learner: PolicyState) -> PolicyState:
        """The opponent module's policy in version `weights_seq_no`, as the learner's league draws it."""
        return self.by_module[learner_id].on_new_version(weights_seq_no, learner)

    def record_evaluations(self, block: ChunkBlock) -> None:
        """The evaluation games a block (versions filled in) ends, if its module plays a league."""
        if block.module_id in self.by_module:
            self.by_module[block.module_id].record_evaluations(_games(block, evaluation=True))

    def record_games(self, blocks: list[ChunkBlock]) -> None:
        """The games the training blocks of one message end (versions filled in): a learner's
        against its league, an exploiter's against its learner."""
        games: dict[str, list[Game]] = {}
        for block in blocks:
            if (block.module_id in self.by_module or block.module_id in self.exploiters) and (ended := _games(block)):
                games.setdefault(block.module_id, []).extend(ended)
        for module_id, ended in games.items():
            if module_id in self.exploiters:
                self.exploiters[module_id].record(ended)
            else:
                self.by_module[module_id].record_games(ended)

    async def after_training(self, version: int, trained: dict[str, tuple[int, dict[str, float]]], exports: dict[str, PolicyState]) -> None:
        """Count each exploiter's env steps; one that has met `win_rate` joins its learner's league
        (a frozen copy, rated from its games), and it, or one out of env steps, starts again from
        the learner's weights (its new export, published as `version`, replaces its entry in `exports`)."""
        for exploiter in self.exploiters.values():
            if exploiter.module_id in trained:
                steps, stats = trained[exploiter.module_id]
                exploiter.env_steps += steps
                if (rate := exploiter.win_rate) is not None:
                    stats["win_rate"] = rate  # the log and TensorBoard show it
            if (decision := exploiter.decision()) is None:
                continue
            rate, games, steps = exploiter.win_rate, len(exploiter.scores), exploiter.env_steps
            if decision == JOINS:
                self.by_module[exploiter.learner_id].add_exploiter(replace(exports[exploiter.module_id], weights_seq_no=-version))
            await self._copy_learner(exploiter, exports)
            exploiter.started_again(decision == JOINS)
            logger.info(
                "%s %s at weights_seq_no %d: score %s against %s over its last %d games, %d env steps",
                exploiter.module_id, decision, version, "n/a" if rate is None else f"{rate:.2f}", exploiter.learner_id, games, steps,
            )  # fmt: skip

    def exploiter_status(self) -> dict[str, dict[str, Any]]:
        """Each exploiter, by its learner, for /api/policies: its score, env steps and copies that joined."""
        return {
            exploiter.learner_id: {
                "module_id": exploiter.module_id,
                "win_rate": exploiter.win_rate,
                "games": len(exploiter.scores),
                "env_steps": exploiter.env_steps,
                "joined": exploiter.joined,
                "restarts": exploiter.restarts,
            }
            for exploiter in self.exploiters.values()
        }

    async def _copy_learner(self, exploiter: Exploiter, exports: dict[str, PolicyState]) -> None:
        await self._call("copy_weights", exploiter.learner_id, exploiter.module_id)
        exports[exploiter.module_id] = await self._call("export", exploiter.module_id)


def _games(block: ChunkBlock, evaluation: bool = False) -> list[Game]:
    """The games that chunks of the block end (those with an outcome), of training or of evaluation episodes."""
    seats = zip(block.episode_id, block.agent_id, block.outcome, block.weights_seq_no, block.evaluation)
    return [
        Game(episode_id, seat, outcome, version)
        for episode_id, seat, outcome, version, evaluated in seats
        if outcome is not None and evaluated == evaluation
    ]
