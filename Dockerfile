# tpucared in a container: `docker run -v tpucared:/var/lib/tpucared -v ./fleet.toml:/etc/tpucared/config.toml:ro tpucared`
# Built by `make image` (deploy/image.sh, podman), which the tests run: deploy/README.md.
# Stage 1 builds the wheel; stage 2 installs it into a venv on a slim base, non-root.
# BASE: any image with python (3.11+), pip and venv; deploy/image.sh passes a locally made
# Debian one on a machine that cannot pull the official image.
ARG BASE=python:3.11-slim
# EXTRAS: the wheel's extras to install, none by default: the daemon needs none. "emulator"
# adds the emulator, a distribution of its own (emulator/, with Google's API types it checks
# every request body with): tests/deploy builds such an image to run the emulator in a container
# beside the daemon's. Without it the image holds no emulator code at all.
ARG EXTRAS=""
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY tpucared ./tpucared
COPY migrations ./migrations
COPY emulator ./emulator
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip wheel --no-deps --wheel-dir /extra ./emulator

FROM ${BASE}
RUN useradd --system --create-home --home-dir /var/lib/tpucared --shell /usr/sbin/nologin tpucared
COPY --from=build /wheels /wheels
COPY --from=build /extra /extra
ARG EXTRAS
# The emulator's wheel goes in the same pip call when asked for, so the `emulator` extra's
# requirement (tpucared-emulator) is met from it, not from an index.
RUN python -m venv /opt/tpucared \
    && emulator="" && case ",$EXTRAS," in *,emulator,*) emulator="$(echo /extra/*.whl)";; esac \
    && /opt/tpucared/bin/pip install --no-cache-dir "$(echo /wheels/*.whl)${EXTRAS:+[$EXTRAS]}" $emulator \
    && rm -rf /wheels /extra
ENV PATH=/opt/tpucared/bin:$PATH \
    TPUCARED_CONFIG=/etc/tpucared/config.toml \
    TPUCARED_DB=/var/lib/tpucared/state.db \
    PYTHONUNBUFFERED=1
USER tpucared
VOLUME ["/var/lib/tpucared"]
# /healthz fails when the reconcile loop has not ticked recently. The config's daemon.http
# must listen on 0.0.0.0:9464 inside the container for this and for scraping /metrics.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["tpucared"]
CMD ["run"]
