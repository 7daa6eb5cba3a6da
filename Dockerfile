# Armarius in a container: docs/deployment.md#docker-and-compose.
#   docker build -t armarius .
#   docker run --rm -v armarius-data:/data armarius armarius init
#   docker run -d -v armarius-data:/data -p 127.0.0.1:8765:8765 armarius
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN useradd --system --user-group --home-dir /data --no-create-home --shell /usr/sbin/nologin armarius \
    && install -d -o armarius -g armarius -m 700 /data

WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install . && cd / && rm -rf /build
WORKDIR /data

USER armarius
# Inside the container the server listens on every address; publish the port to the host's loopback
# (or a private network) and put a TLS-terminating proxy in front.
ENV ARMARIUS_DATA_DIR=/data \
    ARMARIUS_HOST=0.0.0.0 \
    ARMARIUS_PORT=8765
VOLUME ["/data"]
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ['ARMARIUS_PORT']}/healthz\", timeout=4)"]
CMD ["armarius", "serve"]
