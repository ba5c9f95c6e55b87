"""The jobq error tree (what handlers raise, what jobq raises) and the reason text of a failure."""

from __future__ import annotations


class JobqError(Exception):
    """Base of every error jobq raises on purpose."""


class ConfigError(JobqError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        self.key = key
        self.source = source
        where = f"{source}: " if source else ""
        what = f"{key}: " if key else ""
        super().__init__(f"{where}{what}{message}")


class NoSuchJob(ConfigError, LookupError):
    """An admin command named a job the queue does not have (``jobq jobs show``: exit 1).
    A ConfigError too, so what reports a bad id (the dashboard) needs nothing new."""


class TransportError(JobqError):
    """The queue backend failed (the driver's error is kept as ``__cause__``)."""


class ConnectionLost(TransportError):
    """The connection to the backend dropped or could not be made; retried with backoff.

    From an ``enqueue_many``: ``accepted`` holds the ids of the jobs of that call that did get
    in before the time ran out (they are queued); the others were not enqueued.
    """

    def __init__(self, message: str = "", *, accepted: tuple[str, ...] = ()) -> None:
        self.accepted = accepted
        super().__init__(message)


class Refused(ConnectionLost):
    """The server answered and refused, for a reason retrying cannot mend: a wrong role,
    password, database or vhost, a connection option the driver rejects, TLS the other end
    does not speak. ``key`` is the setting to check (``postgres.dsn``, ``rabbitmq.url``).

    Starting up it is not retried: exit 2 at once (cli/main.py). A process already running
    meets it as a lost connection, retried with backoff: an operator may be mending it.
    """

    def __init__(self, message: str, *, key: str) -> None:
        self.key = key
        super().__init__(message)


class OutcomeUnknown(ConnectionLost):
    """An enqueue whose COMMIT got no answer and whose fate could not be checked in time.

    The jobs in ``maybe`` may or may not be enqueued; those in ``accepted`` (earlier parts of
    the same call) are. Enqueueing ``maybe`` again may run them twice, never loses them.
    """

    def __init__(self, message: str, *, accepted: tuple[str, ...] = (),
                 maybe: tuple[str, ...] = ()) -> None:
        self.maybe = maybe
        super().__init__(message, accepted=accepted)


class HookFailed(JobqError):
    """An app's start-up or shutdown hook raised: the consumer does not start (or says so)."""


class SettleRejected(JobqError):
    """An ack the backend refused because of the job itself: ``cause`` is the job's failure.

    Not a TransportError: the job did not succeed after all (in Postgres transaction mode its
    transaction could not commit), so the pool settles it as failed with ``cause``.
    """

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(str(cause))


class TransactionOwned(JobqError):
    """A handler tried to end the job's transaction, or did; jobq ends it with the settle."""


class TransactionRequired(JobqError):
    """A transactional enqueue on a connection that is not inside an open transaction."""


class CommitFailed(JobqError):
    """The job's transaction could not commit (a deferred constraint, the session ended, ...)."""


class QueueFull(JobqError):
    """The queue is at its configured maximum depth and stayed so until the enqueue timeout.

    ``accepted`` holds the ids of the jobs of the same ``enqueue_many`` call that did get in
    before the queue filled up (they are queued and will run); the others were not enqueued.
    """

    def __init__(self, message: str = "queue is full", *, accepted: tuple[str, ...] = ()) -> None:
        self.accepted = accepted
        super().__init__(message)


class Retry(Exception):
    """Raised by a handler: run the job again after ``delay`` seconds (attempts still count)."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(reason or f"retry requested (delay={delay})")


class PermanentError(Exception):
    """Raised by a handler: this job can never succeed; dead-letter it now with this reason."""


class MalformedJob(JobqError):
    """A message could not be decoded into a Job; it is dead-lettered with this reason."""


class JobTooLarge(MalformedJob):
    """The payload or headers exceed ``limits.max_payload`` / ``limits.max_headers``."""


class UnknownKind(PermanentError):
    """No processor is configured for the job's kind (and there is no default processor)."""


class InvalidArguments(PermanentError):
    """A task's arguments do not validate against its argument type: dead at once, never retried."""


class JobTimeout(Exception):
    """A handler ran past the per-job timeout (retryable)."""


class ShutdownInterrupted(Exception):
    """A handler was still running when the shutdown deadline passed (retryable)."""


class HandlerCancelled(Exception):
    """A handler raised CancelledError although jobq did not cancel it (retryable)."""


class JobCancelled(Exception):
    """An operator cancelled the job while it ran (``jobq jobs cancel``): settled as cancelled."""


class WorkerDied(Exception):
    """The worker running a job ended unexpectedly before settling it (retryable)."""


MAX_REASON = 2000  # characters of an error message kept with a job


def describe(error: BaseException) -> str:
    """The reason text kept with a failed job: error type and message, safe for every backend.

    Bounded because it travels: in a RabbitMQ header (a header frame over the broker's
    frame_max closes the whole connection), in last_error, in every log line about the job.
    Safe because it reaches drivers: a lone surrogate (``os.fsdecode`` of a non-UTF-8 path)
    cannot be encoded as UTF-8, and Postgres text cannot hold NUL; either made the settle
    raise, so the job was never settled. Never raises, even for an error whose ``__str__`` does.
    """
    message = message_of(error).strip()
    if len(message) > MAX_REASON:
        message = f"{message[:MAX_REASON]}... ({len(message):,} characters)"
    name = type(error).__name__
    return safe_text(f"{name}: {message}" if message else name)


def message_of(error: BaseException) -> str:
    """``str(error)``, or what says it could not be had: never raises."""
    try:
        return str(error)
    except Exception as exc:  # a user exception whose __str__ fails still gets a message
        return f"<unprintable message: {type(exc).__name__}>"


def safe_text(text: str, limit: int = 2 * MAX_REASON) -> str:
    """``text`` as every driver accepts it: lone surrogates and NUL escaped, at most ``limit``.

    Escaping can make the text longer (up to 6 characters per surrogate), so the bound is
    applied afterwards.
    """
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    return text if len(text) <= limit else f"{text[:limit]}..."
