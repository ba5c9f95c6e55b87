"""The web application: jobq's app opened once, in the lifespan; an endpoint that writes an
order and enqueues its receipt in one transaction, so a job exists if and only if its order
does (``uvicorn examples.fastapi_shop.app:api``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from .tasks import Receipt, jobs, send_receipt

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


class Order(BaseModel):
    email: str
    items: int


@contextlib.asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with jobs, AsyncConnectionPool(DATABASE_URL, min_size=1, max_size=4) as pool:
        async with pool.connection() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS shop_orders "
                               "(id bigserial PRIMARY KEY, email text NOT NULL, items int NOT NULL)")
        api.state.pool = pool
        yield


api = FastAPI(lifespan=lifespan)


@api.post("/orders")
async def create_order(order: Order) -> dict[str, Any]:
    pool: AsyncConnectionPool[Any] = api.state.pool
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute("INSERT INTO shop_orders (email, items) VALUES (%s, %s) RETURNING id",
                                 (order.email, order.items))
        row = await cur.fetchone()
        assert row is not None
        order_id = int(row[0])
        job = await send_receipt.enqueue(Receipt(order_id, order.email), connection=conn)
        if order.items <= 0:  # found wrong after the enqueue: the order and its job roll back
            raise HTTPException(400, "an order needs at least one item")
    return {"order": order_id, "job": job}
