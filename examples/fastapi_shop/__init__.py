"""A FastAPI application that enqueues jobq tasks (docs/how-to/fastapi.md)."""
