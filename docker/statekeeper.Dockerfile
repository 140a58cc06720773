# The one image of the compose stack's Spark and Airflow services: Python 3.11, Java 17, the
# pinned runtime lock requirements.lock (Airflow 3.3, the Spark provider, pyspark,
# great-expectations...; no test or dev tool: those are in requirements-dev.lock) and the
# statekeeper package with its provider and plugin entry points, so drivers, executors and
# DAGs run exactly the versions the tests run. Built from the repo root: docker compose build
# (context ".", see .dockerignore).
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/statekeeper
COPY requirements.lock pyproject.toml ./
# psycopg2: Airflow's metadata database is Postgres here (SQLite in the embedded platform).
RUN pip install --no-cache-dir uv==0.13.8 \
 && uv pip install --system -r requirements.lock psycopg2-binary==2.9.10
COPY include ./include
# pyspark-client (pulled by the Airflow Spark provider) ships pyspark's Python files too:
# reinstall pyspark last so its own files win (as `make install` does).
RUN uv pip install --system --no-deps -e . \
 && uv pip uninstall --system pyspark \
 && uv pip install --system --no-deps "pyspark==$(sed -n 's/^pyspark==//p' requirements.lock)" \
 && uv cache clean \
 && python -c "import pyspark, statekeeper; print('pyspark', pyspark.__version__)"
COPY dags ./dags
COPY plugins ./plugins
COPY spark_apps ./spark_apps

ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    PYTHONPATH=/opt/statekeeper \
    PYTHONUNBUFFERED=1
ENTRYPOINT ["/usr/bin/tini", "--"]
