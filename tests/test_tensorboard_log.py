"""TensorBoard event files: a point per training step at the env steps trained, charts a
resumed run continues, a file cut short by a killed gateway read up to the cut, and no
files at all unless asked for."""

from __future__ import annotations

import logging

import httpx

from app.telemetry.tensorboard import TensorBoardLog, read_scalars

from .helpers import TcpPeer, chunk, frame, gateway_settings, running_gateway

TRAINED_TAGS = [
    "default_policy/episode_return_mean",
    "default_policy/episode_len_mean",
    "default_policy/policy_loss",
    "default_policy/entropy",
    "default_policy/approx_kl",
    "gateway/env_steps_per_s",
    "gateway/weights_seq_no",
]


def train(settings, steps: int) -> list[int]:
    """`steps` training steps through a real gateway (a lone client, one chunk each);
    the env steps trained after each, as /api/metrics tells."""
    trained = []
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        for step in range(steps):
            peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(20, seed=step)]}))
            assert peer.receive()["type"] == "SET_STATE"
            metrics = httpx.get(f"{gateway.base_url}/api/metrics", timeout=10).raise_for_status().json()
            trained.append(metrics["num_env_steps_trained_lifetime"])
    return trained


def test_every_training_step_is_a_point_at_the_env_steps_trained(tmp_path):
    trained = train(gateway_settings(tmp_path, tensorboard_dir=tmp_path / "tb"), 4)

    scalars = read_scalars(tmp_path / "tb")
    assert trained == sorted(set(trained)) and len(trained) == 4  # strictly increasing
    for tag in TRAINED_TAGS:
        assert [step for step, _ in scalars[tag]] == trained, tag
    assert [value for _, value in scalars["gateway/weights_seq_no"]] == [1, 2, 3, 4]
    assert all(value == 20 for _, value in scalars["default_policy/episode_len_mean"])


def test_a_resumed_run_continues_its_charts(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="app.tensorboard")
    first = train(gateway_settings(tmp_path, run_id="r1", runs_dir=tmp_path), 3)
    second = train(gateway_settings(tmp_path, run_id="r1", runs_dir=tmp_path, resume=True), 2)

    directory = tmp_path / "r1" / "tensorboard"
    scalars = read_scalars(directory)
    assert len(list(directory.iterdir())) == 2  # an event file per run
    expected = first + [first[-1] + steps for steps in second]
    assert expected == sorted(set(expected))
    for tag in TRAINED_TAGS:
        assert [step for step, _ in scalars[tag]] == expected, tag
    assert [value for _, value in scalars["gateway/weights_seq_no"]] == [1, 2, 3, 4, 5]
    assert f"continuing from step {first[-1]}" in caplog.text


def test_a_file_cut_short_is_read_up_to_its_last_whole_record(tmp_path):
    board = TensorBoardLog(tmp_path)
    for step in (1, 2, 3):
        board.record(
            {
                "num_env_steps_trained_lifetime": 20 * step,
                "weights_seq_no": step,
                "env_steps_per_s": 100.0,
                "last_training_step_s": None,
                "policies": {"p": {"episode_return_mean": step, "learner": {"policy_loss": 0.5, "entropy": None}}},
            }
        )
    board.close()
    (path,) = tmp_path.iterdir()
    data = path.read_bytes()
    whole = read_scalars(tmp_path)
    assert whole == {
        "p/episode_return_mean": [(20, 1.0), (40, 2.0), (60, 3.0)],
        "p/policy_loss": [(20, 0.5), (40, 0.5), (60, 0.5)],
        "gateway/env_steps_per_s": [(20, 100.0), (40, 100.0), (60, 100.0)],
        "gateway/weights_seq_no": [(20, 1.0), (40, 2.0), (60, 3.0)],
    }

    for cut in range(1, len(data) + 1):  # wherever the gateway was killed
        path.write_bytes(data[:-cut])
        scalars = read_scalars(tmp_path)
        assert all(points == whole[tag][: len(points)] for tag, points in scalars.items()), cut
        if cut < 40:  # within the last record: only it is lost
            assert scalars == {tag: points[:2] for tag, points in whole.items()}, cut


def test_without_a_tensorboard_dir_no_event_file_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative default would land here
    train(gateway_settings(tmp_path), 1)
    assert list(tmp_path.rglob("*tfevents*")) == []


def test_charts_go_on_when_a_front_end_or_the_learner_restarts_on_ray(tmp_path):
    # On Ray, front-end 0 writes the event files from the learner's counters: a front-end
    # restarted finds them far from 0, a learner restarted starts them at 0 again.
    def snapshot(trained: int, version: int) -> dict:
        return {"policies": {}, "num_env_steps_trained_lifetime": trained, "weights_seq_no": version}

    def write(trained_now: int, points: list[tuple[int, int]]) -> None:
        board = TensorBoardLog(tmp_path, trained_now)
        for trained, version in points:
            board.record(snapshot(trained, version))
        board.close()

    write(0, [(100, 1), (200, 2)])
    write(200, [(300, 3), (400, 4)])  # front-end 0 restarted while the learner went on
    write(400, [(500, 5), (50, 6), (150, 7)])  # the learner restarted after version 5
    assert read_scalars(tmp_path)["gateway/weights_seq_no"] == [
        (100, 1), (200, 2), (300, 3), (400, 4), (500, 5), (550, 6), (650, 7)
    ]
