"""``jobq dashboard``: a web page over one or more queues, on either backend.

Queues with their depth by state, pause and a chart of the waiting jobs; jobs by state with
search by id and kind; one job's page; dead letters with requeue and purge; cancel, retry now,
pause and resume. Starlette serves it (uvicorn), Jinja2 renders it with autoescaping (a
payload holding ``<script>`` shows as text); no front-end build step. Safe to run: it binds
127.0.0.1 unless told otherwise, every action needs the ``dashboard.token`` (a login sets a
session cookie, SameSite=Strict and HttpOnly, and every form carries a CSRF token bound to
it), with no token it is read-only, and a backend that is down shows as a banner on its queue
while the others work on (the next page load tries it again).
"""
