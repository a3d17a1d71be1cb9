"""Local AWS Lambda emulator: the Lambda REST API over FastAPI, functions in worker processes.

It knows nothing about RL; it runs any Python handler ``handler(event, context)``.
See ``/work/shared/LAMBDA_CONTRACT.md`` for the wire behaviour it follows.
"""

from runtime.launcher import LocalRuntime

__all__ = ["LocalRuntime"]
