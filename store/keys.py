"""Every Redis key Stellaris uses is built here, and nowhere else.

All keys of a run share the prefix ``stellaris:{<run_id>}:``. The braces are literal: they are
a Redis Cluster hash tag, so every key of one run hashes to the same slot and MULTI/EXEC and
Lua scripts stay atomic on a cluster (ElastiCache, Redis Cluster) exactly as on one server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_run_id(run_id: str) -> str:
    """Run ids become part of keys and folder names: keep them to a safe alphabet."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(
            f"invalid run id {run_id!r}: use 1-128 characters of [A-Za-z0-9._-], "
            "starting with a letter or digit"
        )
    return run_id


@dataclass(frozen=True)
class RunKeys:
    """The key layout of one training run."""

    run_id: str

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)

    @property
    def prefix(self) -> str:
        return f"stellaris:{{{self.run_id}}}"

    # -- policy parameters ---------------------------------------------------------------
    def params(self, version: int) -> str:
        return f"{self.prefix}:params:{int(version)}"

    @property
    def params_latest(self) -> str:
        return f"{self.prefix}:params:latest"

    @property
    def params_latest_blob(self) -> str:
        """A copy of the newest blob: readers fetch the latest policy with one plain GET."""
        return f"{self.prefix}:params:latest:blob"

    @property
    def params_versions(self) -> str:
        """Sorted set of retained versions (score = version), used for eviction."""
        return f"{self.prefix}:params:versions"

    @property
    def params_applied(self) -> str:
        """Hash: gradient lineage -> ``"seq:version"``, the last gradient of that lineage in a
        published version (written with the version, read by learners that look ahead)."""
        return f"{self.prefix}:params:applied"

    @property
    def params_preview(self) -> str:
        """The weights a publishing learner has part-way through an update (after some of its
        epochs): not a version, a fresher behaviour policy for async actors."""
        return f"{self.prefix}:params:preview"

    @property
    def params_preview_stamp(self) -> str:
        """``"<base version>:<invocation>:<epoch>"`` of the preview blob (set with it)."""
        return f"{self.prefix}:params:preview:stamp"

    @property
    def params_held(self) -> str:
        """Hash: learner invocation -> ``"<version>:<lease expiry, ms>"``, the version each
        learner in flight computes with. Held versions are never evicted (a learner's IS
        truncation reads the others'); an expired lease no longer pins (a killed learner)."""
        return f"{self.prefix}:params:held"

    # -- streams -------------------------------------------------------------------------
    def stream(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def stream_dropped(self, name: str) -> str:
        return f"{self.prefix}:{name}:dropped"

    def stream_appended(self, name: str) -> str:
        return f"{self.prefix}:{name}:appended"

    def stream_duplicates(self, name: str) -> str:
        return f"{self.prefix}:{name}:duplicates"

    def stream_seen(self, name: str, dedupe_id: str) -> str:
        return f"{self.prefix}:{name}:seen:{dedupe_id}"

    @property
    def traj(self) -> str:
        return self.stream("traj")

    @property
    def grads(self) -> str:
        return self.stream("grads")

    def state(self, name: str) -> str:
        """Named auxiliary blobs of a run (e.g. the sync learner's optimizer state)."""
        if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"invalid state name {name!r}")
        return f"{self.prefix}:state:{name}"

    def scratch(self, token: str) -> str:
        """A short-lived key a store probe writes, reads and deletes (store/probe.py): proof
        that the run's hash slot takes writes, from where the probe runs."""
        if not token or not token.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"invalid scratch token {token!r}")
        return f"{self.prefix}:scratch:{token}"

    # -- run metadata and metrics --------------------------------------------------------
    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def metrics(self) -> str:
        return f"{self.prefix}:metrics"

    @property
    def pattern(self) -> str:
        """Glob matching every key of the run (for cleanup)."""
        return f"{self.prefix}:*"
