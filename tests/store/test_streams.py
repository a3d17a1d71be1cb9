"""Streams: ordered claims, de-duplication, bounded length, reclaiming a dead consumer."""

from __future__ import annotations

from store import RunStore, Store, Stream


def test_append_read_ack_in_order(run_store: RunStore) -> None:
    s = run_store.grads
    s.ensure_group("agg")
    ids = [s.append({"i": i, "version": i // 2}, blob=bytes([i]) * 10) for i in range(5)]
    assert all(ids)
    got = s.read("agg", "c1", count=10, block_ms=10)
    assert [e.meta["i"] for e in got] == list(range(5))
    assert got[3].blob == bytes([3]) * 10
    assert s.read("agg", "c1", count=10, block_ms=10) == []
    assert s.ack("agg", [e.id for e in got]) == 5
    st = s.stats("agg")
    assert (st.length, st.appended, st.pending) == (0, 5, 0)


def test_get_by_id(run_store: RunStore) -> None:
    a = run_store.traj.append({"n": 1}, blob=b"abc")
    b = run_store.traj.append({"n": 2})
    got = run_store.traj.get([b, "0-1", a])
    assert got[0] is not None and got[0].meta == {"n": 2} and got[0].blob is None
    assert got[1] is None
    assert got[2] is not None and got[2].blob == b"abc"


def test_dedupe_by_invocation_id(run_store: RunStore) -> None:
    s = run_store.grads
    first = s.append({"g": 1}, blob=b"x", dedupe_id="inv-1:0:0")
    again = s.append({"g": 1}, blob=b"x", dedupe_id="inv-1:0:0")
    other = s.append({"g": 2}, blob=b"y", dedupe_id="inv-1:0:1")
    assert first and other and again is None
    st = s.stats()
    assert (st.length, st.appended, st.duplicates) == (2, 2, 1)


def test_bounded_length_counts_drops(store: Store, run_id: str) -> None:
    s = Stream(store, run_id, "traj", maxlen=3)
    s.ensure_group("g")
    for i in range(5):
        s.append({"i": i})
    st = s.stats()
    assert st.length == 3 and st.dropped == 2 and st.appended == 5
    got = s.read("g", "c", count=10, block_ms=10)
    assert [e.meta["i"] for e in got] == [2, 3, 4]
    # Consumed entries are deleted on ack, so they never count as drops later.
    s.ack("g", [e.id for e in got])
    for i in range(3):
        s.append({"i": 10 + i})
    assert s.stats().dropped == 2
    RunStore(store, run_id).clear()


def test_reclaim_entries_of_a_dead_consumer(run_store: RunStore) -> None:
    s = run_store.traj
    s.ensure_group("learners")
    for i in range(3):
        s.append({"i": i})
    claimed = s.read("learners", "dead-consumer", count=2, block_ms=10)
    assert len(claimed) == 2
    # Not idle long enough yet: nothing to take over.
    assert s.reclaim("learners", "rescuer", min_idle_ms=60_000) == []
    taken = s.reclaim("learners", "rescuer", min_idle_ms=0)
    assert sorted(e.meta["i"] for e in taken) == [0, 1]
    s.ack("learners", [e.id for e in taken])
    rest = s.read("learners", "rescuer", count=10, block_ms=10)
    assert [e.meta["i"] for e in rest] == [2]


def test_state_blobs_and_meta(run_store: RunStore) -> None:
    import numpy as np

    assert run_store.get_state("optimizer") is None
    run_store.put_state("optimizer", {"step": np.array([3])}, {"lr": 3e-4})
    arrays, meta = run_store.get_state("optimizer")  # type: ignore[misc]
    assert int(arrays["step"][0]) == 3 and meta["lr"] == 3e-4
    run_store.meta.set({"status": "running", "config": {"a": 1}})
    assert run_store.meta.get("status") == "running"
    assert run_store.meta.all()["config"] == {"a": 1}
    assert run_store.meta.get("missing", 5) == 5
