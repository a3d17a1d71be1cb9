"""AWS-shaped API errors: ``x-amzn-ErrorType`` header plus a JSON body botocore can parse.

botocore takes the error code from the ``x-amzn-ErrorType`` header and the message from
``message``/``Message`` in the body; extra members (``Reason``) surface at the top level of
``ClientError.response``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response


class LambdaAPIError(Exception):
    """An error of the control or invoke API, rendered as AWS renders it."""

    code = "ServiceException"
    status = 500
    # ResourceNotFoundException uses a capitalised "Message" on the wire (LS-SNAP).
    message_key = "message"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def to_response(self) -> Response:
        body = {"Type": "User", self.message_key: self.message, **self.extra}
        return Response(
            content=json.dumps(body),
            status_code=self.status,
            media_type="application/json",
            headers={"x-amzn-ErrorType": self.code},
        )


def _error(code: str, status: int, message_key: str = "message") -> type[LambdaAPIError]:
    return type(code, (LambdaAPIError,), {"code": code, "status": status, "message_key": message_key})


ResourceNotFoundException = _error("ResourceNotFoundException", 404, "Message")
ResourceConflictException = _error("ResourceConflictException", 409)
InvalidParameterValueException = _error("InvalidParameterValueException", 400)
ValidationException = _error("ValidationException", 400)
InvalidRequestContentException = _error("InvalidRequestContentException", 400)
RequestEntityTooLargeException = _error("RequestEntityTooLargeException", 413)
TooManyRequestsException = _error("TooManyRequestsException", 429)
PreconditionFailedException = _error("PreconditionFailedException", 412)
UnsupportedMediaTypeException = _error("UnsupportedMediaTypeException", 415)
ServiceException = _error("ServiceException", 500)
# A path or method the API does not have (what AWS answers for an unknown route).
UnknownOperationException = _error("UnknownOperationException", 404)
# Authentication failures (SigV4), all 403 as on AWS.
InvalidSignatureException = _error("InvalidSignatureException", 403)
UnrecognizedClientException = _error("UnrecognizedClientException", 403)
MissingAuthenticationTokenException = _error("MissingAuthenticationTokenException", 403)
IncompleteSignatureException = _error("IncompleteSignatureException", 403)
