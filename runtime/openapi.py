"""OpenAPI descriptions of the Lambda routes (request members, query parameters, headers).

The handlers read the raw request (as AWS does, to answer bad input with AWS's errors), so
FastAPI cannot infer these; they are spelled out here for clients and for schema-driven
fuzzing (``tests/reliability``). Served at ``/stellaris/v1/openapi.json``.
"""

from __future__ import annotations

from typing import Any

from runtime.functions import SUPPORTED_RUNTIMES

_ERROR = {
    "description": "AWS-shaped error: header x-amzn-ErrorType plus a JSON body",
    "headers": {"x-amzn-ErrorType": {"schema": {"type": "string"}}},
    "content": {"application/json": {"schema": {"type": "object"}}},
}
ERRORS: dict[int | str, dict[str, Any]] = {"4XX": _ERROR}


def _q(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _h(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "schema": schema}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


QUALIFIER = _q("Qualifier", {"type": "string", "minLength": 1, "maxLength": 128})
_ENV = {"type": "object", "properties": {
    "Variables": {"type": "object", "additionalProperties": {"type": "string"}}}}
_SETTINGS = {
    "Runtime": {"type": "string", "enum": list(SUPPORTED_RUNTIMES)},
    "Role": {"type": "string"},
    "Handler": {"type": "string", "maxLength": 128},
    "Description": {"type": "string", "maxLength": 256},
    "Timeout": {"type": "integer"},
    "MemorySize": {"type": "integer"},
    "Environment": _ENV,
    "RevisionId": {"type": "string"},
}
ZIP = {"type": "string", "description": "base64 of a zip archive"}

CREATE_FUNCTION = {**_body({
    "type": "object",
    "required": ["FunctionName", "Role", "Code"],
    "properties": {
        "FunctionName": {"type": "string", "maxLength": 140},
        "Code": {"type": "object", "properties": {"ZipFile": ZIP}},
        "PackageType": {"type": "string", "enum": ["Zip", "Image"]},
        "Architectures": {"type": "array", "items": {"type": "string"}},
        **_SETTINGS,
    },
})}
LIST_FUNCTIONS = {"parameters": [
    _q("Marker", {"type": "string"}), _q("MaxItems", {"type": "integer"}),
    _q("FunctionVersion", {"type": "string", "enum": ["ALL"]}),
]}
WITH_QUALIFIER = {"parameters": [QUALIFIER]}
UPDATE_CODE = _body({"type": "object", "properties": {
    "ZipFile": ZIP, "Publish": {"type": "boolean"}, "DryRun": {"type": "boolean"},
    "RevisionId": {"type": "string"}}})
UPDATE_CONFIGURATION = _body({"type": "object", "properties": _SETTINGS})
PUT_CONCURRENCY = _body({"type": "object", "required": ["ReservedConcurrentExecutions"],
                         "properties": {"ReservedConcurrentExecutions": {"type": "integer"}}})
EVENT_INVOKE_CONFIG = _body({"type": "object", "properties": {
    "MaximumRetryAttempts": {"type": "integer"},
    "MaximumEventAgeInSeconds": {"type": "integer"}}})
INVOKE = {
    "parameters": [
        QUALIFIER,
        _h("X-Amz-Invocation-Type", {"type": "string", "enum": ["RequestResponse", "Event", "DryRun"]}),
        _h("X-Amz-Log-Type", {"type": "string", "enum": ["None", "Tail"]}),
        _h("X-Amz-Client-Context", {"type": "string", "maxLength": 3583}),
    ],
    **_body({"description": "the event: any JSON document"}, required=False),
}
