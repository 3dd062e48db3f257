"""The `/metrics` page: a `Metrics` snapshot in Prometheus text format (prometheus-client)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.http.rest_models import Metrics

PREFIX = "rllink_"

# (field of Metrics, Prometheus type, help); counters get `_total` appended by the library.
SCALARS = [
    ("weights_seq_no", "gauge", "Version of the current policy."),
    ("num_training_steps", "counter", "Training steps done."),
    ("num_env_steps_sampled_lifetime", "counter", "Env steps received from clients."),
    ("num_env_steps_trained_lifetime", "counter", "Env steps trained on."),
    ("num_episodes_lifetime", "counter", "Whole episodes received."),
    ("episode_return_mean", "gauge", "Mean return of the recent whole episodes."),
    ("episode_return_min", "gauge", "Lowest return of the recent whole episodes."),
    ("episode_return_max", "gauge", "Highest return of the recent whole episodes."),
    ("episodes_in_window", "gauge", "Whole episodes the episode_* statistics cover (the most recent)."),
    ("episode_len_mean", "gauge", "Mean length of the recent whole episodes."),
    ("episode_len_min", "gauge", "Shortest of the recent whole episodes."),
    ("episode_len_max", "gauge", "Longest of the recent whole episodes."),
    ("evaluation_return_mean", "gauge", "Mean return of the recent evaluation episodes (never trained on)."),
    ("evaluation_episodes_in_window", "gauge", "Evaluation episodes evaluation_return_mean covers."),
    ("num_evaluation_episodes_lifetime", "counter", "Evaluation episodes received."),
    ("num_env_steps_evaluated_lifetime", "counter", "Env steps of evaluation episodes received."),
    ("env_steps_per_s", "gauge", "Env steps received per second."),
    ("pending_env_steps", "gauge", "Env steps waiting for the next training step."),
    ("training_env_steps", "gauge", "Env steps in the training step under way."),
    ("training_in_progress", "gauge", "1 while a training step runs, else 0."),
    ("last_training_step_s", "gauge", "Wall seconds of the latest training step."),
    ("bytes_received", "counter", "Bytes received on RLlink connections."),
    ("bytes_sent", "counter", "Bytes sent on RLlink connections."),
    ("uptime_s", "gauge", "Seconds since the gateway started."),
]

# (field of Metrics holding a dict, label name, Prometheus type, help)
LABELLED = [
    ("clients", "transport", "gauge", "Connected clients."),
    ("connections_total", "transport", "counter", "Connections accepted."),
    ("frames_received", "type", "counter", "Valid requests received."),
    ("errors", "code", "counter", "ERROR frames sent."),
    ("dropped_env_steps", "reason", "counter", "Env steps not trained on."),
]

# Per module, labelled module_id: (field of PolicyMetrics, Prometheus type, help).
POLICY_SCALARS = [
    ("weights_seq_no", "gauge", "Gateway version in which the module's weights last changed."),
    ("num_env_steps_sampled_lifetime", "counter", "Env steps received for the module."),
    ("num_env_steps_trained_lifetime", "counter", "Env steps the module trained on."),
    ("num_episodes_lifetime", "counter", "Agent episodes of the module received."),
    ("episode_return_mean", "gauge", "Mean return of the module's recent agent episodes."),
    ("episode_len_mean", "gauge", "Mean length of the module's recent agent episodes."),
    ("evaluation_return_mean", "gauge", "Mean return of the module's recent evaluation episodes."),
    ("num_evaluation_episodes_lifetime", "counter", "Evaluation episodes of the module received."),
    ("win_rate", "gauge", "Share of wins among the module's recent reported games."),
    ("elo", "gauge", "ELO rating of a self-play learner."),
]

# Server-side inference, from Metrics.serving: (field, Prometheus type, help).
SERVING_SCALARS = [
    ("actions_served_total", "counter", "Actions answered to GET_ACTION."),
    ("actions_logged_total", "counter", "LOG_ACTION steps recorded."),
    ("actions_per_s", "gauge", "Actions answered per second."),
    ("forward_passes_total", "counter", "Forward passes run for thin clients."),
    ("inference_batch_size_mean", "gauge", "Observations per forward pass (recent)."),
    ("action_latency_p50_ms", "gauge", "GET_ACTION handling to reply, median (recent)."),
    ("action_latency_p99_ms", "gauge", "GET_ACTION handling to reply, 99th percentile (recent)."),
    ("open_episodes", "gauge", "Thin-client episodes open."),
    ("open_episode_steps", "gauge", "Complete steps in open thin-client episodes, not yet sent to training."),
    ("episodes_started_total", "counter", "Thin-client episodes started."),
]

FAMILIES = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


class _SnapshotCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for name, kind, help_text in SCALARS:
            value = getattr(self.metrics, name)
            if value is not None:
                yield FAMILIES[kind](PREFIX + name.removesuffix("_total"), help_text, value=float(value))
        for name, label, kind, help_text in LABELLED:
            family = FAMILIES[kind](PREFIX + name.removesuffix("_total"), help_text, labels=[label])
            for key, value in sorted(getattr(self.metrics, name).items()):
                family.add_metric([key], value)
            yield family
        learner = GaugeMetricFamily(PREFIX + "learner_stat", "Latest PPO update statistics.", labels=["stat"])
        for key, value in self.metrics.learner.model_dump(exclude_none=True).items():
            learner.add_metric([key], value)
        yield learner
        yield from self._per_module()
        serving = self.metrics.serving
        for name, kind, help_text in SERVING_SCALARS:
            if (value := getattr(serving, name)) is not None:
                yield FAMILIES[kind](PREFIX + "serving_" + name.removesuffix("_total"), help_text, value=float(value))
        ended = CounterMetricFamily(PREFIX + "serving_episodes_ended", "Thin-client episodes ended, by how.", labels=["how"])
        for how, count in sorted(serving.episodes_ended.items()):
            ended.add_metric([how], count)
        yield ended
        agent_return = GaugeMetricFamily(
            PREFIX + "agent_episode_return_mean", "Mean return of the agent's recent episodes.", labels=["agent_id"]
        )
        for agent_id, window in sorted(self.metrics.agents.items()):
            if window.episode_return_mean is not None:
                agent_return.add_metric([agent_id], window.episode_return_mean)
        yield agent_return
        env_params = GaugeMetricFamily(
            PREFIX + "env_params", "Environment parameters' current values (numbers; bools as 0 or 1).", labels=["param"]
        )
        for param, value in sorted(self.metrics.env_params.items()):
            if not isinstance(value, str):
                env_params.add_metric([param], float(value))
        yield env_params
        lesson = GaugeMetricFamily(PREFIX + "curriculum", "Index of each curriculum's current lesson.", labels=["param"])
        for param, status in sorted(self.metrics.curriculum.items()):
            lesson.add_metric([param], status.lesson)
        yield lesson

    def _per_module(self) -> Iterator[Metric]:
        policies = sorted(self.metrics.policies.items())
        for name, kind, help_text in POLICY_SCALARS:
            family = FAMILIES[kind](PREFIX + "policy_" + name.removesuffix("_lifetime"), help_text, labels=["module_id"])
            for module_id, policy in policies:
                if (value := getattr(policy, name)) is not None:
                    family.add_metric([module_id], float(value))
            yield family
        games = CounterMetricFamily(PREFIX + "policy_games", "Games reported, by outcome.", labels=["module_id", "outcome"])
        learner = GaugeMetricFamily(PREFIX + "policy_learner_stat", "Latest PPO update statistics.", labels=["module_id", "stat"])
        for module_id, policy in policies:
            for outcome, count in policy.games.model_dump().items():
                games.add_metric([module_id, outcome], count)
            for stat, value in policy.learner.model_dump(exclude_none=True).items():
                learner.add_metric([module_id, stat], value)
        league = GaugeMetricFamily(
            PREFIX + "policy_league_recent_games",
            "A self-play learner's recent games (its record_window) by opponent, seat and outcome.",
            labels=["module_id", "opponent", "seat", "outcome"],
        )
        for module_id, policy in policies:
            for record in policy.league_records or []:
                for outcome in ("win", "draw", "loss"):
                    league.add_metric([module_id, record.opponent, record.seat, outcome], getattr(record, outcome))
        yield games
        yield learner
        yield league


def render_prometheus(metrics: Metrics) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(metrics))
    return generate_latest(registry)
