"""A Flask app with a synchronous SQLAlchemy ``Session``: a signup and its welcome email.

POST /signups inserts the user and enqueues ``send_welcome_email`` in one transaction
(``Session.begin()``); GET /jobs/<id> reads the job. Run it (from this directory)::

    export DATABASE_URL=postgresql+psycopg://app@localhost:5432/app
    pgq migrate
    flask --app flask_orders run
    pgq worker -A flask_orders:q                 # in another terminal

Tested by tests/integration/test_examples.py.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, abort, request
from sqlalchemy import String, create_engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from pgqueue import Queue

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://app@localhost:5432/app")

engine = create_engine(DATABASE_URL)
Session = sessionmaker(engine)
q = Queue(DATABASE_URL)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)


@q.task(timeout=30, max_attempts=5)
def send_welcome_email(user_id: int, email: str) -> str:
    # Stands for a call to an email provider.
    return f"welcome email sent to {email}"


def create_app() -> Flask:
    app = Flask(__name__)
    Base.metadata.create_all(engine)  # a real app would use alembic migrations

    @app.post("/signups")
    def sign_up() -> tuple[dict[str, Any], int]:
        email = str((request.get_json(silent=True) or {}).get("email", ""))
        if "@" not in email:
            abort(400, "an email address is required")
        try:
            with Session.begin() as session:  # commits at the end, rolls back on error
                user = User(email=email)
                session.add(user)
                session.flush()  # the user's id, and the unique check
                user_id = user.id
                job = send_welcome_email.using(conn=session).enqueue(user_id, email)
        except IntegrityError:
            abort(409, f"{email} has already signed up")  # and no second email job
        return {"user_id": user_id, "job_id": job.id}, 201

    @app.get("/jobs/<int:job_id>")
    def job_status(job_id: int) -> dict[str, Any]:
        job = q.get_job(job_id)
        if job is None:
            abort(404, f"no job {job_id}")
        return {"id": job.id, "status": job.status, "result": job.result}

    return app
