"""ParamStore: atomic publish, cheap latest reads, retention, corrupt data."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from store import CorruptBlob, ParamStore, RunKeys, Store, VersionEvicted, VersionNotFound


def _tensors(v: float) -> dict[str, np.ndarray]:
    return {
        "actor.0.weight": np.full((64, 11), v, dtype=np.float32),
        "obs_rms.mean": np.full((11,), v, dtype=np.float64),
    }


def test_publish_and_read_back(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id)
    with pytest.raises(VersionNotFound):
        ps.latest()
    assert ps.latest_version() is None
    ps.publish(0, _tensors(0.5), {"env_id": "Hopper-v5"})
    snap = ps.latest()
    assert snap.version == 0
    assert snap.meta["env_id"] == "Hopper-v5"
    np.testing.assert_array_equal(snap.tensors["actor.0.weight"], _tensors(0.5)["actor.0.weight"])
    assert snap.tensors["obs_rms.mean"].dtype == np.float64
    assert ps.latest_version() == 0
    assert ps.get(0).version == 0


def test_fetch_if_newer_skips_unchanged(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id)
    ps.publish(3, _tensors(3))
    assert ps.fetch_if_newer(3) is None
    snap = ps.fetch_if_newer(2)
    assert snap is not None and snap.version == 3
    assert ps.fetch_if_newer(None).version == 3  # type: ignore[union-attr]


def test_retention_evicts_old_versions(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id, keep=3)
    for v in range(6):
        ps.publish(v, _tensors(v))
    assert ps.retained_versions() == [3, 4, 5]
    with pytest.raises(VersionEvicted) as err:
        ps.get(1)
    assert err.value.oldest_retained == 3
    with pytest.raises(VersionNotFound, match="never published"):
        ps.get(99)
    assert ps.get(4).tensors["actor.0.weight"][0, 0] == 4


def test_versions_only_move_forward_unless_rewound(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id)
    for v in range(4):
        ps.publish(v, _tensors(v))
    with pytest.raises(Exception, match="STALE"):
        ps.publish(1, _tensors(1))
    ps.publish(1, _tensors(7), allow_rewind=True)
    assert ps.latest().version == 1
    assert ps.latest().tensors["actor.0.weight"][0, 0] == 7
    assert ps.retained_versions() == [0, 1]  # versions above the rewind point are gone


def test_a_state_blob_is_published_with_its_version_or_not_at_all(store: Store, run_id: str) -> None:
    """A publishing learner's Adam moments go in the version's own Lua step."""
    from store import RunStore

    rs = RunStore(store, run_id)
    moments = {"exp_avg.w": np.full(3, 2.0, dtype=np.float32)}
    rs.params.publish(2, _tensors(2), state=("optimizer", moments, {"version": 2}))
    arrays, meta = rs.get_state("optimizer")  # type: ignore[misc]
    assert meta["version"] == 2 and arrays["exp_avg.w"].tolist() == [2.0] * 3
    with pytest.raises(Exception, match="STALE"):
        rs.params.publish(1, _tensors(1), state=("optimizer", {"exp_avg.w": np.zeros(3)},
                                                 {"version": 1}))
    assert rs.get_state("optimizer")[1]["version"] == 2  # type: ignore[index]
    rs.params.publish(3, _tensors(3))  # no state: the saved one stays
    assert rs.get_state("optimizer")[1]["version"] == 2  # type: ignore[index]
    assert rs.get_state("none") is None


def test_a_preview_is_the_newest_behaviour_policy_until_its_version_is_out(
        store: Store, run_id: str) -> None:
    """A publishing learner's weights part-way through updating the latest version: what
    fetch_newest serves until the next version lands, and never a version to anyone else."""
    ps = ParamStore(store, run_id)
    ps.publish(4, _tensors(4))
    assert ps.fetch_newest(None).token == "4"  # type: ignore[union-attr]
    assert ps.fetch_newest("4") is None
    assert ps.publish_preview(4, 3, 10, "u-1", _tensors(4.3))
    snap = ps.fetch_newest("4")
    assert snap is not None and (snap.version, snap.token, snap.progress) == (4, "4:u-1:3", 0.3)
    assert snap.tensors["actor.0.weight"][0, 0] == np.float32(4.3)
    assert ps.fetch_newest("4:u-1:3") is None
    # not a version: latest, get and fetch_if_newer never see it
    assert ps.latest().tensors["actor.0.weight"][0, 0] == 4 and ps.fetch_if_newer(4) is None
    assert ps.get(4).tensors["actor.0.weight"][0, 0] == 4
    # the version it previews lands: the preview is stale and served no more
    ps.publish(5, _tensors(5))
    newest = ps.fetch_newest("4:u-1:3")
    assert newest is not None and (newest.token, newest.progress) == ("5", 0.0)
    # a preview of a version that is no longer the latest is dropped (a learner that lost
    # a race with its retry)
    assert not ps.publish_preview(4, 5, 10, "u-1", _tensors(4.5))
    assert ps.fetch_newest("5") is None
    with pytest.raises(ValueError, match="epoch 1..9"):
        ps.publish_preview(5, 10, 10, "u-2", _tensors(5))


def test_fetch_newest_before_anything_is_published(store: Store, run_id: str) -> None:
    with pytest.raises(VersionNotFound):
        ParamStore(store, run_id).fetch_newest(None)


def test_atomic_publish_under_concurrent_readers(store: Store, run_id: str) -> None:
    """Readers hammer latest() while a writer publishes with a tiny retention window."""
    ps = ParamStore(store, run_id, keep=1)
    ps.publish(0, _tensors(0))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        local = ParamStore(Store(store.url), run_id, keep=1)
        while not stop.is_set():
            try:
                snap = local.latest()
                # A torn read would pair version v with another version's tensors.
                assert snap.tensors["actor.0.weight"][0, 0] == snap.version
                assert snap.meta["version"] == snap.version
                reads[0] += 1
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for v in range(1, 300):
        ps.publish(v, _tensors(v))
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert reads[0] > 0


def test_corrupt_blob_is_a_clear_error(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id)
    keys = RunKeys(run_id)
    ps.publish(0, _tensors(0))
    good = store.redis.get(keys.params(0))
    for bad in (b"", b"\x00" * 4, good[:-10], b"garbage" * 10, good[:8] + b"{not json" + good[17:]):
        store.redis.set(keys.params(0), bad)
        store.redis.set(keys.params_latest_blob, bad)
        with pytest.raises(CorruptBlob):
            ps.latest()
        with pytest.raises(CorruptBlob):
            ps.get(0)
        with pytest.raises(CorruptBlob):
            ps.fetch_if_newer(None)


def test_decode_rejects_out_of_bounds_offsets() -> None:
    import json
    import struct

    from store import decode, encode

    good = encode({"w": np.arange(4, dtype=np.float32)}, {"a": 1})
    (n,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8 : 8 + n])
    for patch in ({"data_offsets": [0, 4096]}, {"shape": [8]}, {"dtype": "X9"}, {"shape": [-1]}):
        h = {**header, "w": {**header["w"], **patch}}
        raw = json.dumps(h).encode()
        with pytest.raises(CorruptBlob):
            decode(struct.pack("<Q", len(raw)) + raw + good[8 + n :])
    arrays, meta = decode(good)
    assert arrays["w"].tolist() == [0, 1, 2, 3] and meta == {"a": 1}


def test_held_versions_are_never_evicted_and_leases_expire(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id, keep=2)
    ps.publish(0, _tensors(0))
    assert ps.hold("learner-a", 0, lease_s=60) == {}
    assert ps.hold("learner-b", 0, lease_s=0.2) == {"learner-a": 0}
    for v in range(1, 6):
        ps.publish(v, _tensors(v))
    # version 0 is held: kept beyond the window of two; the others fell out as usual
    assert ps.retained_versions() == [0, 4, 5]
    assert ps.get(0).version == 0
    # a renewal moves b's hold; a's stays what it was
    assert ps.hold("learner-b", 5, lease_s=0.2) == {"learner-a": 0}
    ps.release("learner-a")
    ps.publish(6, _tensors(6))
    assert 0 not in ps.retained_versions()
    # an expired lease (a learner killed mid-batch, never released) pins nothing
    import time

    time.sleep(0.3)
    assert ps.hold("learner-c", 6, lease_s=60) == {}
    assert ps.held() == {"learner-c": 6}


def test_holding_the_latest_pins_it_in_the_step_that_fetches_it(store: Store,
                                                                run_id: str) -> None:
    ps = ParamStore(store, run_id, keep=1)
    for v in range(3):
        ps.publish(v, _tensors(v))
    snap, others = ps.hold_latest("a", lease_s=60, known_version=None)
    assert snap is not None and snap.version == 2 and others == {}
    for v in range(3, 6):
        ps.publish(v, _tensors(v))
    # held from the fetch on: kept beyond the window of one, and read as a's by the others
    assert ps.retained_versions() == [2, 5]
    assert ps.hold_latest("b", lease_s=60, known_version=5) == (None, {"a": 2})
    assert ps.held() == {"a": 2, "b": 5}
    snap, others = ps.hold_latest("a", lease_s=60, known_version=2)
    assert snap is not None and snap.version == 5 and others == {"b": 5}
    ps.publish(6, _tensors(6))
    assert ps.retained_versions() == [5, 6]


def test_hold_rejects_a_lease_of_zero(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id)
    with pytest.raises(ValueError, match="lease"):
        ps.hold("x", 0, lease_s=0)


def test_a_hold_pins_the_versions_it_may_still_use(store: Store, run_id: str) -> None:
    ps = ParamStore(store, run_id, keep=3)
    for v in range(3):
        ps.publish(v, _tensors(v))
    ps.keep = 1  # from here the window is one version
    # computing with 1, already given 2 to switch to: both pinned; the others read 1
    ps.hold("a", 1, lease_s=60, pin=(2, 1))
    assert ps.hold("b", 2, lease_s=60) == {"a": 1}
    for v in range(3, 6):
        ps.publish(v, _tensors(v))
    assert ps.retained_versions() == [1, 2, 5]
