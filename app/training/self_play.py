"""Self-play for one learner: a league of frozen snapshots, fixed reference players and
the current policy; the opponent of each version; ratings anchored to the references.

The players. *References* are fixed, their ratings set once and never moved: the
uniformly random legal player (its ONNX outputs equal logits, so a client that masks them
plays uniformly among the legal moves), rated `random_elo`, and any *scripted* references
the settings name (`scripted_references`: a player the clients script, such as one that
wins when it can and blocks when it must), each at the rating its settings give. A
scripted reference's model is the random one with its name in the `scripted_reference`
metadata: the client plays its own scripted player of that name instead. *Snapshots* are
frozen copies of the learner, one every `snapshot_every` versions (sooner, with
`snapshot_score`, once the learner scores that much in its rated games since the last), the
last `window` kept.
The learner's games between two snapshots are the newest snapshot's games (the learner
is a little stronger than it, but both are one player here): so every rated game is
between two fixed policies, and a snapshot's rating comes from its own games, never from
the learner's rating.

The opponent of each version is drawn once for every client (documented schedule):
the random reference with probability `play_against_random_ratio`, each scripted
reference with its `play_ratio`, the latest weights (the learner itself, unrated) with
`play_against_latest_ratio`, else a snapshot older than the learner's newest (while there
is none: the random reference), uniformly or by prioritised fictitious self-play
(AlphaStar's PFSP: weight (1 - p)^2, p the learner's expected score against it, so the
snapshots it still loses to come more often). A snapshot or the latest weights play the
opponent at `temperature` (their logits divided by it: the same most likely move, the
others more often), so the learner meets the positions a good player reaches after an
unusual move, and how play goes on from them; the references play as they are.

At a temperature other than 1 a snapshot is two players: as trained (the learner's side of
its games) and tempered (the opponent's side), each rated from its own games, so that the
learner's wins against a weakened snapshot never raise the snapshot's rating as trained (one
rating for two strengths inflates every later one). A tempered snapshot's prior is
`prior_games` virtual draws against itself as trained (its first guess before it has played);
a frozen exploiter only ever plays tempered, so its one rating is that.

The ratings are the maximum a posteriori Elo (Bradley-Terry) ratings of the kept
snapshots given their games in the window (a draw scores one half; a snapshot that left
the window takes its games with it), the references held at their fixed ratings, with a
prior of `prior_games` virtual draws of every snapshot against the random reference (as
BayesElo's): it keeps a rating finite when a snapshot wins every game (after n straight
wins against random, about 400 log10(n) above it). Nothing is inherited and nothing
outside the window is held fixed, so a rating says how strong a snapshot is against the
fixed references, and a learner that beats its past snapshots without getting stronger
against them rises at most by the spread one window of snapshots can hold, never
without bound. The learner's rating (`elo`) is that of its newest snapshot that has
played as the learner.

Games are counted once (by episode id: a game whose both seats the learner played, in
one message, is one game against the latest weights), by opponent kind and by seat (the
learner's chunk's agent_id), over the last `record_window` games of each.
No torch: snapshots and references are exported policies. `ratings`, `snapshot_files`
and `restore` carry the league over a restart (league_files.py); references are not
saved (they are fixed), nor the opponents of past versions (games of versions before a
restart are counted, not rated).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.settings.hyperparameters import SelfPlayConfig
from app.training.onnx_export import tempered_policy, uniform_policy
from app.training.policy_state import PolicyState, set_state_payload

SCORES = {"win": 1.0, "draw": 0.5, "loss": 0.0}
OUTCOMES = ("win", "draw", "loss")
RANDOM = "random"  # the uniformly random reference's name
LATEST, REFERENCE, SNAPSHOT = "latest", "reference", "snapshot"  # kinds of opponent
SNAPSHOTS_RECORD = "snapshots"  # the opponent label of the per-seat records of games against snapshots
EXPLOITERS_RECORD = "exploiters"  # ... and against frozen exploiters
REMEMBERED_VERSIONS = 1_000  # versions whose opponent is remembered, to rate games reported late
REMEMBERED_EPISODES = 10_000  # games remembered by episode id, so that each is counted once
TEMPERED_KEPT_MORE = 4  # tempered opponents kept beyond the window: the latest weights', frozen exploiters'
DEFAULT_SEAT = "default"  # the seat of a chunk without an agent_id
ELO_SCALE = 400.0
NEWTON_STEPS = 100
MAX_NEWTON_STEP = 200.0  # rating points one Newton step moves a rating at most (keeps the fit stable)

Player = int | str  # a snapshot's weights_seq_no, a reference's name, or a tempered snapshot's key (tempered_key)


TEMPERED = "@tempered"  # the end of a tempered snapshot's key ('@' is in no reference's name)


def tempered_key(version: int) -> str:
    """The key of snapshot `version` played tempered: a player of its own."""
    return f"{version}{TEMPERED}"


def is_snapshot(player: Player) -> bool:
    """A key of one of the learner's snapshots, as trained or tempered (not an exploiter's, not a reference's)."""
    return isinstance(player, int) and player >= 0 or isinstance(player, str) and player.endswith(TEMPERED)


@dataclass
class Snapshot:
    """A frozen version of the learner and the ratings its games give it: as trained, and tempered
    (as the learner's opponent plays it at a temperature other than 1; else unused)."""

    state: PolicyState
    elo: float
    tempered_elo: float

    @property
    def weights_seq_no(self) -> int:
        return self.state.weights_seq_no


@dataclass(frozen=True)
class Opponent:
    """The opponent of one version: its kind, and which reference or snapshot."""

    kind: str  # LATEST, REFERENCE or SNAPSHOT
    player: Player | None = None  # the reference's name, the snapshot's version (an exploiter's: negative); None for LATEST

    def label(self) -> str:
        """Its row in the per-seat records: a reference's name, 'snapshots', 'exploiters' or 'latest'."""
        if self.kind == SNAPSHOT:
            return EXPLOITERS_RECORD if is_exploiter(self.player) else SNAPSHOTS_RECORD
        return str(self.player) if self.kind == REFERENCE else LATEST


def is_exploiter(player: Player | None) -> bool:
    """A frozen exploiter's key: minus the version at which it joined (a learner's snapshots are >= 0)."""
    return isinstance(player, int) and player < 0


@dataclass(frozen=True)
class Game:
    """One learner chunk that ends a game: its episode, seat (agent_id), outcome and version."""

    episode_id: str | None
    seat: str | None
    outcome: str
    weights_seq_no: int | None


@dataclass
class _Results:
    """Score and games of one pair (learner-side snapshot, opponent), from the snapshot's side."""

    score: float = 0.0
    games: int = 0


@dataclass
class _Records:
    """Recent outcomes per (opponent label, seat), each window `size` long."""

    size: int
    outcomes: dict[tuple[str, str], deque[str]] = field(default_factory=dict)

    def add(self, opponent: str, seat: str, outcome: str) -> None:
        self.outcomes.setdefault((opponent, seat), deque(maxlen=self.size)).append(outcome)

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"opponent": opponent, "seat": seat, **{o: recent.count(o) for o in OUTCOMES}}
            for (opponent, seat), recent in sorted(self.outcomes.items())
        ]


class TemperedPolicies:
    """Policies as the learner's opponent plays them: their logits divided by `temperature`
    (onnx_export.tempered_policy); the last `kept` made are kept, as a snapshot is drawn again and again."""

    def __init__(self, temperature: float, kept: int) -> None:
        self.temperature = temperature
        self._kept = kept
        self._made: OrderedDict[int, tuple[bytes, PolicyState]] = OrderedDict()  # version -> (its model, tempered)

    def __call__(self, state: PolicyState) -> PolicyState:
        if self.temperature == 1.0:
            return state
        source, tempered = self._made.get(state.weights_seq_no, (b"", None))
        if tempered is None or source != state.onnx_bytes:
            onnx_bytes = tempered_policy(state.onnx_bytes, self.temperature)
            tempered = PolicyState(state.weights_seq_no, onnx_bytes, set_state_payload(onnx_bytes))
            self._made[state.weights_seq_no] = (state.onnx_bytes, tempered)
            while len(self._made) > self._kept:
                self._made.popitem(last=False)
        return tempered


class League:
    """The references, snapshots, opponents, game records and ratings of one self-play learner."""

    def __init__(self, cfg: SelfPlayConfig, seed: int = 0, temperature: float = 1.0) -> None:
        self.cfg = cfg
        self.played = TemperedPolicies(temperature, kept=cfg.window + TEMPERED_KEPT_MORE)  # snapshots and latest, as opponents
        self.references: dict[str, float] = {  # fixed ratings
            RANDOM: cfg.random_elo,
            **{name: reference.elo for name, reference in cfg.scripted_references.items()},
        }
        self._reference_states: dict[str, PolicyState] = {}  # made from the learner's first export
        self.snapshots: deque[Snapshot] = deque()
        self.exploiters: deque[Snapshot] = deque()  # frozen exploiters (SelfPlayConfig.exploiter), the last `window`
        self.results: dict[tuple[int, Player], _Results] = {}
        self.rated_games = 0
        self.games = 0  # every game reported, each once
        self.records = _Records(cfg.record_window)
        self.evaluation_records = _Records(cfg.record_window)  # evaluation games: both sides play their mode
        self._rng = random.Random(seed)
        self._versions: OrderedDict[int, tuple[int, Opponent]] = OrderedDict()  # version -> (learner's snapshot, opponent)
        self._episodes: OrderedDict[str, None] = OrderedDict()  # games counted, by episode id
        self._fitted = True
        self.opponent = Opponent(LATEST)  # of the current version

    # -- Versions and opponents ---------------------------------------------------------

    def on_new_version(self, weights_seq_no: int, learner: PolicyState) -> PolicyState:
        """Keep a snapshot if one is due (the learner's weights changed `snapshot_every`
        versions after the last snapshot's), draw the opponent of this version, return its policy."""
        if not self._reference_states:
            self._reference_states = {name: _reference_state(learner, name) for name in self.references}
        if (
            not self.snapshots
            or learner.weights_seq_no - self.snapshots[-1].weights_seq_no >= self.cfg.snapshot_every
            or self._meets_snapshot_score(learner)
        ):
            self._take_snapshot(learner)
        self.opponent = self._draw()
        self._versions[weights_seq_no] = (self.snapshots[-1].weights_seq_no, self.opponent)
        while len(self._versions) > REMEMBERED_VERSIONS:
            self._versions.popitem(last=False)
        if self.opponent.kind == REFERENCE:
            return self._reference_states[str(self.opponent.player)]
        return self.played(self._snapshot(int(self.opponent.player)).state if self.opponent.kind == SNAPSHOT else learner)  # type: ignore[arg-type]

    def _meets_snapshot_score(self, learner: PolicyState) -> bool:
        """Whether the learner changed since its newest snapshot and its rated games since then
        (against the references and older snapshots) meet `snapshot_score`."""
        if self.cfg.snapshot_score is None or not self.snapshots:
            return False
        newest = self.snapshots[-1].weights_seq_no
        if learner.weights_seq_no == newest:  # not trained since: the same weights
            return False
        scores = [r for (a, _), r in self.results.items() if a == newest]
        games = sum(r.games for r in scores)
        return games >= self.cfg.snapshot_games and sum(r.score for r in scores) >= self.cfg.snapshot_score * games

    def _take_snapshot(self, learner: PolicyState) -> None:
        """A new snapshot, starting (the fit's first guess) at the learner's rating; its games decide it."""
        self.snapshots.append(Snapshot(learner, self.elo, self.elo))
        while len(self.snapshots) > self.cfg.window:
            self.snapshots.popleft()
        self._forget_unused()
        self._fitted = False

    def add_exploiter(self, state: PolicyState) -> None:
        """A frozen exploiter joins the pool (`state.weights_seq_no`: its key, negative), starting
        at the learner's rating; its games against the learner's snapshots rate it."""
        assert is_exploiter(state.weights_seq_no), state.weights_seq_no
        self.exploiters.append(Snapshot(state, self.elo, self.elo))
        while len(self.exploiters) > self.cfg.window:
            self.exploiters.popleft()
        self._forget_unused()
        self._fitted = False

    def _draw(self) -> Opponent:
        """The opponent of the next version, by the schedule (see the module's docstring)."""
        draw = self._rng.random()
        older = list(self.snapshots)[:-1] + list(self.exploiters)  # the newest snapshot is the learner's own
        for name, share in [(RANDOM, self.cfg.play_against_random_ratio)] + [
            (name, reference.play_ratio) for name, reference in self.cfg.scripted_references.items()
        ]:
            if draw < share:
                return Opponent(REFERENCE, name)
            draw -= share
        if draw < self.cfg.play_against_latest_ratio:
            return Opponent(LATEST)
        if not older:  # no snapshot but the learner's own yet: a rated game rather than one against itself
            return Opponent(REFERENCE, RANDOM)
        if self.cfg.snapshot_sampling == "pfsp":
            self._fit()
            ratings = self._ratings()
            weights = [(1.0 - expected_score(self.elo, ratings[self._met(s.weights_seq_no)])) ** 2 for s in older]
            if sum(weights) > 1e-9:
                return Opponent(SNAPSHOT, self._rng.choices(older, weights)[0].weights_seq_no)
        return Opponent(SNAPSHOT, self._rng.choice(older).weights_seq_no)

    @property
    def tempered(self) -> bool:
        """Whether the opponents play tempered: a snapshot as the opponent is then a player of its own."""
        return self.played.temperature != 1.0

    def _met(self, player: Player) -> Player:
        """The key of the player the learner meets when `player` is its opponent (a snapshot's: its tempered one's)."""
        return tempered_key(int(player)) if self.tempered and is_snapshot(player) else player

    def _snapshot(self, version: int) -> Snapshot:
        return next(s for s in self._players() if s.weights_seq_no == version)

    def _players(self) -> list[Snapshot]:
        """The rated players that are not references: the learner's snapshots, then the frozen exploiters."""
        return [*self.snapshots, *self.exploiters]

    # -- Games ------------------------------------------------------------------------

    def record_games(self, games: list[Game]) -> int:
        """Count (and where both players are known and differ, rate) the games of one message:
        chunks of one episode id are one game (two seats of the learner: a game against the
        latest weights), and a game seen before is not counted again. Returns the games rated."""
        by_episode: dict[str, list[Game]] = {}
        for game in games:
            if game.episode_id is not None:
                by_episode.setdefault(game.episode_id, []).append(game)
        rated = 0
        for game in [g for g in games if g.episode_id is None] + [seats[0] for seats in by_episode.values()]:
            if game.episode_id is not None:
                if game.episode_id in self._episodes:
                    continue
                self._episodes[game.episode_id] = None
                while len(self._episodes) > REMEMBERED_EPISODES:
                    self._episodes.popitem(last=False)
                seats = by_episode[game.episode_id]
                if len(seats) > 1:  # the learner played both seats: itself, whatever the version's opponent
                    self.games += 1
                    for seat in seats:
                        self.records.add(LATEST, seat.seat or DEFAULT_SEAT, seat.outcome)
                    continue
            rated += self._record(game)
        return rated

    def record_evaluations(self, games: list[Game]) -> None:
        """Count evaluation games (both sides play their mode; never rated, never trained on) by
        their version's opponent and the seat: how well the learner plays greedily, beside its rating.
        A game whose both seats the learner played is one against the latest weights."""
        by_episode: dict[str | None, list[Game]] = {}
        for game in games:
            by_episode.setdefault(game.episode_id, []).append(game)
        for episode_id, seats in by_episode.items():
            itself = episode_id is not None and len(seats) > 1
            for game in seats:
                known = self._versions.get(game.weights_seq_no) if game.weights_seq_no is not None else None
                if itself or known is not None:  # else a version before a restart: its opponent is unknown
                    label = LATEST if itself else known[1].label()  # type: ignore[index]
                    self.evaluation_records.add(label, game.seat or DEFAULT_SEAT, game.outcome)

    def _record(self, game: Game) -> int:
        """Count one game against its version's opponent; rate it if that is known and not the learner itself."""
        self.games += 1
        known = self._versions.get(game.weights_seq_no) if game.weights_seq_no is not None else None
        if known is None:  # a version before a restart, or too old: its opponent is unknown
            return 0
        learner_snapshot, opponent = known
        self.records.add(opponent.label(), game.seat or DEFAULT_SEAT, game.outcome)
        if opponent.kind == LATEST or opponent.player == learner_snapshot:
            return 0
        if opponent.kind == SNAPSHOT and not self._known(int(opponent.player)):  # type: ignore[arg-type]
            return 0
        if not any(s.weights_seq_no == learner_snapshot for s in self.snapshots):
            return 0  # the learner's snapshot has left the window since
        results = self.results.setdefault((learner_snapshot, self._met(opponent.player)), _Results())  # type: ignore[arg-type]
        results.score += SCORES[game.outcome]
        results.games += 1
        self.rated_games += 1
        self._fitted = False
        return 1

    def _known(self, version: int) -> bool:
        return any(s.weights_seq_no == version for s in self._players())

    def _forget_unused(self) -> None:
        """Drop the results of snapshots that left the window (the ratings are the window's)."""
        kept = set(self._ratings())
        self.results = {(a, b): r for (a, b), r in self.results.items() if a in kept and (b in kept or b in self.references)}

    # -- Ratings ----------------------------------------------------------------------

    @property
    def elo(self) -> float:
        """The learner's rating: that of its newest snapshot that has played a rated game as the
        learner (a snapshot just taken has no games of its own yet); the random reference's before any."""
        self._fit()
        played = {a for a, _ in self.results}
        rated = [s for s in self.snapshots if s.weights_seq_no in played]
        return rated[-1].elo if rated else self.snapshots[-1].elo if self.snapshots else self.cfg.random_elo

    def _ratings(self) -> dict[Player, float]:
        """The rated players' keys and current ratings: snapshots, frozen exploiters, tempered snapshots."""
        ratings: dict[Player, float] = {s.weights_seq_no: s.elo for s in self._players()}
        if self.tempered:
            ratings.update({tempered_key(s.weights_seq_no): s.tempered_elo for s in self.snapshots})
        return ratings

    def _fit(self) -> None:
        """The MAP ratings of the kept players given their games and the prior (fit_ratings)."""
        if self._fitted or not self.snapshots:
            self._fitted = True
            return
        prior = self.cfg.prior_games
        pairs: list[tuple[Player, Player, float, float]] = [(a, b, r.score, float(r.games)) for (a, b), r in self.results.items()]
        pairs += [(s.weights_seq_no, RANDOM, prior / 2, prior) for s in self._players()]
        if self.tempered:
            pairs += [(tempered_key(s.weights_seq_no), s.weights_seq_no, prior / 2, prior) for s in self.snapshots]
        fitted = fit_ratings(self._ratings(), pairs, self.references)
        for player in self._players():
            player.elo = fitted[player.weights_seq_no]
        for snapshot in self.snapshots:
            snapshot.tempered_elo = fitted.get(tempered_key(snapshot.weights_seq_no), snapshot.elo)
        self._fitted = True

    # -- On disk and on show --------------------------------------------------------

    def ratings(self) -> dict[str, Any]:
        """What the league keeps over a restart (but the ONNX files): ratings, results, records."""
        self._fit()
        return {
            "format": 2,
            "rated_games": self.rated_games,
            "games": self.games,
            "snapshots": [{"weights_seq_no": s.weights_seq_no, "elo": s.elo, "tempered_elo": s.tempered_elo} for s in self.snapshots],
            "exploiters": [{"weights_seq_no": s.weights_seq_no, "elo": s.elo} for s in self.exploiters],
            "results": [[a, b, r.score, r.games] for (a, b), r in self.results.items()],
            "records": _saved(self.records),
            "evaluation_records": _saved(self.evaluation_records),
        }

    def snapshot_files(self) -> dict[int, bytes]:
        """Each snapshot's ONNX, by version (a frozen exploiter's by its key)."""
        return {s.weights_seq_no: s.state.onnx_bytes for s in self._players()}

    def restore(self, ratings: dict[str, Any], snapshot_files: dict[int, bytes]) -> None:
        """Take back what `ratings` and `snapshot_files` gave (the last `window` snapshots);
        a league saved before format 2 keeps its snapshots and their ratings, not its games."""
        self.rated_games, self.games = int(ratings["rated_games"]), int(ratings.get("games", ratings["rated_games"]))
        for players, saved_players in ((self.snapshots, ratings["snapshots"]), (self.exploiters, ratings.get("exploiters", []))):
            players.clear()
            for snapshot in saved_players[-self.cfg.window :]:
                onnx_bytes = snapshot_files[snapshot["weights_seq_no"]]
                state = PolicyState(int(snapshot["weights_seq_no"]), onnx_bytes, set_state_payload(onnx_bytes))
                elo = float(snapshot["elo"])
                players.append(Snapshot(state, elo, float(snapshot.get("tempered_elo", elo))))
        self.results = {(int(a), b): _Results(float(score), int(games)) for a, b, score, games in ratings.get("results", [])}
        _restore(self.records, ratings.get("records", []))
        _restore(self.evaluation_records, ratings.get("evaluation_records", []))
        saved = (len(ratings["snapshots"]) + len(ratings.get("exploiters", [])), len(self.results))
        self._forget_unused()
        # The saved ratings are the fit of these results, unless the window dropped some: kept as they are.
        self._fitted = ratings.get("format") == 2 and saved == (len(self._players()), len(self.results))

    def summary(self) -> dict[str, Any]:
        """The rating, the league and the recent records, for /api/policies and the dashboard."""
        self._fit()
        opponent = self.opponent
        return {
            "elo": self.elo,
            "rated_games": self.rated_games,
            "games": self.games,
            "opponent": {"kind": opponent.kind, "player": opponent.player},
            "opponent_weights_seq_no": opponent.player if opponent.kind == SNAPSHOT else None,
            "opponent_temperature": self.played.temperature,
            "references": [{"name": name, "elo": elo, "scripted": name != RANDOM} for name, elo in self.references.items()],
            "snapshots": [
                {
                    "weights_seq_no": s.weights_seq_no,
                    "elo": s.elo,
                    "tempered_elo": s.tempered_elo if self.tempered else None,
                    "games": self._games_of(s.weights_seq_no),
                    "against_random": self._score_of(s.weights_seq_no, lambda b: b == RANDOM),
                    "against_snapshots": self._score_of(s.weights_seq_no, is_snapshot),
                    "against_exploiters": self._score_of(s.weights_seq_no, is_exploiter),
                }
                for s in self.snapshots
            ],
            "exploiters": [
                {"joined_at": -s.weights_seq_no, "elo": s.elo, "games": self._games_of(s.weights_seq_no)} for s in self.exploiters
            ],
            "record_window": self.cfg.record_window,
            "records": self.records.rows(),
            "evaluation_records": self.evaluation_records.rows(),
        }

    def _score_of(self, version: int, against: Any) -> dict[str, float] | None:
        """The snapshot's mean score (win 1, draw 1/2) and games as the learner against the
        opponents `against(player)` picks, from the rated games kept; None before any."""
        kept = [r for (a, b), r in self.results.items() if a == version and against(b)]
        games = sum(r.games for r in kept)
        return {"score": sum(r.score for r in kept) / games, "games": games} if games else None

    def _games_of(self, version: int) -> int:
        """The rated games a snapshot played, on either side."""
        return sum(r.games for (a, b), r in self.results.items() if version in (a, b) or b == tempered_key(version))


def _saved(records: _Records) -> list[list[str]]:
    """Records as saved: (opponent, seat, one letter per outcome)."""
    return [[o, s, "".join(x[0] for x in recent)] for (o, s), recent in records.outcomes.items()]


def _restore(records: _Records, saved: list[list[str]]) -> None:
    names = {outcome[0]: outcome for outcome in OUTCOMES}
    for opponent, seat, recent in saved:
        for letter in recent:
            records.add(opponent, seat, names[letter])


def expected_score(rating: float, opponent: float) -> float:
    """Elo's expected score of `rating` against `opponent`: 1 / (1 + 10^((opponent - rating) / 400))."""
    return float(1.0 / (1.0 + 10.0 ** ((opponent - rating) / ELO_SCALE)))


def fit_ratings(
    start: dict[Player, float], pairs: list[tuple[Player, Player, float, float]], fixed: dict[str, float]
) -> dict[Player, float]:
    """The maximum a posteriori Elo (Bradley-Terry) ratings of the players of `start` (the first
    guess), given `pairs` (a, b, a's score, games; the prior among them) against each other and
    against the `fixed` players: Newton's method on the concave log-posterior."""
    keys = list(start)
    index = {key: i for i, key in enumerate(keys)}
    ratings = np.array([start[key] for key in keys], dtype=np.float64)
    c = math.log(10) / ELO_SCALE
    for _ in range(NEWTON_STEPS):
        gradient = np.zeros(len(ratings))
        hessian = np.zeros((len(ratings), len(ratings)))
        for a, b, score, games in pairs:
            i, j = index[a], index.get(b)
            expected = expected_score(ratings[i], ratings[j] if j is not None else fixed[str(b)])
            weight = c * c * games * expected * (1 - expected)
            gradient[i] += c * (score - games * expected)
            hessian[i, i] -= weight
            if j is not None:
                gradient[j] -= c * (score - games * expected)
                hessian[j, j] -= weight
                hessian[i, j] += weight
                hessian[j, i] += weight
        step = np.clip(np.linalg.solve(hessian, -gradient), -MAX_NEWTON_STEP, MAX_NEWTON_STEP)
        ratings += step
        if np.max(np.abs(step)) < 1e-6:
            break
    return {key: float(rating) for key, rating in zip(keys, ratings)}


def _reference_state(learner: PolicyState, name: str) -> PolicyState:
    """A reference's model with the learner's interface (version 0: it never changes): the
    uniformly random player, which a scripted reference's model also is, naming itself."""
    onnx_bytes = uniform_policy(learner.onnx_bytes, scripted_reference=None if name == RANDOM else name)
    return PolicyState(0, onnx_bytes, set_state_payload(onnx_bytes))
