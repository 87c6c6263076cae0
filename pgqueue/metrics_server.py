"""The worker's HTTP endpoint: ``GET /metrics`` (Prometheus text) and ``GET /healthz``.

A few lines of HTTP/1.1 on ``asyncio.start_server``, in the worker's own event loop, not a
thread: a ``/healthz`` that answers proves the loop that runs the worker's services is
responsive (an async task blocking it makes the probe time out, which is the truth).
Each connection serves one request and closes (what Prometheus and Kubernetes probes
send); a request must arrive whole within ``REQUEST_TIMEOUT`` and within ``MAX_HEADER``
bytes, so a slow or hostile client holds nothing for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pgqueue.errors import ConfigurationError

logger = logging.getLogger("pgqueue.worker")

__all__ = ["Health", "MetricsServer"]

REQUEST_TIMEOUT: Final = 5.0
MAX_HEADER: Final = 16 * 1024
MAX_HEADER_LINES: Final = 100

# (healthy, JSON body): what GET /healthz answers, 200 or 503.
Health = Callable[[], tuple[bool, dict[str, Any]]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}


class MetricsServer:
    """Serves ``registry`` at ``/metrics`` and ``health()`` at ``/healthz``."""

    def __init__(self, *, host: str, port: int, registry: CollectorRegistry,
                 health: Health) -> None:
        self.host = host
        self.port = port
        self._registry = registry
        self._health = health
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen (``port`` 0 picks a free one; :attr:`port` says which)."""
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                      limit=MAX_HEADER)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {self.host}:{self.port} (--metrics-port): "
                f"{exc.strerror or exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("Metrics on http://%s:%d/metrics, health on /healthz.", self.host,
                    self.port)

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                method, path = await _read_request(reader)
                status, headers, body = self._respond(method, path)
                head = [f"HTTP/1.1 {status} {_REASONS[status]}",
                        f"Content-Length: {len(body)}", "Connection: close",
                        *(f"{name}: {value}" for name, value in headers.items())]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
                if method != "HEAD":
                    writer.write(body)
                await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            pass  # a client that went away, sent too much, or too slowly: nothing to say
        except Exception:
            logger.exception("The metrics endpoint failed to answer a request.")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _respond(self, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        if path not in ("/metrics", "/healthz"):
            return 404, {"Content-Type": "text/plain; charset=utf-8"}, \
                b"Not found: try /metrics or /healthz\n"
        if method not in ("GET", "HEAD"):
            return 405, {"Allow": "GET, HEAD", "Content-Type": "text/plain; charset=utf-8"}, \
                b"Method not allowed\n"
        if path == "/metrics":
            return 200, {"Content-Type": CONTENT_TYPE_LATEST}, generate_latest(self._registry)
        healthy, body = self._health()
        return (200 if healthy else 503), {"Content-Type": "application/json",
                                           "Cache-Control": "no-store"}, \
            json.dumps(body).encode() + b"\n"


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """The method and path of one request (headers read and ignored); ValueError when it
    is not HTTP."""
    line = (await reader.readuntil(b"\n")).decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError("not an HTTP request line")
    for _ in range(MAX_HEADER_LINES):
        if (await reader.readuntil(b"\n")).strip() == b"":
            break
    else:
        raise ValueError("too many header lines")
    return parts[0].upper(), parts[1].split("?", 1)[0]
