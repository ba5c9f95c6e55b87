"""Rows of the jobs table into Deliveries; a row that is not a valid job becomes a malformed one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobq.job import Delivery, Job

Row = Sequence[Any]
# jsonb arrives as text (the claim selects payload::text) and is decoded here: raw_decode on
# str skips json.loads' bytes sniffing and wrappers, ~0.4 us instead of ~1.6 us a payload.
_DECODER = json.JSONDecoder()


def _json(value: Any) -> Any:
    """A jsonb column: already decoded by the driver, or its text."""
    if not isinstance(value, str):
        return value
    if value == "{}":
        return {}
    try:
        return _DECODER.raw_decode(value)[0]
    except ValueError:
        return value  # not JSON: reported as malformed below


def row_to_delivery(row: Row, queue: str) -> Delivery:
    """``(id, kind, payload, headers, attempts, max_attempts, created_at)`` -> Delivery."""
    job_id, kind, payload, headers, attempts, max_attempts, created_at = row
    payload, headers = _json(payload), _json(headers)
    problem = None
    if not isinstance(payload, dict):
        problem = f"payload is not a JSON object (got {type(payload).__name__})"
        payload = {}
    if not isinstance(headers, dict):
        problem = problem or f"headers are not a JSON object (got {type(headers).__name__})"
        headers = {}
    if not isinstance(kind, str) or not kind:
        problem = problem or "kind is empty"
    job = Job(
        id=str(job_id),
        queue=queue,
        kind=kind or "",
        payload=payload,
        attempt=int(attempts),
        max_attempts=int(max_attempts),
        enqueued_at=created_at if isinstance(created_at, datetime) else None,
        headers={str(k): str(v) for k, v in headers.items()} if headers else {},
    )
    return Delivery(job=job, handle=job_id, malformed=problem)
