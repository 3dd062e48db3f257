"""Response and request bodies of the REST API, so the OpenAPI docs are exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.settings.env_params import EnvParam, EnvParamValue, Measure
from app.settings.hyperparameters import SelfPlayConfig
from app.spaces.models import ObservationSpace, Space
from app.training.algorithms import Algorithm, AlgorithmSpec, algorithm_sections
from app.training.algorithms.ppo.config import PPOConfig


class Health(BaseModel):
    status: str = Field(description="`ok` while the gateway serves.")
    weights_seq_no: int
    uptime_s: float


class LearnerStats(BaseModel):
    """The latest training step's statistics (absent before the first one): PPO's losses,
    or SAC's (qf_loss, actor_loss, alpha, ...); entropy for both; for a population's member,
    also the values of the hyperparameters its population varies (learning_rate, ...)."""

    model_config = ConfigDict(extra="allow")

    policy_loss: float | None = None
    vf_loss: float | None = None
    entropy: float | None = None
    approx_kl: float | None = None
    clip_frac: float | None = None
    explained_var: float | None = None
    qf_loss: float | None = Field(None, description="SAC: mean squared TD error of the twin Q networks.")
    qf1_values: float | None = Field(None, description="SAC: mean Q1(s, a) over the minibatches.")
    actor_loss: float | None = Field(None, description="SAC: alpha * log pi - min Q.")
    alpha: float | None = Field(None, description="SAC: the entropy coefficient.")
    gradient_steps: float | None = Field(None, description="SAC: gradient steps in this training step.")
    buffer_size: float | None = Field(None, description="SAC: transitions in the replay buffer.")
    owed_updates: float | None = Field(None, description="SAC: gradient steps the data received asks for, not yet done.")
    entropy_share: float | None = Field(
        None, description="PPO with an entropy floor: the entropy as a share of the largest the legal actions allow."
    )
    entropy_bonus: float | None = Field(
        None, description="PPO with an entropy floor: the bonus added to ent_coef now (0 while above the floor)."
    )
    bc_loss: float | None = Field(
        None, description="PPO with demos and bc_strength: the behavioural-cloning loss on the demonstrations (weight above 0)."
    )
    bc_weight: float | None = Field(
        None, description="PPO with demos and bc_strength: the BC loss's weight now (decays to 0 over bc_steps)."
    )
    augmented_steps: float | None = Field(
        None, description="PPO with symmetries: the steps trained on, the steps' images included (docs/training.md)."
    )


class EpisodeWindow(BaseModel):
    """Statistics over the most recent whole episodes (of one agent's trajectory each)."""

    episodes_in_window: int
    episode_return_mean: float | None
    episode_return_min: float | None
    episode_return_max: float | None


class EvaluationStats(BaseModel):
    """Evaluation episodes (chunks or thin-client episodes marked `evaluation`): played with the
    mode, never trained on, counted apart from training's episodes."""

    evaluation_return_mean: float | None = Field(
        description="Mean return of the most recent evaluation episodes (the last 100; None before any)."
    )
    evaluation_episodes_in_window: int = Field(description="Evaluation episodes evaluation_return_mean covers.")
    num_evaluation_episodes_lifetime: int = Field(description="Evaluation episodes ended since start.")
    num_env_steps_evaluated_lifetime: int = Field(
        description="Env steps of evaluation episodes received (never in num_env_steps_sampled_lifetime)."
    )


class Games(BaseModel):
    """Games reported through chunks' `outcome`, since start, each counted once per module."""

    win: int
    loss: int
    draw: int
    against_itself: int = Field(
        description="Games in which the module played two seats (a shared policy against itself): neither a win nor a loss."
    )


class LeagueOpponent(BaseModel):
    """Whom the current version plays."""

    kind: Literal["latest", "reference", "snapshot"] = Field(
        description="latest: the learner's own weights; reference: a fixed reference player; snapshot: a kept snapshot."
    )
    player: int | str | None = Field(description="The reference's name, or the snapshot's weights_seq_no; None: latest.")


class LeagueReference(BaseModel):
    """A fixed reference player: its rating never moves."""

    name: str = Field(description="random: the uniformly random legal player; otherwise a scripted reference's name.")
    elo: float = Field(description="Its fixed rating: the scale every other rating is read against.")
    scripted: bool = Field(description="Whether clients script it (self_play.scripted_references) rather than play a model.")


class LeagueScore(BaseModel):
    """A snapshot's results against some opponents, from its rated games in the window."""

    score: float = Field(description="Mean score: a win 1, a draw 1/2, a loss 0.")
    games: int = Field(description="The games it comes from.")


class LeagueSnapshot(BaseModel):
    """A kept snapshot of the learner and the rating its own games give it."""

    weights_seq_no: int = Field(description="The learner's version this snapshot froze.")
    elo: float = Field(description="Its rating, fitted from its own games against the references and other snapshots.")
    tempered_elo: float | None = Field(
        None,
        description="Its rating as the learner's opponent plays it, at opponent_temperature: a player of its own, rated "
        "from those games; None at temperature 1, where it is `elo`.",
    )
    games: int = Field(description="Rated games it played (as the learner, between its version and the next snapshot, "
                       "or as the opponent).")
    against_random: LeagueScore | None = Field(
        description="Its score as the learner against the uniformly random legal player (None before such a game)."
    )
    against_snapshots: LeagueScore | None = Field(
        description="Its score as the learner against older snapshots (None before such a game)."
    )
    against_exploiters: LeagueScore | None = Field(
        None, description="Its score as the learner against frozen exploiters (None before such a game)."
    )


class LeagueExploiter(BaseModel):
    """A frozen copy of the learner's exploiter that joined the league when it beat the learner."""

    joined_at: int = Field(description="The version at which it joined (its key in the league: minus this).")
    elo: float = Field(description="Its rating, fitted from its games against the learner's snapshots.")
    games: int = Field(description="Rated games it played as the opponent.")


class ExploiterStatus(BaseModel):
    """The learner's main exploiter now (self_play.exploiter): how it fares against the learner."""

    module_id: str = Field(description="Its module (a learner of its own; clients never name it).")
    win_rate: float | None = Field(description="Its mean score over its last `games` games against the learner; None before that many.")
    games: int = Field(description="Games counted since it last started again from the learner's weights.")
    env_steps: int = Field(description="Env steps it trained on since it last started again.")
    joined: int = Field(description="Its frozen copies added to the league so far.")
    restarts: int = Field(description="Times it started again without joining (max_env_steps spent).")


class LeagueRecord(BaseModel):
    """The learner's recent games against one kind of opponent in one seat."""

    opponent: str = Field(
        description="A reference's name (random, or a scripted reference's), snapshots, exploiters (frozen exploiters), or latest (itself)."
    )
    seat: str = Field(description="The learner's agent_id in those games (default: chunks without one).")
    win: int = Field(description="The learner's wins in those games (recent window).")
    draw: int = Field(description="The learner's draws in those games (recent window).")
    loss: int = Field(description="The learner's losses in those games (recent window).")


class PolicyMetrics(EvaluationStats, EpisodeWindow):
    """What one module has seen and done."""

    weights_seq_no: int = Field(description="The gateway version in which this module's weights last changed.")
    num_env_steps_sampled_lifetime: int
    num_env_steps_trained_lifetime: int
    num_episodes_lifetime: int
    last_batch_env_steps: int | None = Field(description="Env steps the module's latest training step trained on.")
    max_batch_env_steps: int = Field(
        description="The most env steps one of its training steps trained on (never more than its train_batch_size)."
    )
    episode_len_mean: float | None
    episode_len_min: float | None
    episode_len_max: float | None
    learner: LearnerStats
    games: Games
    win_rate: float | None = Field(description="Share of wins among the recent games reported (None before any).")
    elo: float | None = Field(None, description="ELO rating of a self-play learner (None for other modules).")
    league_records: list[LeagueRecord] | None = Field(
        None, description="A self-play learner's recent W/D/L by opponent and seat (as /api/policies' self_play.records)."
    )


class LessonStatus(BaseModel):
    """Where one curriculum (an `env_params` entry with lessons) stands."""

    lesson: int = Field(description="Index of the current lesson, from 0.")
    lesson_name: str
    lessons: int = Field(description="Lessons in the curriculum.")
    value: EnvParamValue = Field(description="The parameter's value in this lesson.")
    episodes: int = Field(description="Training episodes of the criterion's module counted since the lesson began.")
    module_id: str | None = Field(description="The module whose episodes count (None in the last lesson).")
    measure: Measure | None = Field(description="What the completion criterion measures (None in the last lesson).")
    measured: float | None = Field(
        description="The measure's mean over the lesson's last min_episodes episodes (None before any, or in the last lesson)."
    )
    threshold: float | None = Field(description="The lesson is done once measured reaches this (with min_episodes episodes).")
    min_episodes: int | None = Field(description="Episodes the lesson lasts at least, and the window of the measure.")


class Serving(BaseModel):
    """Server-side inference for thin clients."""

    actions_served_total: int = Field(description="Actions answered to GET_ACTION since start.")
    actions_logged_total: int = Field(description="LOG_ACTION steps recorded since start.")
    actions_per_s: float = Field(description="Actions answered per second, over the last few seconds.")
    forward_passes_total: int
    inference_batch_size_mean: float | None = Field(description="Observations per forward pass, recent passes.")
    action_latency_p50_ms: float | None = Field(description="GET_ACTION handling to reply, recent requests.")
    action_latency_p99_ms: float | None
    open_episodes: int
    open_episode_steps: int = Field(description="Complete steps in open episodes, not yet sent to training.")
    episodes_started_total: int
    episodes_ended: dict[str, int] = Field(description="By how: terminated, truncated, timeout, disconnect, shutdown.")


class Metrics(EvaluationStats):
    """Training progress and traffic; names follow RLlib's where RLlib has one."""

    weights_seq_no: int
    num_training_steps: int
    num_env_steps_sampled_lifetime: int
    num_env_steps_trained_lifetime: int
    num_episodes_lifetime: int
    episodes_in_window: int = Field(description="Whole episodes the episode_* statistics cover (the most recent).")
    episode_return_mean: float | None
    episode_return_min: float | None
    episode_return_max: float | None
    episode_len_mean: float | None
    episode_len_min: float | None
    episode_len_max: float | None
    learner: LearnerStats = Field(description="The default module's latest PPO statistics.")
    policies: dict[str, PolicyMetrics] = Field(description="The same per module, by module_id.")
    agents: dict[str, EpisodeWindow] = Field(
        description="Returns per agent_id (chunks that name their agent; the 1,000 most recently seen agents)."
    )
    serving: Serving = Field(description="Server-side inference for thin clients.")
    last_training_step_s: float | None = Field(description="Wall time of the latest training step.")
    env_steps_per_s: float = Field(description="Env steps received per second, over the last few seconds.")
    pending_env_steps: int = Field(description="Env steps waiting for a training step (every module's).")
    training_env_steps: int = Field(
        description="Env steps in the training step under way. Every env step sampled is trained, dropped, "
        "pending or here: num_env_steps_sampled_lifetime = num_env_steps_trained_lifetime + "
        "sum(dropped_env_steps) + pending_env_steps + training_env_steps."
    )
    training_in_progress: bool
    dropped_env_steps: dict[str, int] = Field(description="Env steps not trained on, by reason.")
    clients: dict[str, int] = Field(description="Connected clients per transport (`tcp`, `ws`).")
    connections_total: dict[str, int] = Field(description="Connections accepted since start, per transport.")
    frames_received: dict[str, int] = Field(description="Valid requests received, by message type.")
    errors: dict[str, int] = Field(description="ERROR frames sent, by code.")
    bytes_received: int
    bytes_sent: int
    uptime_s: float
    env_params: dict[str, EnvParamValue] = Field(
        description="The environment parameters' current values ({} when none): what SET_CONFIG sends now."
    )
    curriculum: dict[str, LessonStatus] = Field(description="Each parameter that follows lessons: its lesson now, by name.")


class Client(BaseModel):
    """One connected simulator."""

    id: int
    transport: str
    peer: str
    connected_at: float = Field(description="Unix time of the connection.")
    env_steps_sent: int
    sampling: bool = Field(description="Asked for GET_CONFIG or sent experience: training waits for it.")
    waiting: bool = Field(description="Waiting for SET_STATE after EPISODES_AND_GET_STATE.")
    last_weights_seq_no_sent: int | None
    frontend: int | None = Field(None, description="On Ray: the front-end it is connected to (0, 1, ...).")


class Limits(BaseModel):
    """What one client may send and how many may connect."""

    max_frame_bytes: int
    max_connections: int
    max_tcp_connections: int
    max_ws_connections: int
    max_episodes_per_message: int
    max_steps_per_message: int
    idle_timeout_s: float
    frame_timeout_s: float


class SelfPlayStatus(BaseModel):
    """The learner's league: ratings anchored to fixed references, opponents, recent records."""

    elo: float = Field(
        description="The learner's rating (its newest snapshot's), fitted from the games against the fixed references "
        "and the snapshots; the random reference is fixed at random_elo (1000 by default)."
    )
    rated_games: int = Field(description="Games rated (not those against the latest weights, itself).")
    games: int = Field(description="Games reported, each counted once.")
    opponent: LeagueOpponent = Field(description="Who the current version plays: a reference, a snapshot, or the latest weights.")
    opponent_weights_seq_no: int | None = Field(
        description="The snapshot the current version plays against; None: the latest weights or a reference."
    )
    opponent_temperature: float = Field(
        description="The snapshots and the latest weights play the opponent with their logits divided by this (1: as trained)."
    )
    references: list[LeagueReference] = Field(description="The fixed reference players; their ratings never move.")
    snapshots: list[LeagueSnapshot] = Field(description="Kept snapshots, oldest first.")
    exploiters: list[LeagueExploiter] = Field(default_factory=list, description="Kept frozen exploiters, oldest first.")
    exploiter: ExploiterStatus | None = Field(None, description="The main exploiter now; None without one.")
    record_window: int = Field(description="Recent games per opponent and seat that `records` counts.")
    records: list[LeagueRecord] = Field(description="Wins, draws and losses by opponent and seat over recent games.")
    evaluation_records: list[LeagueRecord] = Field(
        description="The same over recent evaluation games (both sides play their most likely action; never rated or "
        "trained on): how strong the greedy policy is against each kind of opponent."
    )


class PopulationMember(BaseModel):
    """One member of a population: how it does and what it trains with now."""

    episode_return_mean: float | None = Field(description="Mean return of its episode window (restarted when it copies another).")
    env_steps_since_decision: int = Field(description="Env steps trained since it was last ready (it is again at ready_env_steps).")
    hyperparameters: dict[str, float] = Field(description="Its values of the hyperparameters the population varies.")


class PopulationExploit(BaseModel):
    """A member that copied a better one, and the hyperparameters it took."""

    weights_seq_no: int = Field(description="The version published with the copy.")
    member: str
    source: str = Field(description="The member it copied (weights, optimizer state, statistics).")
    member_return: float
    source_return: float
    changes: dict[str, tuple[float, float]] = Field(description="Each varied hyperparameter: [old value, new value].")


class PopulationStatus(BaseModel):
    """A population's members (population-based training, docs/training.md#populations)."""

    serves: str = Field(description="The member whose model the module serves: the best by return.")
    exploits: int = Field(description="Copies made so far.")
    members: dict[str, PopulationMember]
    recent_exploits: list[PopulationExploit] = Field(description="The latest copies, oldest first.")


class BestModelView(BaseModel):
    """Which version a module's best.onnx is (RLLINK.md, "The model a game ships"), as its best.json says."""

    weights_seq_no: int = Field(description="The version best.onnx holds: the newest that played in the window.")
    evaluation_return_mean: float = Field(description="Mean return of the window's evaluation episodes, the highest so far.")
    episodes: int = Field(description="Evaluation episodes in the window (best_model_episodes).")
    oldest_weights_seq_no: int = Field(description="The oldest version that played in the window.")


SHOWN_FOR_EVERY_MODULE = "ppo"  # its section is in every trainable module's view, as before there were others


def _module_section(spec: AlgorithmSpec) -> tuple[Any, Any]:
    """An algorithm's section of a module's view (/api/policies, /api/config)."""
    others = "" if spec.name == SHOWN_FOR_EVERY_MODULE else ", for a module of another algorithm"
    return spec.config | None, Field(
        None, description=f"Its {spec.name.upper()} hyperparameters (None for a frozen opponent{others})."
    )


def _patch_section(spec: AlgorithmSpec) -> tuple[Any, Any]:
    """An algorithm's section of PATCH /api/config: what may change of its hyperparameters."""
    return spec.patch | None, Field(None, description=f"Changes to the {spec.name.upper()} modules' hyperparameters.")


@algorithm_sections(_module_section)  # `ppo`, `sac`: a section per algorithm (api.py's hyperparameter_sections fills them)
class Policy(PolicyMetrics):
    """One module: what it plays, how it trains and how it does (GET /api/policies)."""

    module_id: str
    observation_space: ObservationSpace
    action_space: Space
    action_distribution: str
    action_noise: str = Field(description="A Box action's N(0, 1) draws as clients sample them: white or pink (SET_CONFIG's).")
    trainable: bool = Field(description="False for a frozen self-play opponent.")
    opponent_of: str | None = Field(description="For a self-play opponent: the module whose snapshots it plays.")
    algorithm: Algorithm = Field(description="How it trains (an opponent: as its learner).")
    action_masking: bool = Field(description="Its ONNX takes an action_mask input; chunks and GET_ACTION may carry one.")
    self_play: SelfPlayStatus | None = Field(description="For a self-play learner: its rating and league.")
    population: PopulationStatus | None = Field(
        None, description="For a population's module (it serves its best member's model): its members and their copies."
    )
    member_of: str | None = Field(None, description="For a population's member: the module its clients name.")
    best_model: BestModelView | None = Field(
        None, description="Its best.onnx so far (<models-dir>/<module_id>/best.onnx; `export --version best`), once "
        "evaluation episodes chose one."
    )


@algorithm_sections(_module_section)  # `ppo`, `sac`: a section per algorithm, as Policy
class PolicyConfigView(BaseModel):
    """One module in GET /api/config."""

    observation_space: ObservationSpace
    action_space: Space
    trainable: bool
    opponent_of: str | None
    algorithm: Algorithm
    action_masking: bool
    self_play: SelfPlayConfig | None


class GatewayConfig(BaseModel):
    """The gateway's current configuration (secrets are never shown)."""

    observation_space: ObservationSpace = Field(
        description="The default module's observation space (adopted from the first game when the gateway was given none)."
    )
    action_space: Space = Field(
        description="The default module's action space (adopted from the first game when the gateway was given none)."
    )
    env_steps_per_sample: int
    force_on_policy: bool = Field(description="Whether clients wait for each version: the setting, off when every module is off-policy.")
    algorithm: Algorithm = Field(description="The default algorithm of the modules.")
    device: str = Field(description="Where the learners train (auto resolved).")
    learner_process: bool = Field(description="Whether the learners train in a process of their own (else a thread of the gateway's).")
    onnx_input_name: str
    onnx_output_names: list[str]
    train_batch_size: int
    barrier_timeout_s: float
    max_policy_lag: int
    ppo: PPOConfig = Field(description="The default module's PPO hyperparameters.")
    policies: dict[str, PolicyConfigView] = Field(description="Every module, by module_id.")
    policy_mapping: dict[str, str] = Field(description="agent_id glob -> module_id; the first glob that matches wins.")
    default_module_id: str
    limits: Limits
    tcp_enabled: bool
    ws_per_message_deflate: bool
    checkpoint_dir: Path
    auth_enabled: bool = Field(description="Whether clients must present the shared token (never shown).")
    tls_enabled: bool
    cors_origins: list[str]
    env_params: dict[str, EnvParam] | None = Field(description="The env_params setting: constants and curriculum lessons.")


@algorithm_sections(_patch_section)  # `ppo`, `sac`: each algorithm's <Name>ConfigPatch
class PolicyPatch(BaseModel):
    """One module's changes in `PATCH /api/config`: `ppo` for a PPO module, `sac` for a SAC one."""

    model_config = ConfigDict(extra="forbid")


@algorithm_sections(_patch_section)  # `ppo`, `sac`: each algorithm's <Name>ConfigPatch
class ConfigPatch(BaseModel):
    """Body of `PATCH /api/config`: `ppo` changes every PPO module, `sac` every SAC module,
    `policies` one by one."""

    model_config = ConfigDict(extra="forbid")

    policies: dict[str, PolicyPatch] = Field(default_factory=dict)


class MetricsHistoryView(BaseModel):
    """GET /api/metrics/history."""

    points: list[Metrics] = Field(description="Snapshots of /api/metrics after training steps, oldest first.")
    stride: int = Field(description="One of every `stride` training steps is kept (1 until the history first fills).")
    max_points: int = Field(description="At most this many points are kept.")
