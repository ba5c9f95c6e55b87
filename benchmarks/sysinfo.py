"""What makes two benchmark results comparable: the machine, the software, the server settings."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.spaces import ROOT, Servers

PG_SETTINGS = ("synchronous_commit", "fsync", "shared_buffers", "max_connections", "wal_level",
               "autovacuum")


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def git_commit() -> str:
    """The commit the benchmark ran from, with ``+dirty`` if the tree had changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src",
                                "benchmarks"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty.strip() else "")


def postgres_info(dsn: str) -> dict[str, Any]:
    """Server version and the settings that change write cost."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            info: dict[str, Any] = {"version": conn.execute("SHOW server_version").fetchone()[0]}  # type: ignore[index]
            for name in PG_SETTINGS:
                info[name] = conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            return info
    except psycopg.Error as exc:
        return {"error": str(exc).strip()}


def rabbitmq_info(url: str) -> dict[str, Any]:
    """Broker product and version from the AMQP handshake."""
    async def ask() -> dict[str, Any]:
        import aio_pika

        conn = await aio_pika.connect(url, timeout=5)
        try:
            props = conn.transport.connection.server_properties  # type: ignore[union-attr]
            return {"product": str(props.get("product")), "version": str(props.get("version"))}
        finally:
            await conn.close()

    try:
        return asyncio.run(ask())
    except Exception as exc:  # an unreachable broker is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"}


def python_extras() -> dict[str, str]:
    """Versions of the libraries on the hot path."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("psycopg", "psycopg-binary", "psycopg-pool", "aio-pika", "aiormq", "uvloop", "jobq"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def environment(servers: Servers, backends: set[str]) -> dict[str, Any]:
    """Everything the report prints under "Environment"."""
    load = os.getloadavg()
    info: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "libraries": python_extras(),
        "commit": git_commit(),
        "load_average_at_start": [round(x, 2) for x in load],
    }
    if "postgres" in backends:
        info["postgres"] = postgres_info(servers.pg_dsn)
    if "rabbitmq" in backends:
        info["rabbitmq"] = rabbitmq_info(servers.amqp_url)
    return info
