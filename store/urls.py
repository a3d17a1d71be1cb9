"""Store URLs: which Redis, over TLS or not, one server or a cluster — checked before use.

Schemes: ``redis://`` and ``rediss://`` (TLS) for one server or a cluster's configuration
endpoint used as one node; ``redis+cluster://`` and ``rediss+cluster://`` for Redis Cluster
(ElastiCache with cluster mode on): the client discovers the nodes and follows the slots;
``unix://`` for a local socket. Query options are redis-py's (``?ssl_cert_reqs=required&
ssl_ca_certs=/path/ca.pem``); an unknown one is an error here, not a TypeError at connect.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from store.errors import InvalidStoreUrl

# scheme -> (TLS, cluster)
SCHEMES: dict[str, tuple[bool, bool]] = {
    "redis": (False, False),
    "rediss": (True, False),
    "redis+cluster": (False, True),
    "rediss+cluster": (True, True),
    "unix": (False, False),
}

_BOOL = {"1": True, "true": True, "yes": True, "on": True,
         "0": False, "false": False, "no": False, "off": False}


def _bool(text: str) -> bool:
    try:
        return _BOOL[text.lower()]
    except KeyError:
        raise ValueError(f"expected true or false, got {text!r}") from None


def _cert_reqs(text: str) -> str:
    if text.lower() not in ("none", "optional", "required"):
        raise ValueError(f"expected none, optional or required, got {text!r}")
    return text.lower()


# Query options we pass on to redis-py, with their parsers. TLS ones need a rediss scheme.
_OPTIONS: dict[str, Any] = {
    "db": int,
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "health_check_interval": int,
    "max_connections": int,
    "client_name": str,
    "protocol": int,
}
_TLS_OPTIONS: dict[str, Any] = {
    "ssl_cert_reqs": _cert_reqs,
    "ssl_ca_certs": str,
    "ssl_ca_path": str,
    "ssl_certfile": str,
    "ssl_keyfile": str,
    "ssl_check_hostname": _bool,
    "ssl_min_version": int,
}


@dataclass(frozen=True)
class StoreUrl:
    """A parsed store URL: ``base`` is what redis-py's ``from_url`` gets (no ``+cluster``, no
    query), ``options`` the parsed query as client keyword arguments."""

    url: str
    base: str
    tls: bool
    cluster: bool
    host: str | None
    port: int | None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def loopback(self) -> bool:
        """Does the URL name this machine (a socket, localhost, 127.0.0.0/8, ::1)? Nothing
        outside the machine can reach such a server."""
        if self.host is None:
            return True
        if self.host.lower() in ("localhost", "localhost.localdomain") or \
                self.host.lower().endswith(".localhost"):
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def redact(url: str) -> str:
    """The URL with any password replaced, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username or ''}:***@{parts.hostname}"
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def parse_store_url(url: str) -> StoreUrl:
    """Check a store URL and split it into what the client needs; :class:`InvalidStoreUrl`
    (a ValueError) names the problem."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidStoreUrl(f"malformed Redis URL {shown}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidStoreUrl(
            f"unsupported Redis URL scheme {parts.scheme!r} in {shown}: use redis://, "
            "rediss:// (TLS), redis+cluster://, rediss+cluster:// (Redis Cluster) or unix://")
    tls, cluster = SCHEMES[scheme]
    if scheme != "unix" and not parts.hostname:
        raise InvalidStoreUrl(f"Redis URL {shown} names no host")
    allowed = {**_OPTIONS, **(_TLS_OPTIONS if tls else {})}
    options: dict[str, Any] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in allowed:
            hint = " (TLS options need rediss:// or rediss+cluster://)" \
                if name in _TLS_OPTIONS else f"; supported: {', '.join(sorted(allowed))}"
            raise InvalidStoreUrl(f"unknown option {name!r} in Redis URL {shown}{hint}")
        try:
            options[name] = allowed[name](values[-1])
        except ValueError as exc:
            raise InvalidStoreUrl(f"option {name} in Redis URL {shown}: {exc}") from None
    db = options.get("db", 0)
    path_db = parts.path.strip("/") if scheme != "unix" else ""
    if path_db and not path_db.isdigit():
        raise InvalidStoreUrl(f"Redis URL {shown}: the path must be a database number")
    if cluster and (db or (path_db and int(path_db))):
        raise InvalidStoreUrl(f"Redis URL {shown}: a Redis Cluster has only database 0")
    base_scheme = scheme.removesuffix("+cluster")
    base = urlunsplit((base_scheme, parts.netloc, parts.path, "", ""))
    return StoreUrl(url=url, base=base, tls=tls, cluster=cluster,
                    host=parts.hostname if scheme != "unix" else None, port=port,
                    options=options)
