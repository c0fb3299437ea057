# syntax=docker/dockerfile:1
# gangsched container image.
#
#   docker build -t ghcr.io/gangsched/gangsched:0.1.0 .
#   docker run --rm ghcr.io/gangsched/gangsched:0.1.0 --help
#
# Two stages: the builder turns the project and its pinned dependencies (requirements.lock)
# into wheels; the runtime stage installs those wheels offline (--no-index) and keeps neither
# the wheels nor a pip cache. Both stages use the same base image, so compiled wheels match the
# runtime's Python. Pin a digest for fully reproducible builds with
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:... .
# The RUN --mount below needs BuildKit (the default builder of Docker 23+, and of buildx).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder ----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# Dependencies first, in a layer of their own: it is rebuilt only when the lock file changes.
COPY requirements.lock ./
RUN pip wheel --no-cache-dir --wheel-dir /wheels -r requirements.lock

# Then the project itself (pyproject.toml names README.md as the package's readme).
COPY pyproject.toml README.md ./
COPY gangsched ./gangsched
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels -c requirements.lock . \
    && cp requirements.lock /wheels/requirements.lock

# ---- runtime ----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="gangsched" \
      org.opencontainers.image.description="A gang-aware Kubernetes scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The unprivileged user the scheduler runs as (the Deployment also sets runAsUser 65532).
RUN groupadd --system --gid 65532 gangsched \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gangsched

# Install offline from the builder's wheels, constrained to the exact locked versions. The
# wheels are bind-mounted, not copied, so they take no space in the image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels \
        -c /wheels/requirements.lock /wheels/gangsched-*.whl \
    && gangsched --help > /dev/null

# /metrics, /healthz and /readyz (httpBindAddress)
EXPOSE 10251

USER 65532:65532

ENTRYPOINT ["gangsched"]
CMD ["run"]
