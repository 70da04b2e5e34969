# syntax=docker/dockerfile:1
# tenon's image: every service (`tenon run <service>`) and the operator commands (tap, replay, explain,
# simulate). Development tools (devtools/: the sandbox, `tenon up`) are not in it: they plug into the CLI by
# entry point and tenon never imports them, so the image simply lacks those commands.
#
#   docker build -t tenon:dev .
#   docker run --rm tenon:dev run scheduler --help
#
# Pin the base by digest for releases: --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: a virtualenv with tenon and its pinned dependencies ----------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/tenon
WORKDIR /src
# every dependency at the version constraints.txt pins (the same set the tests run with)
COPY pyproject.toml constraints.txt README.md ./
COPY proto ./proto
COPY tenon ./tenon
# (pip compiles the bytecode here, so a read-only root filesystem costs no start-up time)
RUN /opt/tenon/bin/pip install -c constraints.txt . \
 && /opt/tenon/bin/pip uninstall -y pip \
 && /opt/tenon/bin/tenon --help > /dev/null

# --- final: the virtualenv on a clean base, no compilers, no pip, not root -----------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="tenon" \
      org.opencontainers.image.description="A Kubernetes node autoscaler speaking Karpenter's API" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN python -m pip uninstall -y pip setuptools wheel \
 && groupadd --system --gid 65532 tenon \
 && useradd --system --uid 65532 --gid 65532 --home-dir /home/tenon --create-home --shell /usr/sbin/nologin tenon
COPY --from=builder /opt/tenon /opt/tenon
ENV PATH=/opt/tenon/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TENON_LOG_FORMAT=json \
    TENON_HEALTH_PORT=8081
USER 65532:65532
WORKDIR /home/tenon
EXPOSE 8081
ENTRYPOINT ["tenon"]
CMD ["--help"]
