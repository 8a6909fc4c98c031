# The costmodel service: onnxruntime + the shipped artifacts, no torch.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Dependencies first, so editing code does not reinstall them. Not harness/: the
# processes the tests start stay in the clone (pyproject.toml leaves the package out,
# so the dangling xla_costmodel/harness link is skipped; tests/test_layering.py checks
# that nothing shipped imports it).
COPY pyproject.toml README.md ./
COPY xla_costmodel/ xla_costmodel/
COPY tpugraphs/ tpugraphs/
COPY service/ service/
COPY clients/ clients/
COPY collection/ collection/
COPY models/ models/
COPY bench/ bench/
COPY chaos/ chaos/
COPY studies/ studies/
RUN pip install '.[service]' \
    && useradd --system --uid 10001 --no-create-home costmodel \
    && mkdir -p /var/lib/costmodel && chown costmodel /var/lib/costmodel

USER costmodel
# Measurements: a SQLite file on this volume unless COSTMODEL_DATABASE_URL is set.
VOLUME /var/lib/costmodel
ENV COSTMODEL_MODEL_DIR=/app/models/artifacts \
    COSTMODEL_DATA_DIR=/var/lib/costmodel \
    COSTMODEL_HOST=0.0.0.0 \
    COSTMODEL_PORT=8000
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]

CMD ["costmodel", "serve", "--host", "0.0.0.0", "--port", "8000"]
