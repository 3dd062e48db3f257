"""Self-play for one learner: frozen snapshots of it, the opponent of each version, an ELO rating.

Every `snapshot_every` versions the learner's exported policy is kept as a snapshot (the
last `window` of them). Each new version gets one opponent, drawn once for everyone:
the learner's latest weights with probability `play_against_latest_ratio`, else a kept
snapshot, uniformly. Clients play it as the opponent module of `SET_STATE.onnx_files`
and report each game on the learner's final chunk (`outcome`); the game is rated
against the opponent of the version that played it. Like ML-Agents, both sides' ratings
move: R += K * (score - expected), expected = 1 / (1 + 10 ** ((R_opponent - R) / 400)).
Games against the latest weights (the learner itself) are counted but not rated.
No torch: the snapshots are exported policies. `ratings`, `snapshot_files` and `restore`
carry them over a restart (league_files.py) (the opponents of past versions are not kept: games of
versions before the restart are not rated).
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from dataclasses import dataclass

from app.settings.hyperparameters import SelfPlayConfig
from app.training.onnx_export import PolicyState, set_state_payload

SCORES = {"win": 1.0, "draw": 0.5, "loss": 0.0}
REMEMBERED_VERSIONS = 1_000  # versions whose opponent is remembered, to rate games reported late


@dataclass
class Snapshot:
    """A frozen version of the learner and the rating it has earned as an opponent."""

    state: PolicyState
    elo: float

    @property
    def weights_seq_no(self) -> int:
        return self.state.weights_seq_no


class League:
    """The snapshots, the opponent of each version and the ratings of one self-play learner."""

    def __init__(self, cfg: SelfPlayConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.elo = cfg.initial_elo
        self.snapshots: deque[Snapshot] = deque(maxlen=cfg.window)
        self.rated_games = 0
        self._rng = random.Random(seed)
        self._opponents: OrderedDict[int, Snapshot | None] = OrderedDict()  # version -> opponent (None: latest)
        self.opponent: Snapshot | None = None  # of the current version

    def on_new_version(self, weights_seq_no: int, learner: PolicyState) -> PolicyState:
        """Keep a snapshot if one is due (the learner's weights changed `snapshot_every`
        versions after the last snapshot's), draw the opponent of this version, return its policy."""
        if not self.snapshots or learner.weights_seq_no - self.snapshots[-1].weights_seq_no >= self.cfg.snapshot_every:
            self.snapshots.append(Snapshot(learner, self.elo))
        against_latest = self._rng.random() < self.cfg.play_against_latest_ratio
        self.opponent = None if against_latest else self._rng.choice(self.snapshots)
        self._opponents[weights_seq_no] = self.opponent
        while len(self._opponents) > REMEMBERED_VERSIONS:
            self._opponents.popitem(last=False)
        return learner if self.opponent is None else self.opponent.state

    def record_game(self, outcome: str, weights_seq_no: int | None) -> bool:
        """Rate a game the learner played with version `weights_seq_no`; False if it is not
        rated (played against itself, or against an opponent no longer remembered)."""
        if weights_seq_no is None or weights_seq_no not in self._opponents:
            return False
        opponent = self._opponents[weights_seq_no]
        if opponent is None:
            return False
        expected = 1.0 / (1.0 + 10.0 ** ((opponent.elo - self.elo) / 400.0))
        delta = self.cfg.elo_k * (SCORES[outcome] - expected)
        self.elo += delta
        opponent.elo -= delta
        self.rated_games += 1
        return True

    def ratings(self) -> dict:
        """The ratings and which versions are snapshots, for the module's checkpoint folder."""
        return {
            "elo": self.elo,
            "rated_games": self.rated_games,
            "snapshots": [{"weights_seq_no": s.weights_seq_no, "elo": s.elo} for s in self.snapshots],
        }

    def snapshot_files(self) -> dict[int, bytes]:
        """Each snapshot's ONNX, by version."""
        return {s.weights_seq_no: s.state.onnx_bytes for s in self.snapshots}

    def restore(self, ratings: dict, snapshot_files: dict[int, bytes]) -> None:
        """Take back what `ratings` and `snapshot_files` gave (the last `window` snapshots)."""
        self.elo, self.rated_games = float(ratings["elo"]), int(ratings["rated_games"])
        self.snapshots.clear()
        for snapshot in ratings["snapshots"]:
            onnx_bytes = snapshot_files[snapshot["weights_seq_no"]]
            state = PolicyState(int(snapshot["weights_seq_no"]), onnx_bytes, set_state_payload(onnx_bytes))
            self.snapshots.append(Snapshot(state, float(snapshot["elo"])))

    def summary(self) -> dict:
        """The rating and the league, for /api/policies and the dashboard."""
        return {
            "elo": self.elo,
            "rated_games": self.rated_games,
            "opponent_weights_seq_no": None if self.opponent is None else self.opponent.weights_seq_no,
            "snapshots": [{"weights_seq_no": s.weights_seq_no, "elo": s.elo} for s in self.snapshots],
        }
