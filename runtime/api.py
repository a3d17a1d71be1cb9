"""FastAPI routes: the Lambda REST API (as botocore speaks it) plus ``/stellaris/v1`` extras."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import FileResponse, JSONResponse, Response

from runtime import codezip
from runtime import openapi as oa
from runtime.concurrency import Throttled
from runtime.core import Runtime, Settings
from runtime.errors import (
    InvalidParameterValueException,
    InvalidRequestContentException,
    LambdaAPIError,
    RequestEntityTooLargeException,
    ResourceNotFoundException,
    ServiceException,
    TooManyRequestsException,
    UnknownOperationException,
    ValidationException,
)
from runtime.invoke import CPU_WAIT_HEADER, log_tail
from runtime.sigv4 import SigV4Middleware

MAX_SYNC_REQUEST = 6_291_456  # 6 MB, RequestResponse
MAX_ASYNC_REQUEST = 1_048_576  # 1 MB, Event (since Oct 2025)
F = "/2015-03-31/functions"
log = logging.getLogger("runtime.api")


def _validation_error(value: Any, member: str, constraint: str) -> ValidationException:
    return ValidationException(f"1 validation error detected: Value '{value}' at '{member}' "
                               f"failed to satisfy constraint: {constraint}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"Non-standard token '{name}'")


def parse_json(raw: bytes | str) -> Any:
    """Strict JSON (no NaN/Infinity, as AWS's parser); ``ValueError`` on anything else.

    A deeply nested document makes ``json.loads`` raise ``RecursionError``: that is bad
    input too, never a server error.
    """
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = parse_json(raw)
    except ValueError as exc:
        raise InvalidRequestContentException(f"Could not parse request body into json: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequestContentException("Could not parse request body into json: not an object")
    return body


def create_app(settings: Settings) -> FastAPI:
    rt = Runtime(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await rt.start()
        try:
            yield
        finally:
            await rt.close()

    app = FastAPI(lifespan=lifespan, title="Stellaris local Lambda runtime", docs_url=None, redoc_url=None,
                  openapi_url="/stellaris/v1/openapi.json", responses=oa.ERRORS)
    app.state.runtime = rt
    if settings.auth == "sigv4":
        app.add_middleware(SigV4Middleware, credentials=settings.credentials)

    @app.exception_handler(LambdaAPIError)
    async def _aws_error(request: Request, exc: LambdaAPIError) -> Response:
        return exc.to_response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # Routing misses (unknown path 404, wrong method 405) in AWS's error shape too.
        if exc.status_code in (404, 405):
            return UnknownOperationException("Unknown operation", Path=request.url.path,
                                             Method=request.method).to_response()
        err = LambdaAPIError(str(exc.detail))
        err.status, err.code = exc.status_code, "ServiceException" if exc.status_code >= 500 else "ValidationException"
        return err.to_response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # A bug, not bad input: still answer in AWS's shape (botocore can parse it) and log it.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return ServiceException(f"Internal error: {type(exc).__name__}").to_response()

    def ok(doc: Any, status: int = 200) -> JSONResponse:
        return JSONResponse(doc, status_code=status)

    def describe(name: str, **kw: str) -> dict[str, Any]:
        return rt.registry.entries[name].config.describe(settings.region, **kw)

    # -- control plane -------------------------------------------------------------------
    @app.post(F, openapi_extra=oa.CREATE_FUNCTION)
    async def create_function(request: Request) -> Response:
        entry = await rt.registry.create(await _json_body(request))
        # AWS answers Pending/Creating and turns Active moments later; here it is already
        # Active for every later read, so waiters and eager invokers both work.
        return ok(entry.config.describe(settings.region, state="Pending"), 201)

    @app.get(F, openapi_extra=oa.LIST_FUNCTIONS)
    @app.get(F + "/", include_in_schema=False)
    async def list_functions(request: Request) -> Response:
        q = request.query_params
        max_items = None
        if q.get("MaxItems"):
            try:
                max_items = int(q["MaxItems"])
            except ValueError:
                max_items = 0
            if not 1 <= max_items <= 10000:
                raise _validation_error(q["MaxItems"], "maxItems",
                                        "Member must have value less than or equal to 10000 "
                                        "and greater than or equal to 1")
        page, marker = rt.registry.list(q.get("Marker"), max_items)
        doc: dict[str, Any] = {"Functions": []}
        for e in page:
            d = e.config.describe(settings.region)
            for k in ("State", "LastUpdateStatus"):
                d.pop(k, None)
            doc["Functions"].append(d)
        if marker:
            doc["NextMarker"] = marker
        return ok(doc)

    @app.get(F + "/{name}", openapi_extra=oa.WITH_QUALIFIER)
    async def get_function(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name, request.query_params.get("Qualifier"))
        fname = entry.config.name
        doc: dict[str, Any] = {
            "Configuration": describe(fname),
            "Code": {"RepositoryType": "S3",
                     "Location": str(request.base_url).rstrip("/") + f"/stellaris/v1/functions/{fname}/code.zip"},
        }
        if entry.reserved_concurrency is not None:
            doc["Concurrency"] = {"ReservedConcurrentExecutions": entry.reserved_concurrency}
        return ok(doc)

    @app.get(F + "/{name}/configuration", openapi_extra=oa.WITH_QUALIFIER)
    async def get_configuration(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name, request.query_params.get("Qualifier"))
        return ok(describe(entry.config.name))

    @app.put(F + "/{name}/code", openapi_extra=oa.UPDATE_CODE)
    async def update_code(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name)
        config = await rt.registry.update_code(entry, await _json_body(request))
        rt.pool.drain_function(config.name)  # warm environments of the old code never run again
        return ok(config.describe(settings.region, update="InProgress"))

    @app.put(F + "/{name}/configuration", openapi_extra=oa.UPDATE_CONFIGURATION)
    async def update_configuration(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name)
        config = rt.registry.update_config(entry, await _json_body(request))
        rt.pool.drain_function(config.name)
        return ok(config.describe(settings.region, update="InProgress"))

    @app.delete(F + "/{name}", openapi_extra=oa.WITH_QUALIFIER)
    async def delete_function(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name, request.query_params.get("Qualifier"))
        await rt.delete_function(entry.config.name)
        return Response(status_code=204)

    @app.put("/2017-10-31/functions/{name}/concurrency", openapi_extra=oa.PUT_CONCURRENCY)
    async def put_concurrency(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name)
        n = (await _json_body(request)).get("ReservedConcurrentExecutions")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidParameterValueException("ReservedConcurrentExecutions must be a non-negative integer.")
        others = rt.concurrency.reserved_total(exclude=entry.config.name)
        if settings.account_concurrency - others - n < settings.min_unreserved:
            raise InvalidParameterValueException(
                "Specified ReservedConcurrentExecutions for function decreases account's "
                "UnreservedConcurrentExecution below its minimum value of "
                f"[{settings.min_unreserved}]."
            )
        entry.reserved_concurrency = n
        rt.concurrency.wake()
        return ok({"ReservedConcurrentExecutions": n})

    @app.get("/2019-09-30/functions/{name}/concurrency")
    async def get_concurrency(name: str) -> Response:
        entry = rt.registry.resolve(name)
        if entry.reserved_concurrency is None:
            return ok({})
        return ok({"ReservedConcurrentExecutions": entry.reserved_concurrency})

    @app.delete("/2017-10-31/functions/{name}/concurrency")
    async def delete_concurrency(name: str) -> Response:
        entry = rt.registry.resolve(name)
        entry.reserved_concurrency = None
        rt.concurrency.wake()
        return Response(status_code=204)

    def _event_config(entry: Any) -> dict[str, Any]:
        return {"FunctionArn": entry.config.arn + ":$LATEST", "LastModified": time.time(),
                "MaximumRetryAttempts": entry.max_retry_attempts,
                "MaximumEventAgeInSeconds": entry.max_event_age_s,
                "DestinationConfig": {"OnSuccess": {}, "OnFailure": {}}}

    @app.put("/2019-09-25/functions/{name}/event-invoke-config", openapi_extra=oa.EVENT_INVOKE_CONFIG)
    @app.post("/2019-09-25/functions/{name}/event-invoke-config", include_in_schema=False)
    async def put_event_config(name: str, request: Request) -> Response:
        entry = rt.registry.resolve(name)
        body = await _json_body(request)
        retries = body.get("MaximumRetryAttempts", 2)
        age = body.get("MaximumEventAgeInSeconds", 21600)
        if not (type(retries) is int and 0 <= retries <= 2):
            raise InvalidParameterValueException("MaximumRetryAttempts must be between 0 and 2.")
        if not (type(age) is int and 60 <= age <= 21600):
            raise InvalidParameterValueException("MaximumEventAgeInSeconds must be between 60 and 21600.")
        entry.max_retry_attempts, entry.max_event_age_s = retries, age
        return ok(_event_config(entry))

    @app.get("/2019-09-25/functions/{name}/event-invoke-config")
    async def get_event_config(name: str) -> Response:
        return ok(_event_config(rt.registry.resolve(name)))

    @app.get("/2016-08-19/account-settings")
    @app.get("/2016-08-19/account-settings/", include_in_schema=False)
    async def account_settings() -> Response:
        entries = rt.registry.entries.values()
        return ok({
            "AccountLimit": {
                "TotalCodeSize": 80_530_636_800, "CodeSizeUnzipped": codezip.MAX_UNZIPPED_BYTES,
                "CodeSizeZipped": codezip.MAX_ZIPPED_BYTES,
                "ConcurrentExecutions": settings.account_concurrency,
                "UnreservedConcurrentExecutions": rt.concurrency.unreserved_limit,
            },
            "AccountUsage": {"TotalCodeSize": sum(e.config.code_size for e in entries),
                             "FunctionCount": len(rt.registry.entries)},
        })

    # -- data plane ----------------------------------------------------------------------
    @app.post(F + "/{name}/invocations", openapi_extra=oa.INVOKE)
    async def invoke(name: str, request: Request) -> Response:
        h = request.headers
        entry = rt.registry.resolve(name, request.query_params.get("Qualifier"))
        kind = h.get("x-amz-invocation-type", "RequestResponse")
        if kind not in ("RequestResponse", "Event", "DryRun"):
            raise InvalidParameterValueException(f"Unsupported invocation type: {kind}")
        raw = await request.body()
        limit = MAX_ASYNC_REQUEST if kind == "Event" else MAX_SYNC_REQUEST
        if len(raw) > limit:
            if kind == "Event":
                raise RequestEntityTooLargeException(
                    f"{len(raw)} byte payload is too large for the Event invocation type (limit {limit} bytes)")
            raise RequestEntityTooLargeException(
                f"Request must be smaller than {limit} bytes for the InvokeFunction operation")
        if not raw.strip():
            raw = b"{}"  # an empty request reaches the handler as {}
        try:
            parse_json(raw)
        except ValueError as exc:
            raise InvalidRequestContentException(
                f"Could not parse request body into json: Could not parse payload into json: {exc}") from exc
        payload = raw.decode("utf-8", errors="replace")
        request_id = str(uuid.uuid4())
        if kind == "DryRun":
            return Response(status_code=204, headers={"x-amzn-RequestId": request_id})
        if kind == "Event":
            rt.events.submit(entry.config.name, payload, request_id)
            return Response(status_code=202, headers={"x-amzn-RequestId": request_id})
        client_context = None
        if h.get("x-amz-client-context"):
            try:
                client_context = parse_json(base64.b64decode(h["x-amz-client-context"], validate=True))
            except (ValueError, binascii.Error) as exc:
                raise InvalidRequestContentException("Client context must be a valid Base64-encoded JSON object.") from exc
        # Emulated platform latency: half on the way in, half on the way out, never billed.
        latency_s = rt.latency.sample_s()
        if latency_s:
            await asyncio.sleep(latency_s / 2)
        try:
            rt.concurrency.try_acquire(entry)
        except Throttled as exc:
            rt.billing.throttle(entry.config.name, entry.config.memory_mb)
            raise TooManyRequestsException("Rate Exceeded.", Reason=exc.reason) from None
        try:
            outcome = await rt.invoker.run_once(entry, payload, request_id, client_context)
        finally:
            rt.concurrency.release(entry.config.name)
        if latency_s:
            await asyncio.sleep(latency_s / 2)
        headers = {"x-amzn-RequestId": request_id, "X-Amz-Executed-Version": "$LATEST"}
        if outcome.function_error:
            headers["X-Amz-Function-Error"] = "Unhandled"
        if h.get("x-amz-log-type") == "Tail":
            headers["X-Amz-Log-Result"] = base64.b64encode(log_tail(outcome.logs).encode()).decode()
        if outcome.cpu_wait_ms is not None:
            # Not Lambda's: the part of Duration spent waiting for a core of the shared host,
            # which a client may take off its own cost estimate. Lambda clients ignore it.
            headers[CPU_WAIT_HEADER] = f"{outcome.cpu_wait_ms:.3f}"
        return Response(content=outcome.body, status_code=200, headers=headers,
                        media_type="application/json")

    # -- stellaris extras ----------------------------------------------------------------
    @app.get("/stellaris/v1/health")
    async def health() -> Response:
        z = rt.zygote
        return ok({"status": "ok", "launcher": rt.pool.launcher.name,
                   "zygote": {"state": z.state, **z.info} if z is not None else None,
                   "environments": rt.pool.counts(), "functions": len(rt.registry.entries),
                   "invoke_latency": rt.latency.describe()})

    @app.get("/stellaris/v1/billing")
    async def billing() -> Response:
        return ok(rt.billing.report())

    @app.get("/stellaris/v1/environments")
    async def environments() -> Response:
        return ok({"environments": [
            {"id": e.id, "function": e.config.name, "generation": e.config.generation,
             "state": e.state.value, "pid": e.pid, "invocations": e.invocations,
             "init_ms": e.init_ms, "max_memory_mb": e.peak_rss // (1024 * 1024)}
            for e in rt.pool.envs.values()
        ]})

    @app.get("/stellaris/v1/functions/{name}/event-failures")
    async def event_failures(name: str) -> Response:
        rt.registry.check_name(name)
        stats = rt.events.stats.get(name, {})
        return ok({"FunctionName": name, "Failures": rt.events.failures.get(name, []),
                   "Stats": dict(stats), "Pending": rt.events.pending(name)})

    @app.get("/stellaris/v1/functions/{name}/logs")
    async def recent_logs(name: str) -> Response:
        rt.registry.check_name(name)
        return ok({"FunctionName": name, "Logs": list(rt.invoker.recent_logs.get(name, []))})

    @app.get("/stellaris/v1/functions/{name}/code.zip")
    async def code_zip(name: str) -> Response:
        entry = rt.registry.entries.get(name)
        if entry is None:
            raise ResourceNotFoundException(f"Function not found: {rt.registry.arn(name)}")
        return FileResponse(entry.config.zip_path, media_type="application/zip")

    @app.get("/metrics")
    async def metrics() -> Response:
        rt._refresh_gauges()
        return Response(generate_latest(rt.billing.registry), media_type=CONTENT_TYPE_LATEST)

    return app
