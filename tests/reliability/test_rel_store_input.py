"""Bad data in the store: a corrupt, truncated or wrong-dtype blob under ``params:latest``, in
the trajectory stream or in the gradient stream.

The real actor and learner handlers run as Lambda functions on the runtime (the same zip
``deploy`` builds) and must answer with a Lambda function error — ``X-Amz-Function-Error:
Unhandled``, ``errorType`` ``CorruptBlob`` and a message that says what is wrong — and keep
serving: the environment that saw the bad blob runs the next good invocation. Gradients are
read by the orchestrator, not by a handler: their decoder must raise ``CorruptBlob`` (which
the async loop counts and acks). And no code path may unpickle: a scan of the sources fails
on any use of pickle-like deserialisers.
"""

from __future__ import annotations

import io
import json
import re
import struct
import tokenize
import uuid
from pathlib import Path

import numpy as np
import pytest

from deploy.package import build_function_zip
from functions.policy import init_policy, policy_meta
from functions.wire import Gradient
from store import RunKeys, RunStore, decode, encode
from store.errors import CorruptBlob

REPO = Path(__file__).resolve().parents[2]


def _relabel(blob: bytes, name: str, dtype: str) -> bytes:
    """Change one tensor's declared dtype in the safetensors header, data untouched."""
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header[name]["dtype"] = dtype
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + blob[8 + n:]


def _retyped(blob: bytes, name: str, dtype: type) -> bytes:
    """A well-formed blob whose tensor ``name`` has the wrong dtype (ints for floats...)."""
    arrays, meta = decode(blob)
    arrays = {k: np.array(v) for k, v in arrays.items()}
    arrays[name] = arrays[name].astype(dtype)
    return encode(arrays, meta)


def _invoke(client, name: str, event: dict) -> tuple[dict, object]:
    resp = client.invoke(FunctionName=name, Payload=json.dumps(event))
    return resp, json.loads(resp["Payload"].read())


@pytest.fixture(scope="module")
def handlers(rel_client):
    code = build_function_zip()
    names = {}
    for role in ("actor", "learner"):
        name = f"rel-{role}-{uuid.uuid4().hex[:6]}"
        rel_client.create_function(FunctionName=name, Runtime="python3.11",
                                   Role="arn:aws:iam::123456789012:role/lambda-role",
                                   Handler=f"functions.{role}.handler", Code={"ZipFile": code},
                                   MemorySize=2048, Timeout=60)
        names[role] = name
    yield names
    for name in names.values():
        rel_client.delete_function(FunctionName=name)


def _published_run(store, prefix: str) -> tuple[RunStore, bytes]:
    rs = RunStore(store, f"{prefix}-{uuid.uuid4().hex[:8]}")
    model, tensors = init_policy("CartPole-v1", None, 0)
    rs.params.publish(0, tensors, policy_meta(model))
    return rs, store.redis.get(RunKeys(rs.run_id).params_latest_blob)


def _assert_corrupt_blob(resp, doc, *fragments: str) -> None:
    assert resp["StatusCode"] == 200 and resp.get("FunctionError") == "Unhandled", doc
    assert doc["errorType"] == "CorruptBlob", doc
    assert isinstance(doc["stackTrace"], list) and doc["requestId"]
    for fragment in fragments:
        assert fragment in doc["errorMessage"], doc["errorMessage"]


def test_corrupt_policy_params_through_the_runtime(rel_client, handlers, store, redis_url) -> None:
    actor = handlers["actor"]
    good_rs, good_blob = _published_run(store, "rel-params")
    ev = {"redis_url": redis_url, "env_id": "CartPole-v1", "n_envs": 2, "steps": 8}
    resp, doc = _invoke(rel_client, actor, {**ev, "run_id": good_rs.run_id})
    assert "FunctionError" not in resp and doc["behaviour_version"] == 0
    model, tensors = init_policy("CartPole-v1", None, 0)
    int_weights = encode({k: (v.astype(np.int32) if k.endswith("weight") else v)
                          for k, v in tensors.items()}, decode(good_blob)[1])
    cases = {
        "truncated": (good_blob[:-10], "truncated"),
        "garbage": (b"\x00garbage-not-a-tensor-blob" * 4, "tensor blob"),
        "empty": (b"", "truncated"),
        "header-not-json": (good_blob[:8] + b"{not json" + good_blob[17:], "not valid JSON"),
        "relabelled-dtype": (_relabel(good_blob, "actor.0.weight", "F64"), "actor.0.weight"),
        "int-weights": (int_weights, "dtype int32"),
    }
    for label, (bad, fragment) in cases.items():
        rs, _ = _published_run(store, f"rel-{label}")
        keys = RunKeys(rs.run_id)
        store.redis.set(keys.params_latest_blob, bad)
        store.redis.set(keys.params(0), bad)
        resp, doc = _invoke(rel_client, actor, {**ev, "run_id": rs.run_id})
        _assert_corrupt_blob(resp, doc, fragment)
    # the same (warm) function keeps serving good runs; nothing crashed
    resp, doc = _invoke(rel_client, actor, {**ev, "run_id": good_rs.run_id})
    assert "FunctionError" not in resp and doc["steps"] == 16


def test_corrupt_trajectories_through_the_runtime(rel_client, handlers, store, redis_url) -> None:
    rs, _ = _published_run(store, "rel-traj")
    base = {"run_id": rs.run_id, "redis_url": redis_url}
    resp, doc = _invoke(rel_client, handlers["actor"], {**base, "env_id": "CartPole-v1",
                                                        "n_envs": 2, "steps": 8})
    good_id = doc["trajectory_id"]
    good = rs.traj.get([good_id])[0].blob
    cases = {
        "garbage": (b"garbage-not-safetensors", "tensor blob"),
        "truncated": (good[:-7], "truncated"),
        "relabelled-obs-I32": (_relabel(good, "obs", "I32"), "dtype int32"),
        "relabelled-obs-F64": (_relabel(good, "obs", "F64"), "'obs'"),
        "uint8-obs": (_retyped(good, "obs", np.uint8), "dtype uint8"),
        "int-logprobs": (_retyped(good, "logprobs", np.int64), "'logprobs'"),
        "a-gradient": (encode({"x": np.zeros(2, np.float32)}, {"kind": "gradient"}), "not a trajectory"),
    }
    for label, (bad, fragment) in cases.items():
        bad_id = rs.traj.append({"kind": "trajectory", "case": label}, bad)
        resp, doc = _invoke(rel_client, handlers["learner"], {**base, "trajectory_ids": [good_id, bad_id]})
        _assert_corrupt_blob(resp, doc, fragment)
    resp, doc = _invoke(rel_client, handlers["learner"], {**base, "trajectory_ids": [good_id]})
    assert "FunctionError" not in resp and doc["n_samples"] == 16


def test_corrupt_gradients_are_rejected_by_the_decoder() -> None:
    good = Gradient({"w": np.ones((2, 3), np.float32)}, "inv-1", 0, 0, 0, 16).to_blob()
    assert Gradient.from_blob(good).grads["w"].shape == (2, 3)
    meta = json.loads(json.dumps(decode(good)[1]))
    flat = np.ones(6, np.float32)
    for bad, fragment in [
        (good[:-5], "truncated"), (b"", "truncated"), (b"junk" * 10, "tensor blob"),
        (_relabel(good, "flat", "I32"), "dtype int32"),
        (_relabel(good, "flat", "F64"), "truncated or garbled"),
        (encode({"flat": np.ones(6, np.int64)}, meta), "dtype int64"),
        (encode({"flat": np.ones(3, np.float32)}, {"kind": "gradient"}), "incomplete"),
        (encode({"flat": np.ones(3, np.float32)}, {"kind": "trajectory"}), "not a gradient"),
        # the layout must describe exactly the numbers sent, with sane shapes
        (encode({"flat": np.ones(5, np.float32)}, meta), "does not fit"),
        (encode({"flat": np.ones(7, np.float32)}, meta), "layout describes 6"),
        (encode({"flat": flat}, {**meta, "layout": [["w", [-2, -3]]]}), "does not fit"),
        (encode({"flat": flat}, {**meta, "layout": [["w", "xy"]]}), "incomplete"),
        (encode({"flat": flat.reshape(2, 3)}, meta), "one 1-D 'flat' array"),
        (encode({"flat": flat, "extra": flat}, meta), "one 1-D 'flat' array"),
        # the per-parameter format of older blobs is still checked
        (encode({"w": np.ones((2, 3), np.int64)}, {k: v for k, v in meta.items() if k != "layout"}),
         "dtype int64"),
    ]:
        with pytest.raises(CorruptBlob, match=re.escape(fragment)):
            Gradient.from_blob(bad)


# -- no pickle on any data path ----------------------------------------------------------------
SCANNED = ("functions", "store", "runtime", "orchestrator", "deploy")
# Deserialisers that can execute code (or load pickles) when fed attacker-controlled bytes.
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill", "shelve", "joblib",
                     "marshal", "jsonpickle"}
FORBIDDEN_CALLS = {("torch", "load"), ("marshal", "loads"), ("yaml", "load"),
                   ("yaml", "unsafe_load"), ("pd", "read_pickle"), ("pandas", "read_pickle"),
                   ("np", "load"), ("numpy", "load")}
# Nothing is allowed. An entry here needs a comment saying why that use is not a data path.
ALLOWED: set[tuple[str, int]] = set()


def _code_tokens(path: Path) -> list[tokenize.TokenInfo]:
    """The file's tokens without comments and strings (prose may say 'never pickle')."""
    toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [t for t in toks if t.type == tokenize.NAME or (t.type == tokenize.OP and t.string == ".")]


def _violations(path: Path, root: Path = REPO) -> list[tuple[str, int, str]]:
    toks = _code_tokens(path)
    found = []
    for k, t in enumerate(toks):
        if t.string in FORBIDDEN_MODULES and not (k > 0 and toks[k - 1].string == "."):
            found.append((t.string, t.start[0]))
        if t.string == "allow_pickle":
            found.append((t.string, t.start[0]))
        if k + 2 < len(toks) and toks[k + 1].string == "." and (t.string, toks[k + 2].string) in FORBIDDEN_CALLS:
            found.append((f"{t.string}.{toks[k + 2].string}", t.start[0]))
    rel = str(path.relative_to(root))
    return [(rel, line, what) for what, line in found if (rel, line) not in ALLOWED]


def test_no_pickle_on_any_data_path() -> None:
    files = [p for d in SCANNED for p in sorted((REPO / d).rglob("*.py")) if "__pycache__" not in p.parts]
    assert len(files) > 40
    bad = [v for p in files for v in _violations(p)]
    assert bad == [], f"pickle-like deserialisers in the code: {bad}"


def test_the_pickle_scan_catches_what_it_should(tmp_path) -> None:
    """The scanner itself: real uses are found, prose about them is not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Never pickle; torch.load is banned."""\n'
        "import pickle  # found\n"
        "from cloudpickle import loads  # found\n"
        "x = torch.load(f)  # found\n"
        "y = np.load(f, allow_pickle=True)  # found twice\n"
        "z = marshal.loads(b)  # found\n"
        "w = 'dill'  # a string: not found\n")
    found = sorted({(line, what) for _, line, what in _violations(sample, tmp_path)})
    assert found == [(2, "pickle"), (3, "cloudpickle"), (4, "torch.load"), (5, "allow_pickle"),
                     (5, "np.load"), (6, "marshal"), (6, "marshal.loads")]
