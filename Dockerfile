# cleanerd: the log compaction daemon and its one-shot commands (the entrypoint is the CLI).
# Build, run, volumes, UID/GID, read-only root, stop grace: deploy/container/README.md.
#
#   docker build -t cleanerd .
#   buildah bud --format docker --isolation chroot \
#       --build-arg BASE_IMAGE=localhost/cleanerd-base:bookworm -t cleanerd .
#
# BASE_IMAGE: any Debian bookworm image whose `python3` is CPython 3.11 with the venv module
# (the official slim image, or the debootstrap one deploy/container/build-base.sh makes).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

# ---- builder: wheels of cleanerd and of every dependency ------------------------------------
FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/build
WORKDIR /src
COPY pyproject.toml README.md LICENSE pyspark_cleanerd.py ./
COPY cleanerd ./cleanerd
# The final stage installs from /wheels alone; a dependency without a wheel for this platform is
# built here, where a compiler may be added, never there. Behind a TLS-intercepting proxy, give
# pip the proxy's CA bundle as a build secret (--secret id=pip-ca,src=FILE): it is used for this
# step only and lands in no layer.
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/build/bin/pip wheel --wheel-dir /wheels . \
    && ls /wheels/cleanerd-*.whl

# ---- the image: wheels only, no compiler, no network ------------------------------------------
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
# Fixed, so volume permissions can be set on the host (chown 10001:10001 the log dir).
ARG USER_UID=10001
ARG USER_GID=10001
ARG IMAGE_VERSION=unknown
ARG IMAGE_REVISION=unknown
ARG IMAGE_CREATED=unknown

LABEL org.opencontainers.image.title="cleanerd" \
      org.opencontainers.image.description="Log compaction daemon for Apache Kafka-format partition logs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${IMAGE_VERSION}" \
      org.opencontainers.image.revision="${IMAGE_REVISION}" \
      org.opencontainers.image.created="${IMAGE_CREATED}" \
      org.opencontainers.image.documentation="deploy/container/README.md" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

# libsnappy1v5: C++ snappy 1.1, the encoder whose bytes Kafka writes (docs/kafka-format.md §2.5.2);
# without it snappy batches are written by cramjam, valid but with other bytes.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libsnappy1v5 \
    && rm -rf /var/lib/apt/lists/*

# No home: nothing of the user's may land in the log dir (a broker takes every dir there for a
# partition), and NUMBA_CACHE_DIR below is where the only thing cleanerd caches goes. Not
# --system: a fixed UID above 999 is outside the system range and useradd would warn about it;
# --no-log-init keeps that high UID from growing lastlog and faillog.
RUN groupadd --gid "${USER_GID}" cleanerd \
    && useradd --no-log-init --uid "${USER_UID}" --gid "${USER_GID}" --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin cleanerd

# --no-index: nothing is fetched here; a wheel missing from the builder stage fails the build.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python3 -m venv /opt/cleanerd \
    && /opt/cleanerd/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
        --find-links /wheels cleanerd

# NUMBA_CACHE_DIR: the kernels compiled below, owned by the user (numba only uses a cache dir
# it can write to, even to load from it; it is a volume, so a read-only root keeps it writable).
ENV PATH=/opt/cleanerd/bin:${PATH} \
    NUMBA_CACHE_DIR=/var/cache/cleanerd/numba \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

COPY deploy/container/cleanerd.toml /etc/cleanerd/cleanerd.toml
RUN chmod 0644 /etc/cleanerd/cleanerd.toml \
    && install -d -o cleanerd -g cleanerd -m 0750 /var/lib/kafka \
    && install -d -o cleanerd -g cleanerd -m 0755 /var/cache/cleanerd /var/cache/cleanerd/numba

USER ${USER_UID}:${USER_GID}
WORKDIR /var/lib/kafka
# Last step: compile every kernel where it will run (numba's index names the installed sources
# by path), so the first cleaning after start loads them instead of compiling.
RUN cleanerd warmup

VOLUME ["/var/lib/kafka", "/etc/cleanerd", "/var/cache/cleanerd/numba"]
EXPOSE 9404/tcp
# The daemon stops cleanly on SIGTERM within cleanerd.shutdown.timeout.ms (20 s): docker stop -t 30.
STOPSIGNAL SIGTERM
# No curl in the image: the venv's Python asks /readyz, 200 once the daemon has surveyed its log
# dirs and loaded its kernels, 503 before that and whenever it is unhealthy (its manager loop
# stalled, a worker dead). A few bare lines, not `cleanerd ctl ready`: that loads the config, too
# much CPU for a check every 30 s. Plain HTTP first; a port that does not speak it (TLS on) is
# asked over https, its certificate not checked (our own port, on loopback); an answer (a 503)
# is never asked again.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import ssl, urllib.error, urllib.request as r\nu = '127.0.0.1:9404/readyz'\ntry:\n    r.urlopen('http://' + u, timeout=2)\nexcept urllib.error.HTTPError:\n    raise\nexcept Exception:\n    c = ssl.create_default_context()\n    c.check_hostname = False\n    c.verify_mode = ssl.CERT_NONE\n    r.urlopen('https://' + u, timeout=2, context=c)"]

ENTRYPOINT ["cleanerd"]
CMD ["run", "--config", "/etc/cleanerd/cleanerd.toml"]
