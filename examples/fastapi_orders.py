"""A FastAPI app: an order and the job that fulfils it, written in one transaction.

POST /orders inserts the order and enqueues ``fulfil_order`` in the same SQLAlchemy
``AsyncSession`` transaction: if the request fails after the enqueue, both roll back,
and no worker ever sees a job for an order that does not exist. GET /jobs/{id} reads
the job's status and result.

Run it (from this directory, with a PostgreSQL at DATABASE_URL)::

    export DATABASE_URL=postgresql+psycopg://app@localhost:5432/app
    pgq migrate                                  # pgqueue's tables
    pip install uvicorn && uvicorn fastapi_orders:app
    pgq worker -A fastapi_orders:q               # in another terminal

    curl -X POST localhost:8000/orders -H 'content-type: application/json' -d '{"item": "book"}'
    curl localhost:8000/jobs/1

Tested by tests/integration/test_examples.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pgqueue import JobContext, Queue

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://app@localhost:5432/app")

engine = create_async_engine(DATABASE_URL)
Session = async_sessionmaker(engine, expire_on_commit=False)
q = Queue(DATABASE_URL)  # pgqueue takes the same SQLAlchemy URL


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), default="new")


# Every task has a timeout: the worker's --shutdown-timeout (deploy/) is longer than the
# longest of them, so a deploy lets running jobs finish instead of cutting them off.
@q.task(timeout=60)
async def fulfil_order(order_id: int, ctx: JobContext) -> str:
    # The order's update and the job's success commit together: a crash between them
    # cannot leave a fulfilled order whose job runs again, or the reverse.
    async with ctx.transaction() as conn:
        await conn.execute("UPDATE orders SET status = 'fulfilled' WHERE id = %s", [order_id])
    return f"order {order_id} fulfilled"


async def create_tables() -> None:
    """The example's own table (a real app would use alembic migrations)."""
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await create_tables()
    yield
    await q.close_async()
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


async def session() -> AsyncIterator[AsyncSession]:
    async with Session() as s:
        yield s


class NewOrder(BaseModel):
    item: str


@app.post("/orders", status_code=201)
async def create_order(
    order: NewOrder, s: Annotated[AsyncSession, Depends(session)]
) -> dict[str, Any]:
    async with s.begin():  # one transaction: the order and its job, or neither
        row = Order(item=order.item)
        s.add(row)
        await s.flush()  # the order's id
        job = await fulfil_order.using(conn=s).enqueue_async(row.id)
        if order.item == "unobtainium":
            # Raised inside the transaction: the order and the job both roll back.
            raise HTTPException(status_code=409, detail="out of stock")
    return {"order_id": row.id, "job_id": job.id}


@app.get("/jobs/{job_id}")
async def job_status(job_id: int) -> dict[str, Any]:
    job = await q.get_job_async(job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return {"id": job.id, "task": job.task, "status": job.status, "result": job.result,
            "error": job.last_error}


@app.get("/orders/{order_id}")
async def order_status(
    order_id: int, s: Annotated[AsyncSession, Depends(session)]
) -> dict[str, Any]:
    row = await s.get(Order, order_id)
    if row is None:
        raise HTTPException(status_code=404, detail=f"no order {order_id}")
    return {"id": row.id, "item": row.item, "status": row.status}
