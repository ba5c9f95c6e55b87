# The jobq image (consumer, producer and the jobq admin command) for compose/docker-compose.yml.
# Slim base, dependencies in their own cached layer, runs as a non-root user.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first: this layer is rebuilt only when pyproject.toml changes, not on every
# code edit. A placeholder package (only its version) lets pip resolve and install them; it is removed.
COPY pyproject.toml README.md ./
RUN mkdir -p src/jobq \
    && echo '__version__ = "0"' > src/jobq/__init__.py \
    && pip install ".[postgres,rabbitmq,dashboard]" \
    && pip uninstall -y jobq \
    && rm -rf src build

COPY src ./src
RUN pip install --no-deps . && rm -rf build
COPY configs ./configs

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin jobq
USER 10001:10001

EXPOSE 9100
CMD ["consumer", "--config", "configs/compose.yaml", "--transport", "postgres"]
