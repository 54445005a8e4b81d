# The image of the spec's first command (docs/release.md):
#
#   docker run --rm -p 4437:4437 ghcr.io/tonbo-io/ursula:0.7.6
#
# a single Raft node on 0.0.0.0:4437 whose WAL lives in a temporary directory inside the
# container, running as a non-root user, with `ursula` and `ursulactl` on PATH. The binaries
# come from the build context, built by scripts/release.sh into dist/ with a glibc 2.28 floor,
# so the image needs no toolchain:
#
#   scripts/release.sh && docker build -t ghcr.io/tonbo-io/ursula:0.7.6 .
FROM debian:bookworm-slim

# Where the binaries are in the context: dist/ for this machine's architecture; a multi-arch
# release builds one image per architecture from dist/linux-<arch> (docs/release.md).
ARG BIN_DIR=dist

# ca-certificates: the S3 cold tier's client trusts the system's roots. A fixed uid/gid, so
# volumes and Kubernetes' runAsNonRoot can be set up against numbers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && groupadd --system --gid 10001 ursula \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/ursula --no-create-home \
      --shell /usr/sbin/nologin ursula \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/ursula

COPY ${BIN_DIR}/ursula ${BIN_DIR}/ursulactl /usr/local/bin/
# `ursulagw` runs the gateway (`ursula gateway`): the binary dispatches on its name.
RUN ln -s ursula /usr/local/bin/ursulagw
COPY docker/ursula.toml /etc/ursula/ursula.toml
COPY LICENSE /usr/share/doc/ursula/LICENSE
LABEL org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.7.6"

# A named volume mounted here starts out owned by the ursula user: the place for raft.wal.path.
WORKDIR /var/lib/ursula
USER 10001:10001
EXPOSE 4437

# `ursulactl ready` GETs /__ursula/ready (no curl in the image). A config listening elsewhere
# sets URSULA_READY_URL (docker run -e) to match.
ENV URSULA_READY_URL=http://127.0.0.1:4437
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ursulactl ready --url "$URSULA_READY_URL" --http-timeout-secs 4

# The server is PID 1 and handles SIGTERM itself: it stops accepting, stops its groups, fsyncs
# its journals, records a clean run and exits 0 within its 20 s shutdown deadline
# (server.shutdown_deadline). `docker stop` waits 10 s by default; give it `-t 30` (the spec's
# chart gives 30 s) so a slow shutdown is not cut short by SIGKILL. The admin plane listens on
# the container's loopback (127.0.0.1:4438): reach it with `docker exec`.
STOPSIGNAL SIGTERM
CMD ["ursula", "server", "--config", "/etc/ursula/ursula.toml"]
