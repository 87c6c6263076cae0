"""pgqueue with plain psycopg: enqueue in your own transaction, then run a worker.

Run it with a PostgreSQL at PGQUEUE_DSN (or DATABASE_URL), or with no server at all
using the embedded one (``pip install 'pgqueue[embedded]'``)::

    PGQUEUE_DSN=postgresql://app@localhost:5432/app python psycopg_signup.py
    PGQUEUE_DSN=embedded python psycopg_signup.py

It migrates pgqueue's tables, signs a user up (the user's row and the welcome email's
job in one transaction), shows that a rolled-back signup leaves no job, runs a burst
worker (``pgq worker --burst`` does the same), and prints what happened. Tested by
tests/integration/test_examples.py.
"""

from __future__ import annotations

import psycopg

from pgqueue import Queue

q = Queue()  # PGQUEUE_DSN, then DATABASE_URL ("embedded": a local embedded server)


@q.task(name="send_welcome_email", timeout=30)
def send_welcome_email(email: str) -> str:
    return f"welcome, {email}"


def sign_up(conn: psycopg.Connection, email: str, *, fail: bool = False) -> int:
    """The user's row and the email's job: one transaction, both or neither."""
    with conn.transaction():
        conn.execute("INSERT INTO users (email) VALUES (%s)", [email])
        job = send_welcome_email.using(conn=conn).enqueue(email)
        if fail:
            raise RuntimeError("payment declined")
    return job.id


def main() -> None:
    q.migrate()
    with psycopg.connect(q.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS users (email text PRIMARY KEY)")
        job_id = sign_up(conn, "ada@example.com")
        try:
            sign_up(conn, "bob@example.com", fail=True)
        except RuntimeError as exc:
            print(f"bob's signup rolled back ({exc}): no user, no job")
    q.run_worker(burst=True, concurrency=2)  # runs what is ready, then returns
    job = q.get_job(job_id)
    assert job is not None
    print(f"job {job.id}: {job.status}, result {job.result!r}")
    print(f"jobs in total: {len(q.list_jobs())}")
    q.close()


if __name__ == "__main__":
    main()
