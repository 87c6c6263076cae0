"""The Python example of docs/guides/high-availability.md runs: an enqueue retried with
its idempotency key finds the job the first attempt made."""

from __future__ import annotations

import psycopg
import pytest

from tests.integration.test_docs_examples import DOCS, blocks

GUIDE = DOCS / "guides" / "high-availability.md"


def test_the_idempotent_retry_example_enqueues_once(dsn: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code = blocks(GUIDE, "python")
    assert len(code) == 1
    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    namespace: dict[str, object] = {"__name__": "ha_example"}
    exec(compile(code[0], str(GUIDE), "exec"), namespace)  # the docs' own code
    q = namespace["q"]
    try:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT task, idempotency_key, args FROM pgqueue.jobs").fetchall()
        assert rows == [("billing.charge", "charge:42", [42])]
    finally:
        q.close()  # type: ignore[attr-defined]
