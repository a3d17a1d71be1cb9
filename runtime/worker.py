"""The execution-environment process: INIT (import the handler), then invocations, one at a time.

Run as ``python worker.py SOCKET ENV_ID`` (spawn mode) or entered via ``serve()`` in a child
forked by the zygote. Stdlib only: the function's own code folder comes first on sys.path,
exactly like /var/task on Lambda, and nothing of the server is imported here.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import socket
import sys
import time
import traceback
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):
    # Script mode: protocol.py sits beside this file. Import it, then take this folder off
    # sys.path so user code cannot shadow or see the runtime's modules by accident.
    sys.path.insert(0, _HERE)
    import protocol  # type: ignore[import-not-found]

    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    # Keep our reference but free the name: a user module may well be called "protocol".
    del sys.modules["protocol"]
else:
    from runtime import protocol


class LambdaContext:
    """Lambda's Python context object (same attribute names and types)."""

    def __init__(self, frame: dict[str, Any]) -> None:
        env = os.environ
        self.aws_request_id: str = frame["request_id"]
        self.function_name = env.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn: str = frame.get("invoked_arn", "")
        self.memory_limit_in_mb = env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")  # a str, as on Lambda
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.client_context = frame.get("client_context")
        self.identity = None
        self._deadline_ms: int = frame["deadline_ms"]

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


class _Tee(io.TextIOBase):
    """Collects what the handler prints (for LogType=Tail) and still writes it to the log file."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(s)
        return len(s)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def take(self) -> str:
        text, self.parts = "".join(self.parts), []
        return text


def _error_doc(exc: BaseException, request_id: str, skip_frames: int = 1) -> dict[str, Any]:
    tb = traceback.extract_tb(exc.__traceback__)[skip_frames:]
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "requestId": request_id,
        "stackTrace": traceback.format_list(tb),
    }


def _load_handler(spec: str) -> Any:
    """Import ``pkg.module.func`` the way Lambda's Python bootstrap does, with its error types."""
    module_name, _, func_name = spec.rpartition(".")
    if not module_name or not func_name:
        raise _InitError("Runtime.MalformedHandlerName",
                         f"Bad handler '{spec}': not enough values to unpack (expected 2, got 1)")
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        raise _InitError("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}") from exc
    except SyntaxError as exc:
        raise _InitError("Runtime.UserCodeSyntaxError",
                         f"Syntax error in module '{module_name}': {exc}") from exc
    func = getattr(module, func_name, None)
    if func is None:
        raise _InitError("Runtime.HandlerNotFound", f"Handler '{func_name}' missing on module '{module_name}'")
    return func


class _InitError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _rss() -> int:
    """Resident bytes now (cheap: one read of /proc), reported with every reply."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _cpu_wait_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (the kernel's run-queue
    delay, second field of /proc/thread-self/schedstat); ``None`` where the kernel keeps none.

    On Lambda an environment has its vCPU share to itself; here the environments, the server
    and the orchestrator share the host's cores, so part of a handler's wall time is this wait,
    which a real Lambda would not have billed. Reported beside the duration, never taken off it.
    """
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _invoke(handler: Any, frame: dict[str, Any], out: _Tee, err: _Tee) -> dict[str, Any]:
    request_id = frame["request_id"]
    wait0 = _cpu_wait_ns()
    t0 = time.perf_counter()
    try:
        event = json.loads(frame["payload"])
        result = handler(event, LambdaContext(frame))
        try:
            body = json.dumps(result)
            reply: dict[str, Any] = {"type": "result", "ok": True, "body": body}
        except (TypeError, ValueError) as exc:
            doc = {"errorMessage": f"Unable to marshal response: {exc}", "errorType": "Runtime.MarshalError",
                   "requestId": request_id, "stackTrace": []}
            reply = {"type": "result", "ok": False, "error": doc}
    except Exception as exc:  # noqa: BLE001 - a handler error is data, reported to the caller
        doc = _error_doc(exc, request_id)
        err.write(f"[ERROR] {doc['errorType']}: {doc['errorMessage']}\nTraceback (most recent call last):\n"
                  + "".join(doc["stackTrace"]))
        reply = {"type": "result", "ok": False, "error": doc}
    reply["duration_ms"] = (time.perf_counter() - t0) * 1000.0
    wait1 = _cpu_wait_ns()
    if wait0 is not None and wait1 is not None:
        reply["cpu_wait_ms"] = (wait1 - wait0) / 1e6
    sys.stdout.flush()
    sys.stderr.flush()
    reply["logs"] = out.take() + err.take()
    reply["rss"] = _rss()
    return reply


def serve(sock_path: str, env_id: str, started: float | None = None) -> None:
    """Connect to the server, run INIT, then serve invocations until the socket closes."""
    code_dir = os.environ.get("LAMBDA_TASK_ROOT", os.getcwd())
    if code_dir not in sys.path[:1]:
        sys.path.insert(0, code_dir)
    os.chdir(code_dir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    sock.sendall(protocol.encode({"type": "hello", "env_id": env_id, "pid": os.getpid()}))
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    sys.stdout, sys.stderr = out, err
    t0 = time.perf_counter()
    try:
        handler = _load_handler(os.environ["_HANDLER"])
    except _InitError as exc:
        doc = {"errorMessage": str(exc), "errorType": exc.error_type, "requestId": "", "stackTrace": []}
        sock.sendall(protocol.encode({"type": "init_error", "error": doc, "logs": out.take() + err.take()}))
        return
    except Exception as exc:  # noqa: BLE001 - module-level code raised: reported as Lambda does
        doc = _error_doc(exc, "", skip_frames=0)
        doc["requestId"] = ""
        sock.sendall(protocol.encode({"type": "init_error", "error": doc, "logs": out.take() + err.take()}))
        return
    sock.sendall(protocol.encode({"type": "ready", "init_ms": (time.perf_counter() - t0) * 1000.0,
                                  "logs": out.take() + err.take(), "rss": _rss()}))
    while True:
        try:
            frame = protocol.recv_frame(sock)
        except (EOFError, OSError):
            return  # the server went away or stopped this environment
        if frame.get("type") != "invoke":
            return
        sock.sendall(protocol.encode(_invoke(handler, frame, out, err)))


def main() -> None:
    # One thread per process unless the function says otherwise: workers share the cores.
    serve(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
