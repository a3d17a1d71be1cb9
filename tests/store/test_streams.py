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


def test_ack_and_read_acknowledges_then_claims_in_one_call(run_store: RunStore) -> None:
    s = run_store.grads
    s.ensure_group("agg")
    first = [s.append({"i": i}, blob=b"g") for i in range(3)]
    got = s.ack_and_read("agg", "c1", [], count=10, block_ms=10)
    assert [e.id for e in got] == first
    later = [s.append({"i": i}, blob=b"g") for i in range(3, 5)]
    got = s.ack_and_read("agg", "c1", first, count=10, block_ms=10)
    assert [e.id for e in got] == later
    st = s.stats("agg")
    # the acknowledged entries are gone; the new ones are claimed, not yet acknowledged
    assert (st.length, st.pending) == (2, 2)
    assert s.ack_and_read("agg", "c1", later, count=10, block_ms=10) == []
    assert (s.stats("agg").length, s.stats("agg").pending) == (0, 0)


def test_ack_and_read_recreates_a_vanished_group(run_store: RunStore) -> None:
    s = run_store.grads
    s.ensure_group("agg")
    s.store.call(lambda r: r.delete(s.key))  # e.g. Redis restarted empty
    eid = s.append({"i": 0}, blob=b"g")
    got = s.ack_and_read("agg", "c1", ["1-1"], count=10, block_ms=10)
    assert [e.id for e in got] == [eid]


def test_append_and_poll_is_append_plus_fetch_if_newer(run_store: RunStore) -> None:
    import numpy as np

    run_store.params.publish(3, {"w": np.ones(2, np.float32)}, {"m": 1})
    eid, snap = run_store.append_and_poll(run_store.grads, {"g": 1}, b"x", "inv:0:0", 2)
    assert eid and snap is not None and snap.version == 3 and snap.tensors["w"].tolist() == [1, 1]
    eid2, snap2 = run_store.append_and_poll(run_store.grads, {"g": 2}, b"y", "inv:0:1", 3)
    assert eid2 and snap2 is None  # nothing newer than what the caller holds
    dup, _ = run_store.append_and_poll(run_store.grads, {"g": 1}, b"x", "inv:0:0", 3)
    assert dup is None  # de-duplicated like append()
    got = run_store.grads.get([eid, eid2])
    assert [e.meta["g"] for e in got if e is not None] == [1, 2]


def test_append_and_poll_survives_a_server_that_lost_its_scripts(run_store: RunStore) -> None:
    import numpy as np

    run_store.params.publish(0, {"w": np.zeros(1, np.float32)})
    run_store.store.call(lambda r: r.script_flush())  # what a restarted server looks like
    eid, snap = run_store.append_and_poll(run_store.grads, {"g": 1}, b"x", "inv:1:0", None)
    assert eid and snap is not None and snap.version == 0
    assert run_store.grads.stats().appended == 1  # appended once, not twice
