"""The dashboard's pages and actions (Starlette), over ``Source``s."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from jobq.core.errors import ConfigError
from jobq.core.port import JOB_STATES, Admin
from jobq.dashboard.discovery import Discovery
from jobq.dashboard.security import COOKIE, Guard
from jobq.dashboard.sources import Source, SourceDown, points

LIST_LIMIT = 50
ACTIONS = ("pause", "resume", "cancel", "retry", "requeue", "purge", "requeue_all", "purge_all")
ACTION_TIMEOUT = 300.0  # seconds an action may take (a requeue of many dead letters)

_TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                         autoescape=select_autoescape(default=True, default_for_string=True))
_TEMPLATES.filters["pretty"] = lambda value: json.dumps(value, indent=2, default=str,
                                                        ensure_ascii=False)
# A job id in a path: any character (a foreign producer's message_id) quoted, "/" included.
_TEMPLATES.filters["q"] = lambda value: quote(str(value), safe="")


def build(sources: list[Source], guard: Guard, throughput: bool = False,
          hosts: list[str] | None = None, discovery: Discovery | None = None) -> Starlette:
    """The app: ``/``, ``/queues/{n}``, ``/queues/{n}/jobs/{id}``, ``/login``, actions;
    ``throughput``: the consumers' metrics are read, so the pages chart jobs done per second;
    ``hosts``: the Host names it answers to (any other is refused: DNS rebinding);
    ``discovery``: the overview lists every queue it finds on the backends too."""
    pages = Pages(sources, guard, throughput, discovery)
    guarded = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts else []
    return Starlette(middleware=guarded, routes=[
        Route("/", pages.overview),
        Route("/queues/{n:int}", pages.queue),
        Route("/queues/{n:int}/jobs/{job:path}", pages.job),
        Route("/queues/{n:int}/act", pages.act, methods=["POST"]),
        Route("/login", pages.login, methods=["GET", "POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
    ])


class Pages:
    """Each route's handler; every backend call goes through its ``Source``."""

    def __init__(self, sources: list[Source], guard: Guard, throughput: bool = False,
                 discovery: Discovery | None = None) -> None:
        self._sources = sources
        self._guard = guard
        self._throughput = throughput
        self._discovery = discovery

    def _page(self, request: Request, template: str, status: int = 200,
              **values: Any) -> Response:
        session = self._guard.session(request.cookies.get(COOKIE))
        body = _TEMPLATES.get_template(template).render(
            sources=self._sources, read_only=self._guard.read_only,
            signed_in=session is not None, csrf=self._guard.csrf(session),
            message=request.query_params.get("msg"), error=request.query_params.get("err"),
            **values)
        return HTMLResponse(body, status_code=status)

    def _rate(self, src: Source) -> dict[str, Any] | None:
        """The throughput chart, when the consumers' metrics are read (dashboard.metrics)."""
        return points(src.rates) if self._throughput else None

    def _source(self, request: Request) -> tuple[int, Source]:
        """The queue the path names; a 404 for a number past the configured ones."""
        index = int(request.path_params["n"])
        if not 0 <= index < len(self._sources):
            raise HTTPException(404, "no such queue")
        return index, self._sources[index]

    async def overview(self, request: Request) -> Response:
        """Every queue, configured or found: depth by state, oldest waiting, paused, the
        charts; banners for a backend down or one that could not list its queues."""
        if self._discovery is not None:
            await self._discovery.find()
        rows = await asyncio.gather(*(self._row(n, src) for n, src in enumerate(self._sources)))
        problems = self._discovery.problems if self._discovery is not None else {}
        return self._page(request, "index.html", rows=rows, problems=problems)

    async def _row(self, n: int, src: Source) -> dict[str, Any]:
        row: dict[str, Any] = {"n": n, "source": src, "waiting": points(src.history),
                               "rate": self._rate(src)}
        try:
            row["depth"] = await src.call(lambda a: a.depth())
            row["paused"] = await src.call(lambda a: a.pause_state())
        except SourceDown as exc:
            row["down"] = str(exc)
        return row

    async def queue(self, request: Request) -> Response:
        """One queue: depth, pause, the chart, its jobs in one state (of one kind)."""
        n, src = self._source(request)
        wanted = request.query_params.get("id", "").strip()
        if wanted:
            return RedirectResponse(f"/queues/{n}/jobs/{quote(wanted, safe='')}", status_code=303)
        default = "dead" if src.transport == "rabbitmq" else "pending"
        state = request.query_params.get("state", default)
        kind = request.query_params.get("kind", "").strip() or None
        values: dict[str, Any] = {"n": n, "src": src, "state": state, "kind": kind or "",
                                  "states": JOB_STATES, "waiting": points(src.history),
                                  "rate": self._rate(src)}
        try:
            values["depth"] = await src.call(lambda a: a.depth())
            values["paused"] = await src.call(lambda a: a.pause_state())
            try:
                values["jobs"] = await src.call(lambda a: a.list_jobs(state, kind, LIST_LIMIT))
            except ConfigError as exc:
                values["jobs"], values["cannot"] = [], str(exc)
        except SourceDown as exc:
            values["down"] = str(exc)
        return self._page(request, "queue.html", **values)

    async def job(self, request: Request) -> Response:
        """One job: its state, payload, headers, attempts, error, times and actions."""
        n, src = self._source(request)
        job_id = request.path_params["job"]
        values: dict[str, Any] = {"n": n, "src": src, "job_id": job_id}
        try:
            values["job"] = await src.call(lambda a: a.show_job(job_id))
        except ConfigError as exc:
            return self._page(request, "job.html", status=404, missing=str(exc), **values)
        except SourceDown as exc:
            values["down"] = str(exc)
        return self._page(request, "job.html", **values)

    async def act(self, request: Request) -> Response:
        """An action (a form's POST): refused without the session and its CSRF token."""
        n, src = self._source(request)
        form = await request.form()
        if not self._guard.allows(request.cookies.get(COOKIE), str(form.get("csrf", "")),
                                  request.headers.get("origin"), request.headers.get("host")):
            return PlainTextResponse(
                "forbidden: this dashboard is read-only" if self._guard.read_only else
                "forbidden: log in with the dashboard token, and act through its own pages",
                status_code=403)
        action, job_id = str(form.get("action", "")), str(form.get("id", "")).strip() or None
        back = str(form.get("back", "")) or f"/queues/{n}"
        if not back.startswith("/") or back.startswith("//"):
            back = "/"
        if action not in ACTIONS:
            return PlainTextResponse(f"unknown action {action!r}", status_code=400)
        try:
            query = {"msg": await src.call(lambda a: _carry_out(a, action, job_id),
                                           timeout=ACTION_TIMEOUT, whole=True)}
        except ConfigError as exc:
            query = {"err": str(exc)}
        except SourceDown as exc:
            query = {"err": f"{src.name} is unreachable: {exc}"}
        return RedirectResponse(f"{back}?{urlencode(query)}", status_code=303)

    async def login(self, request: Request) -> Response:
        """The token's form, and its POST: a session cookie for the right token."""
        if request.method == "GET":
            return self._page(request, "login.html")
        form = await request.form()
        cookie = self._guard.login(str(form.get("token", "")))
        if cookie is None:
            return self._page(request, "login.html", status=403, refused=True)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        """Forget the session cookie."""
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response


async def _carry_out(admin: Admin, action: str, job_id: str | None) -> str:
    """One action on the queue; one line saying what it did."""
    if action in ("pause", "resume"):
        change = await (admin.pause() if action == "pause" else admin.resume())
        return f"queue {'paused' if change.paused else 'resumed'}" + (
            "" if change.changed else " already: nothing changed")
    if action in ("requeue_all", "purge_all"):  # every dead job: asked for by name
        done = await (admin.dead_requeue() if action == "requeue_all" else admin.dead_purge())
        return f"{'requeued' if action == 'requeue_all' else 'purged'} {len(done)} dead jobs"
    if job_id is None:  # an empty id never means "all"
        raise ConfigError(f"{action}: which job? (give its id)", key="id")
    if action in ("cancel", "retry"):
        return await (admin.cancel_job(job_id) if action == "cancel" else admin.retry_job(job_id))
    done = await (admin.dead_requeue(ids=[job_id]) if action == "requeue"
                  else admin.dead_purge(ids=[job_id]))
    return f"{'requeued' if action == 'requeue' else 'purged'} {len(done)} dead jobs"
