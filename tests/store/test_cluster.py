"""Redis Cluster: a real 3-master cluster on loopback, the store's every path on it, a short
training run whose functions reach it, and the cluster behind TLS (ElastiCache's shape)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from store_servers import RedisClusterServer, TlsFront, self_signed_cert

from store import ClusterUrlNeeded, RunKeys, RunStore, Store, StoreUnavailable
from store.probe import probe


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServer]:
    server = RedisClusterServer().start()
    yield server
    server.close()


def test_every_key_of_a_run_is_in_one_slot() -> None:
    keys = RunKeys("slot-check")
    names = [keys.params(0), keys.params(12345), keys.params_latest, keys.params_latest_blob,
             keys.params_versions, keys.params_applied, keys.params_preview,
             keys.params_preview_stamp, keys.params_held, keys.traj, keys.grads, keys.meta,
             keys.metrics, keys.stream_seen("grads", "inv:1"), keys.stream_dropped("traj"),
             keys.stream_appended("traj"), keys.stream_duplicates("grads"), keys.state("adam"),
             keys.scratch("probe-1")]
    from redis.crc import key_slot

    assert len({key_slot(k.encode()) for k in names}) == 1


def test_the_store_on_a_cluster(cluster: RedisClusterServer) -> None:
    """Scripts (including keys built inside them), transactions, pipelined scripts, blocking
    group reads, reclaim and cleanup: the run's slot lives on one of three masters."""
    store = Store(cluster.url, retry_seconds=2)
    assert store.cluster and store.ping()
    rs = RunStore(store, "on-cluster", keep_versions=2)
    try:
        for v in range(4):
            rs.params.publish(v, {"w": np.full(3, float(v))})
        assert rs.params.retained_versions() == [2, 3]  # evicted inside the script
        assert rs.params.get(3).tensors["w"].tolist() == [3.0] * 3
        assert rs.params.hold("a", 3, 10.0) == {} and rs.params.held() == {"a": 3}
        rs.traj.ensure_group("g")
        first = rs.traj.append({"i": 0}, b"x", dedupe_id="p:0")
        assert first and rs.traj.append({"i": 0}, b"x", dedupe_id="p:0") is None
        got = rs.traj.read("g", "c", block_ms=50)
        assert [e.meta for e in got] == [{"i": 0}]
        assert rs.traj.ack_and_read("g", "c", [got[0].id], block_ms=50) == []
        store.redis.script_flush()  # a restarted node forgets scripts: reloaded by SHA miss
        gid, snap = rs.append_and_poll(rs.grads, {"g": 1}, b"g", "q:0", known_version=1)
        assert gid and snap is not None and snap.version == 3
        assert rs.params.publish_preview(3, 1, 2, "inv", {"w": np.zeros(3)})
        assert rs.params.fetch_newest(None).stamp == "3:inv:1"
        node = store.redis.get_node_from_key(rs.keys.meta)
        others = [n for n in store.redis.get_primaries() if n.name != node.name]
        assert len(others) == 2  # a real multi-master cluster, the run on one of them
    finally:
        assert rs.clear() > 0


def test_an_unreachable_cluster_is_store_unavailable() -> None:
    store = Store("redis+cluster://127.0.0.1:1/0", retry_seconds=0.3)
    with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
        store.ping()


def test_a_plain_client_on_a_cluster_node_is_told_to_move(cluster: RedisClusterServer) -> None:
    """Why the scheme matters: a redis:// client lands on one node, whose slots may not hold
    the run's keys."""
    moved = 0
    for port in cluster.ports:
        rs = RunStore(Store(f"redis://127.0.0.1:{port}/0", retry_seconds=0.2), "wrong-scheme")
        try:
            rs.meta.set({"x": 1})
        except ClusterUrlNeeded as exc:
            assert "use redis+cluster://" in str(exc)
            moved += 1
    assert moved == 2


def test_the_probe_on_a_cluster(cluster: RedisClusterServer) -> None:
    report = probe(cluster.url, "probe-cluster")
    assert report["ok"] and report["server"]["cluster"] is True, report
    kinds = {probe(f"redis://127.0.0.1:{p}/0", "probe-cluster")["kind"] for p in cluster.ports}
    assert kinds == {None, "cluster"}  # the node with the run's slot works, the others say so


def test_a_cluster_behind_tls(tmp_path: Path) -> None:
    """rediss+cluster://: the topology the cluster announces is TLS ports too (ElastiCache
    with encryption in transit and cluster mode on)."""
    cert, key = self_signed_cert(tmp_path)
    front_ports = RedisClusterServer().ports  # just free ports with room for a bus port
    server = RedisClusterServer(announce_ports=front_ports)
    front = TlsFront(cert, key, server.ports, ports=front_ports)
    front.start()
    try:
        server.start()
        url = f"rediss+cluster://127.0.0.1:{front_ports[0]}/0?ssl_ca_certs={cert}"
        store = Store(url, retry_seconds=2)
        rs = RunStore(store, "tls-cluster")
        rs.params.publish(0, {"w": np.ones(2)})
        assert rs.params.latest().tensors["w"].tolist() == [1.0, 1.0]
        assert {n.port for n in store.redis.get_primaries()} == set(front_ports)
        untrusted = Store(f"rediss+cluster://127.0.0.1:{front_ports[0]}/0", retry_seconds=0.2)
        with pytest.raises(StoreUnavailable, match="certificate verify failed"):
            untrusted.ping()
    finally:
        front.close()
        server.close()


def test_a_short_training_run_on_a_cluster(cluster: RedisClusterServer, tmp_path: Path) -> None:
    """The orchestrator and the functions in the local runtime's worker processes all talk
    to the cluster."""
    from orchestrator.config import load_config
    from orchestrator.run import train

    run_dir = tmp_path / "cluster-run"
    cfg = load_config(None, {
        "env": "CartPole-v1", "mode": "async", "backend": "local", "actors": 2, "learners": 1,
        "n_envs": 4, "rollout_steps": 128, "learner_batch_steps": 512, "total_steps": 2048,
        "eval_interval_s": 0, "progress": "none", "function_timeout_s": 120,
        "hyper": {"update_epochs": 2, "num_minibatches": 4},
        "run_dir": str(run_dir), "redis_url": cluster.url})
    summary = train(cfg)
    assert summary["env_steps"] >= 2048 and summary["version"] >= 1
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}, \
        summary["last_errors"]
    rs = RunStore(Store(cluster.url), summary["run_id"])
    assert rs.params.latest_version() == summary["version"]
    rs.clear()
