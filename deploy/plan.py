"""Deploy plans: an ordered list of typed steps, computed from what exists, then executed.

A plan is built by reading the target (IAM, ECR, Lambda — AWS or the local runtime) and
comparing it with what is wanted (``deploy/function_plan.py``, ``deploy/aws_plan.py``,
``deploy/destroy.py``); every step says what it would do (``create``, ``update``, ``put``,
``delete``) or that nothing is needed (``noop``). ``--dry-run`` prints the plan; executing it
(``deploy/execute.py``) makes exactly the calls listed. Deploying twice gives an all-``noop``
plan the second time. Everything deploy creates on AWS carries the tag ``stellaris:managed=true``;
destroy removes only what carries it (the local runtime has no tags: there the functions of
the prefix are ours).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from deploy.package import code_sha256


@dataclass
class Step:
    """One resource and what to do about it.

    ``kind``: iam-role | ecr-repository | function | function-code | function-config |
    concurrency. ``action``: create | update | put | delete | noop. ``params`` are the
    arguments of the boto3 call the step makes (code bytes are left out of the JSON).
    """

    kind: str
    action: str
    target: str
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.action != "noop"

    def line(self) -> str:
        sign = {"create": "+", "update": "~", "put": "~", "delete": "-",
                "noop": "="}.get(self.action, "?")
        reason = f"  ({self.reason})" if self.reason else ""
        return f"  {sign} {self.action:<7} {self.kind:<16} {self.target}{reason}"

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["params"] = _public(self.params)
        return doc


def _public(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, bytes | bytearray):
            out[k] = f"<{len(v)} bytes, CodeSha256 {code_sha256(bytes(v))}>"
        elif isinstance(v, dict):
            out[k] = _public(v)
        else:
            out[k] = v
    return out


@dataclass
class Plan:
    target: str  # aws | local
    operation: str  # deploy | destroy
    steps: list[Step] = field(default_factory=list)
    region: str | None = None
    endpoint_url: str | None = None
    problems: list[str] = field(default_factory=list)  # blockers found while planning

    @property
    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.changes]

    @property
    def is_noop(self) -> bool:
        return not self.changes

    def render(self) -> str:
        where = self.endpoint_url or f"AWS {self.region}"
        n = len(self.changes)
        head = (f"{self.operation} plan for {self.target} ({where}): "
                f"{n} change{'s' if n != 1 else ''}, {len(self.steps) - n} unchanged")
        lines = [head, *(s.line() for s in self.steps)]
        if not self.steps:
            lines.append("  (nothing to do)")
        lines += [f"  ! {p}" for p in self.problems]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target, "operation": self.operation, "region": self.region,
            "endpoint_url": self.endpoint_url, "changes": len(self.changes),
            "steps": [s.to_json() for s in self.steps], "problems": list(self.problems),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str)
