"""A small Django project on the real PostgreSQL, for jobq.contrib.django's tests."""
