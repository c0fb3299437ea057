# syntax=docker/dockerfile:1
# gangsched container image.
#
#   docker build -t ghcr.io/gangsched/gangsched:0.1.0 .
#   docker run --rm ghcr.io/gangsched/gangsched:0.1.0 --help
#
# Two stages: the builder installs the locked dependencies (requirements.lock, every file
# checked against its sha256 with --require-hashes: the same lock hack/test.sh tests with) and
# then the project into a virtualenv; the runtime stage copies that virtualenv and nothing else
# (no pip cache, no build tools, no sources).
#
# The base image is pinned by the digest of its multi-architecture index, so a rebuild gets the
# same Python and Debian packages. To update it (a new Python patch release or Debian security
# fixes), take the digest of the tag you want and replace both, tag and digest:
#   docker buildx imagetools inspect python:3.11-slim-bookworm     # "Digest:" line, and the
#                                                                  # Python version it holds
# then rebuild, and run hack/lock.sh if the Python minor version changed (the lock is resolved
# for CPython 3.11 on Linux).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# ---- builder ----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/gangsched
WORKDIR /src

# Dependencies first, in a layer of their own: it is rebuilt only when the lock file changes.
# --no-deps: exactly the locked set, nothing resolved at build time.
COPY requirements.lock ./
RUN /opt/gangsched/bin/pip install --require-hashes --no-deps -r requirements.lock

# Then the project itself (pyproject.toml names README.md and LICENSE), without dependencies:
# they are all in place, at the locked versions. Only the scheduler's package: the dev tools
# (gangsched_dev/: the dev cluster, the in-process benchmark) stay out of the build context
# (.dockerignore) and so out of the image; the check below fails if they get in.
COPY pyproject.toml README.md LICENSE ./
COPY gangsched ./gangsched
RUN /opt/gangsched/bin/pip install --no-deps . \
    && /opt/gangsched/bin/pip check \
    && /opt/gangsched/bin/gangsched --help > /dev/null \
    && ! /opt/gangsched/bin/python -c "import gangsched_dev" 2> /dev/null

# ---- runtime ----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="gangsched" \
      org.opencontainers.image.description="A gang-aware Kubernetes scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/gangsched/bin:$PATH

# The unprivileged user the scheduler runs as (the Deployment also sets runAsUser 65532).
RUN groupadd --system --gid 65532 gangsched \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gangsched

COPY --from=builder /opt/gangsched /opt/gangsched

# /metrics, /healthz and /readyz (httpBindAddress). Not kube-scheduler's ports (10251 was its
# old insecure one, 10259 its secure one): the two can share a host.
EXPOSE 10261

USER 65532:65532

ENTRYPOINT ["gangsched"]
CMD ["run"]
