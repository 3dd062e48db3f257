"""The gateway on a real local Ray cluster: a head and one more node on loopback, the
learner actor and two front-end actors, real clients over real sockets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster as RayCluster  # noqa: E402

from app.clients.gym_client import RunResult, run  # noqa: E402
from app.clients.rllink_client import RLlinkClient  # noqa: E402
from app.cluster.launch import Cluster, start_cluster  # noqa: E402
from app.config import Settings  # noqa: E402

from .helpers import wait_until  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OBJECT_STORE_BYTES = 100 * 1024**2  # Ray's smallest is 75 MiB; the policies are a few kB


@pytest.fixture(scope="module")
def ray_nodes() -> Iterator[RayCluster]:
    """A head and a second node on this machine, kept small."""
    nodes = RayCluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False},
    )
    nodes.add_node(num_cpus=2, object_store_memory=OBJECT_STORE_BYTES)
    ray.init(address=nodes.address)
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture
def gateway_on_ray(ray_nodes, tmp_path: Path) -> Iterator[Cluster]:
    settings = Settings(http_port=0, tcp_port=0, checkpoint_dir=tmp_path / "checkpoints", frontends=2, decode_workers=0)
    cluster = start_cluster(settings)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_two_front_ends_train_one_policy_to_450_and_each_reports_the_whole_gateway(gateway_on_ray: Cluster) -> None:
    addresses = gateway_on_ray.addresses
    assert [a["frontend"] for a in addresses] == [0, 1] and addresses[0]["tcp_port"] != addresses[1]["tcp_port"]
    # Watchers (PING only) on both front-ends: /api/clients of either lists both.
    watchers = [RLlinkClient("tcp", "127.0.0.1", a["tcp_port"], timeout=60) for a in addresses]
    for watcher in watchers:
        assert watcher.request({"type": "PING"})["type"] == "PONG"
    listed = wait_until(
        lambda: {c["frontend"] for c in httpx.get(f"http://127.0.0.1:{addresses[0]['http_port']}/api/clients").json()} == {0, 1},
        30, "both front-ends' clients in /api/clients",
    )
    assert listed

    results: dict[int, RunResult | BaseException] = {}

    def client(index: int) -> None:
        try:
            with RLlinkClient("tcp", "127.0.0.1", addresses[index]["tcp_port"], timeout=120) as rllink:
                results[index] = run(rllink, "CartPole-v1", seed=index, target_return=450.0, max_env_steps=80_000)
        except BaseException as exc:  # reported below
            results[index] = exc

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=280)
    for watcher in watchers:
        watcher.close()
    for index, result in results.items():
        assert isinstance(result, RunResult), f"the client of front-end {index} failed: {result!r}"
        print(f"front-end {index}: {result.env_steps} env steps, {result.seconds:.1f} s, last 20 {result.mean_return:.1f}")
        assert result.reached_target, f"front-end {index}: mean of the last 20 returns {result.mean_return:.1f}"
    # One policy: both clients got the same versions, and either front-end counts both clients' steps.
    sent = sum(result.env_steps for result in results.values())
    for address in addresses:
        metrics = wait_until(
            lambda: (m := httpx.get(f"http://127.0.0.1:{address['http_port']}/api/metrics").json())[
                "num_env_steps_sampled_lifetime"] == sent and m,
            30, "the front-end's metrics to count both clients",
        )
        assert metrics["weights_seq_no"] >= max(result.weights_seq_no for result in results.values())
