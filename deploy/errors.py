"""Deploy errors: each explains one problem in one line, and its class picks the CLI's exit code."""

from __future__ import annotations


class DeployError(RuntimeError):
    """A deploy problem, explained in one line (the CLI prints it and exits non-zero)."""

    exit_code = 2


class PermissionDenied(DeployError):
    exit_code = 3


class EndpointUnreachable(DeployError):
    exit_code = 4


class MissingImage(DeployError):
    exit_code = 5
