"""All gateway settings in one place.

Read from environment variables prefixed `RLLINK_` (nested with `__`, e.g.
`RLLINK_PPO__LEARNING_RATE`) and, when started from the command line, from flags of
the same name in kebab case (`--http-port`, `--ppo.learning-rate`). Spaces are JSON:
`RLLINK_ACTION_SPACE='{"type": "box", "shape": [1], "low": -2, "high": 2}'`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.settings.env_params import EnvParam, curricula
from app.settings.hyperparameters import MODULE_ID_PATTERN, ModelConfig, PolicyConfig
from app.settings.policies import PolicySet
from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE, ObservationSpace, Space
from app.spaces.onnx_names import input_name_problem
from app.training.algorithms import ALGORITHMS, DEFAULT_ALGORITHM, Algorithm, AlgorithmSpec, algorithm_sections

MiB = 1024 * 1024


def default_decode_workers() -> int:
    """One decode process per CPU core beside the event loop's, at most 4."""
    return min(4, (os.cpu_count() or 1) - 1)


def _hyperparameter_section(spec: AlgorithmSpec) -> tuple[type[BaseModel], Any]:
    """An algorithm's section of the settings: its flags --<name>.*, RLLINK_<NAME>__*, the config file's <name>:."""
    summary = (spec.config.__doc__ or "").strip().splitlines()[0].rstrip(".")
    return spec.config, Field(
        default_factory=spec.config, description=f"{summary}; each is a flag --{spec.name}.<name-in-kebab-case>."
    )


@algorithm_sections(_hyperparameter_section)  # `ppo`, `sac`: a section per algorithm of app/training/algorithms/, last
class Settings(BaseSettings):
    """Everything the gateway can be told; defaults train CartPole-v1 on localhost (`export --help`: a run's model as a file)."""

    model_config = SettingsConfigDict(
        env_prefix="RLLINK_",
        env_nested_delimiter="__",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        extra="ignore",
    )

    # Where to listen.
    host: str = Field("127.0.0.1", description="Interface for HTTP/WebSocket (and TCP unless --tcp-host is set).")
    http_port: int = Field(8000, ge=0, le=65535, description="HTTP and WebSocket port; 0 picks a free one.")
    tcp_host: str | None = Field(None, description="Interface for the raw TCP bridge.")
    tcp_port: int = Field(5555, ge=0, le=65535, description="Raw TCP RLlink port; 0 picks a free one.")
    tcp_enabled: bool = Field(True, description="Run the raw TCP bridge.")
    log_level: str = Field("info", description="Python logging level: debug, info, warning or error.")

    # What the simulators look like.
    observation_space: ObservationSpace = Field(
        CARTPOLE_OBSERVATION_SPACE,
        description="Observation space, as JSON: box (uint8 for images) or dict; unset (with policies unset), CartPole's until "
        "the first game declares its own in GET_CONFIG, which the module then adopts (docs: Protocol, Spaces the game declares).",
    )
    action_space: Space = Field(
        CARTPOLE_ACTION_SPACE,
        description="Action space, as JSON: discrete, multi_discrete or box; unset, adopted from the first game as observation_space.",
    )
    action_masking: bool = Field(
        False,
        description="Illegal actions can be masked: chunks and GET_ACTION carry action_mask (one 0/1 per logit), "
        "training respects it, and the ONNX takes it as a second input, action_mask (discrete action spaces; with "
        "policies: every discrete module that does not say otherwise).",
    )

    policies: dict[str, PolicyConfig] | None = Field(
        None,
        description="Several modules as JSON {module_id: {observation_space, action_space, ppo?, self_play?}}; "
        "unset: one module, default_policy, of --observation-space and --action-space.",
    )
    policy_mapping: dict[str, str] | None = Field(
        None,
        description="Which module each agent plays, as JSON {agent_id_glob: module_id}: the first matching glob wins; "
        "unset with one module: every agent plays it.",
    )

    # The RLlink contract with clients.
    env_steps_per_sample: int = Field(500, ge=1, description="Steps a client collects per EPISODES_AND_GET_STATE.")
    force_on_policy: bool = Field(True, description="Clients wait for SET_STATE before collecting more.")
    onnx_input_name: str = Field("obs", min_length=1, description="ONNX input name; 'onnx::Gemm_0' suits RLlib's reference client.")

    # Training.
    train_batch_size: int = Field(
        2000, ge=1, description="Env steps of one module that make a training batch (at most this many per batch)."
    )
    max_backlog_env_steps: int | None = Field(
        None,
        ge=1,
        description="Per module: clients that send it experience are held (not read, their replies wait) while more env "
        "steps than this wait to train (off-policy: pending, or their gradient steps owed); unset: 2 x its train_batch_size; "
        "never less than its train_batch_size.",
    )
    barrier_timeout_s: float = Field(10.0, gt=0, description="Train on what is there this many seconds after its oldest data arrived.")
    max_policy_lag: int = Field(2, ge=0, description="Drop data collected more than this many versions ago.")
    max_training_backlog: int = Field(
        1000,
        ge=0,
        description="Off-policy (clients that need not wait for each version): EPISODES_AND_GET_STATE waits for training "
        "while more env steps than this wait for their gradient steps, so a simulator faster than the learner is held "
        "back (as Reverb's rate limiter) and the update-to-data ratio holds; 0 waits every time.",
    )
    seed: int = Field(0, description="Seed for the policy's initial weights and minibatch order.")
    model: ModelConfig = Field(
        default_factory=ModelConfig,
        description="The network's memory (RLLINK.md, Recurrent policies): use_lstm, lstm_cell_size, max_seq_len; for every "
        "module unless its policies entry sets its own.",
    )
    algorithm: Algorithm = Field(
        DEFAULT_ALGORITHM, description=" or ".join(f"{name} ({spec.summary})" for name, spec in ALGORITHMS.items()) + "."
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$",
        description="Where the learners train: auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda, cuda:1, ..."
    )
    learner_threads: int = Field(
        1,
        ge=1,
        le=256,
        description="torch's intra-op threads for training on the CPU; 1 leaves the other cores to the event loop and the "
        "simulators; more speeds up large networks (SAC's 256x256) only where cores are free.",
    )
    learner_process: bool = Field(
        False,
        description="Train in a child process (at a lower priority, restarted from the checkpoints if it dies) instead "
        "of a thread of the gateway's: the event loop and the learner stop sharing one interpreter, for a second torch "
        "in RAM and a pipe hop per training step.",
    )
    checkpoint_dir: Path = Field(
        Path("checkpoints"), description="Where the policy is saved and restored from (with --run-id: the run's)."
    )
    tensorboard_dir: Path | None = Field(
        None,
        description="Write TensorBoard event files here (per module: returns, lengths, losses, entropy, KL; "
        "env steps/s); with --run-id: <runs-dir>/<run-id>/tensorboard unless set; unset: none written.",
    )
    models_dir: Path | None = Field(
        None,
        description="Each module's published models as .onnx files, <models-dir>/<module_id>/latest.onnx and "
        "v<weights_seq_no>.onnx (what a game ships); unset: beside checkpoint_dir (with --run-id: <runs-dir>/<run-id>/models).",
    )
    models_kept: int = Field(
        10, ge=0, le=100_000, description="Versions of each module kept as v<weights_seq_no>.onnx beside latest.onnx (0: latest only)."
    )
    evaluation_interval: int = Field(
        10,
        ge=0,
        le=1_000_000,
        description="Clients play every Nth episode of each env as an evaluation episode (the distribution's mode, as a "
        "shipped game plays; never trained on), SET_CONFIG's evaluation_interval; thin clients' the gateway plays itself; "
        "0: none, and no best.onnx.",
    )
    best_model_episodes: int = Field(
        10,
        ge=1,
        le=100_000,
        description="Evaluation episodes best.onnx is chosen over: the newest version of the last this many, when their "
        "mean return is the highest so far (RLLINK.md, The model a game ships; fewer overstate the version shipped "
        "more: on LunarLander-v3, five runs, windows of 10 shipped 198.0 in fresh greedy play, windows of 5 182.0).",
    )
    config: Path | None = Field(
        None, description="A YAML file of settings (the names of this list); flags and RLLINK_ variables override it."
    )
    run_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$",
        description="Name of the run: its checkpoints and a snapshot of its settings go in <runs-dir>/<run-id>/.",
    )
    runs_dir: Path = Field(Path("runs"), description="Where runs are kept, a folder per --run-id.")
    resume: bool = Field(False, description="Continue the run --run-id names (without it, an existing run is refused).")

    # Launching games (as ML-Agents' --env and --num-envs; app/startup/launcher.py) and the training budget.
    env_path: str | None = Field(
        None,
        description="A game build or simulator the gateway starts once it listens: an executable, or a command with "
        "arguments (split as a shell splits words, without its other features); each process gets the --rllink-* "
        "arguments of RLLINK.md; unset: the gateway starts none.",
    )
    num_envs: int = Field(1, ge=1, le=256, description="Processes of --env-path started (--rllink-env-index 0 to N-1).")
    time_scale: float = Field(
        1.0, gt=0, le=1000, description="Game speed each launched game is given as --rllink-time-scale (20: 20 x real time)."
    )
    headless: bool = Field(False, description="Start the games without a window: --headless-args go in their arguments.")
    headless_args: list[str] = Field(
        default_factory=lambda: ["--headless"],
        description='What --headless adds to a game\'s arguments: Godot\'s ["--headless"]; for Unity: '
        '["-batchmode", "-nographics"].',
    )
    env_args: list[str] = Field(
        default_factory=list,
        description="More arguments for every game, after the --rllink-* ones (on the command line also: what follows "
        "a lone --).",
    )
    env_max_restarts: int = Field(
        5,
        ge=0,
        le=1000,
        description="Times each launched game is started again after it exits, 1 s later, then 2, 4, ... (at most "
        "30 s); beyond: it stays down (its log says why).",
    )
    env_stop_grace_s: float = Field(
        10.0, gt=0, le=600, description="When the gateway stops: seconds the games have to exit after SIGTERM before SIGKILL."
    )
    max_env_steps: int | dict[str, int] | None = Field(
        None,
        description="Training budget in env steps trained: a number for all modules together, or JSON {module_id: steps} "
        "(each module's own; the run ends when every one is spent); then the gateway saves and exits 0; unset: no limit.",
    )
    max_seconds: float | None = Field(
        None, gt=0, description="Training budget in seconds since the gateway started serving; then it saves and exits 0."
    )

    # Demonstrations (docs/training.md, "Demonstrations"; app/training/demos.py, behavior_cloning.py).
    demos: Path | dict[str, Path] | None = Field(
        None,
        description="Demonstration file(s), episode chunks one JSON object a line: a path (each chunk trains the module "
        "it names or its agent maps to), or JSON {module_id: path}; a PPO module that starts fresh (no checkpoint) is "
        "pre-trained on them by behavioural cloning before its first version is published; a bad line refuses the start.",
    )
    bc_pretrain_epochs: int = Field(
        50, ge=1, le=10_000, description="Passes over the demonstrations of behavioural-cloning pre-training (with demos)."
    )
    bc_fit_value: bool = Field(
        True, description="Behavioural cloning also fits the value head to the demonstrations' discounted returns."
    )
    bc_strength: float = Field(
        0.0, ge=0, le=100, description="Weight of a behavioural-cloning loss on the demonstrations added to PPO's during RL "
        "(with demos; 0: none); it decays linearly to 0 over bc_steps env steps trained."
    )
    bc_steps: int = Field(
        100_000, ge=1, description="Env steps trained over which the behavioural-cloning weight decays from bc_strength to 0."
    )

    # Environment parameters and curriculum lessons (docs/training.md; app/settings/env_params.py).
    env_params: dict[str, EnvParam] | None = Field(
        None,
        description="Parameters sent to the games (SET_CONFIG, and SET_STATE when a lesson changes them), as JSON "
        "{name: value} (number, string or bool) or {name: {curriculum: [{name, value, completion_criteria: "
        "{module_id?, measure?, threshold, min_episodes?}}, ..., {name, value}]}}; unset: none.",
    )

    # Scale-out on Ray (the optional extra `rllink-gateway[ray]`; app/cluster/).
    ray_address: str | None = Field(
        None,
        description="Run on a Ray cluster at this address (auto: the running one; local: start one here); "
        "unset: one process, no Ray.",
    )
    frontends: int = Field(1, ge=1, le=256, description="With --ray-address: front-end actors (TCP, HTTP, WebSocket).")
    learner_num_gpus: float = Field(0, ge=0, description="With --ray-address: GPUs the learner actor asks Ray for.")

    # Throughput.
    decode_workers: int = Field(
        default_factory=default_decode_workers,
        ge=0,
        le=64,
        description="Processes that decode large JSON bodies (episode chunks) beside the event loop, started with "
        "the first such body; 0 decodes everything on the event loop.",
    )
    decode_timeout_s: float = Field(
        2.0,
        gt=0,
        description="Longest a decode worker may take for one body before it is decoded on the event loop instead "
        "and the worker replaced.",
    )

    # Server-side inference (thin clients: START_EPISODE, GET_ACTION, LOG_*, END_EPISODE).
    inference_max_batch: int = Field(
        4096, ge=1, le=1_000_000, description="Observations in one forward pass at most; more wait for the next."
    )
    inference_max_wait_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="How long a GET_ACTION may wait for others to fill its forward pass; 0: only those "
        "read in the same turn of the event loop share it.",
    )
    max_open_episodes: int = Field(10_000, ge=1, description="Thin-client episodes open at once, all connections together.")
    max_open_episodes_per_connection: int = Field(1_000, ge=1, description="Thin-client episodes one connection may hold open.")
    episode_timeout_s: float = Field(
        300.0, gt=0, description="A thin-client episode with no message this long is ended as truncated."
    )
    max_actions_per_message: int = Field(1024, ge=1, description="Observations in one GET_ACTION batch.")

    # Limits.
    max_frame_bytes: int = Field(8 * MiB, ge=64, le=99_999_999, description="Largest frame body accepted.")
    max_connections: int = Field(3000, ge=1, description="Open RLlink connections, both transports together.")
    max_tcp_connections: int = Field(1000, ge=1, description="Open connections on the TCP bridge.")
    max_ws_connections: int = Field(2000, ge=1, description="Open RLlink WebSocket connections.")
    max_episodes_per_message: int = Field(10_000, ge=1, description="Episode chunks in one message.")
    max_steps_per_message: int = Field(1_000_000, ge=1, description="Env steps in one message.")
    idle_timeout_s: float = Field(600.0, gt=0, description="Close a connection that sends nothing and awaits nothing this long.")
    frame_timeout_s: float = Field(30.0, gt=0, description="Close a connection that takes longer to finish a started frame.")
    ws_per_message_deflate: bool = Field(
        True,
        description="Offer WebSocket compression (permessage-deflate): less bandwidth, about twice the CPU per env step.",
    )

    # Security: all off by default (the gateway binds to 127.0.0.1).
    auth_token: SecretStr | None = Field(
        None, description="Shared secret clients must present, never shown or logged; unset means no auth."
    )
    tls_certfile: Path | None = Field(None, description="PEM certificate: serve HTTPS/WSS and TLS on the TCP bridge.")
    tls_keyfile: Path | None = Field(None, description="PEM private key of --tls-certfile.")
    cors_origins: list[str] = Field(
        default_factory=list, description="Browser origins allowed to call the REST API (CORS); none: same origin only."
    )

    @field_validator("onnx_input_name")
    @classmethod
    def _free_input_name(cls, name: str) -> str:
        if (problem := input_name_problem(name)) is not None:
            raise ValueError(f"onnx_input_name {name!r} is taken: {problem}")
        return name

    @model_validator(mode="after")
    def _run_directory(self) -> Settings:
        """With a run id, the checkpoints and event files go in the run's folder unless set;
        the models go beside the checkpoints unless set."""
        if self.run_id is not None and "checkpoint_dir" not in self.model_fields_set:
            self.checkpoint_dir = self.runs_dir / self.run_id / "checkpoints"
        if self.run_id is not None and "tensorboard_dir" not in self.model_fields_set:
            self.tensorboard_dir = self.runs_dir / self.run_id / "tensorboard"
        if self.models_dir is None:
            self.models_dir = self.checkpoint_dir.parent / "models"
        return self

    def hyperparameters(self, algorithm: str) -> BaseModel:
        """The gateway's hyperparameters of `algorithm`: its section (`ppo`, `--ppo.*`)."""
        section: BaseModel = getattr(self, algorithm)
        return section

    @property
    def run_dir(self) -> Path | None:
        return None if self.run_id is None else self.runs_dir / self.run_id

    @property
    def spaces_given(self) -> bool:
        """Whether the modules' spaces were set (flags, environment, config file, `policies`),
        rather than left at CartPole's defaults: a default module may adopt a game's
        declared spaces only where they were not (RLLINK.md, "Spaces the game declares")."""
        return self.policies is not None or bool({"observation_space", "action_space"} & self.model_fields_set)

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile must be set together")
        return self

    @model_validator(mode="after")
    def _policies(self) -> Settings:
        """Module ids that can name a directory, a mapping onto declared modules, valid
        per-module hyperparameters (of every algorithm)."""
        if self.policies is not None:
            if not self.policies:
                raise ValueError("policies must declare at least one module (or be unset)")
            for module_id, policy in self.policies.items():
                for name, spec in ALGORITHMS.items():
                    spec.config.model_validate({**self.hyperparameters(name).model_dump(), **getattr(policy, name)})
                opponent = policy.self_play and policy.self_play.opponent_module_id
                for name in (module_id, opponent) if opponent else (module_id,):
                    if not MODULE_ID_PATTERN.match(name):
                        raise ValueError(
                            f"module id {name!r} must be 1 to 64 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
                        )
        policies = PolicySet.from_settings(self)
        if self.env_path is not None and (larger := [m for m, members in policies.populations.items() if len(members) > self.num_envs]):
            raise ValueError(
                f"population of {larger[0]!r}: {len(policies.populations[larger[0]])} members but {self.num_envs} launched "
                "game(s) (num_envs): a member without a game never trains; raise num_envs or lower size"
            )
        return self

    @model_validator(mode="after")
    def _launching_and_budget(self) -> Settings:
        """Launched games connect over TCP; a budget names modules of this gateway, each with at least one step."""
        if self.env_path is not None and not self.env_path.strip():
            raise ValueError("env_path is empty: give the game's executable (or unset it)")
        if self.env_path is not None and not self.tcp_enabled:
            raise ValueError("env_path needs the TCP bridge (launched games connect over TCP): drop --no-tcp-enabled")
        if self.ray_address is not None and (self.env_path or self.max_env_steps or self.max_seconds):
            raise ValueError("env_path, max_env_steps and max_seconds are not supported with ray_address")
        budget = self.max_env_steps
        if isinstance(budget, dict):
            if not budget:
                raise ValueError("max_env_steps as a mapping must name at least one module (or be a number)")
            trainable = [module.module_id for module in PolicySet.from_settings(self).trainable]
            if unknown := [module_id for module_id in budget if module_id not in trainable]:
                raise ValueError(f"max_env_steps names {', '.join(unknown)}: not a trained module; modules: {', '.join(trainable)}")
        for name, steps in budget.items() if isinstance(budget, dict) else [(None, budget)]:
            if steps is not None and steps < 1:
                raise ValueError(f"max_env_steps{f' of {name}' if name else ''} must be at least 1, got {steps}")
        return self

    @model_validator(mode="after")
    def _demos(self) -> Settings:
        """Demonstrations name trained modules of algorithms with `demos` (PPO; SAC has no behavioural cloning here)."""
        if self.demos is None:
            return self
        trainable = {module.module_id: module for module in PolicySet.from_settings(self).trainable}
        if isinstance(self.demos, dict):
            if not self.demos:
                raise ValueError("demos as a mapping must name at least one module (or be a path)")
            if unknown := [module_id for module_id in self.demos if module_id not in trainable]:
                raise ValueError(f"demos names {', '.join(unknown)}: not a trained module; modules: {', '.join(trainable)}")
            targets = list(self.demos)
        else:
            targets = list(trainable)
        if refused := [module_id for module_id in targets if not ALGORITHMS[trainable[module_id].algorithm].demos]:
            algorithms = " or ".join(sorted({trainable[module_id].algorithm.upper() for module_id in refused}))
            cloned = " or ".join(name.upper() for name, spec in ALGORITHMS.items() if spec.demos)
            raise ValueError(
                f"demos: {', '.join(refused)} learn with {algorithms}, which has no behavioural-cloning pre-training; "
                f"give demos to {cloned} modules only (as {{module_id: path}})"
            )
        return self

    @model_validator(mode="after")
    def _env_params(self) -> Settings:
        """Parameter names are non-empty; lessons' criteria name trained modules; lessons need the local learner."""
        if not self.env_params:
            return self
        if "" in self.env_params:
            raise ValueError("env_params: a parameter name must not be empty")
        lessons = curricula(self.env_params)
        if lessons and self.ray_address is not None:
            raise ValueError(
                f"env_params: curriculum lessons ({', '.join(lessons)}) are not supported with ray_address; "
                "give constants only, or run without Ray"
            )
        policies = PolicySet.from_settings(self)
        trainable = [module.module_id for module in policies.trainable]
        for name, setting in lessons.items():
            for lesson in setting.curriculum:
                criteria = lesson.completion_criteria
                if criteria is not None and (criteria.module_id or policies.default_module_id) not in trainable:
                    raise ValueError(
                        f"env_params.{name}, lesson {lesson.name!r}: module_id "
                        f"{criteria.module_id or policies.default_module_id!r} is not a trained module; "
                        f"modules: {', '.join(trainable)}"
                    )
        return self

    @property
    def tls_enabled(self) -> bool:
        return self.tls_certfile is not None

    @property
    def tcp_bind_host(self) -> str:
        return self.tcp_host or self.host
