"""The environment every platform process runs with: Airflow's configuration, the
``spark_default`` connection and the statekeeper settings that point apps at the platform.

Airflow 3.3 runs tasks with the LocalExecutor on SQLite (measured here: a triggered DAG's
task ran and succeeded), so the platform needs no database server. Secrets (the admin
password, the JWT and API secret keys) are generated once per platform root and kept under
it, so every component signs and checks tokens with the same key.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from statekeeper.platform.layout import PlatformConfig
from statekeeper.platform.processes import MARKER_ENV

PASSWORDS_FILE = "passwords.json"
SECRETS_FILE = "secrets.json"
# LocalExecutor forks this many task runners up front (the default 32 cost ~4 GiB RSS).
PARALLELISM = 8


def admin_password(config: PlatformConfig) -> str:
    """The admin's password, made on first use (the simple auth manager reads this file)."""
    path = config.airflow_home / PASSWORDS_FILE
    if path.exists():
        return str(json.loads(path.read_text())[config.admin_user])
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    _write_private(path, {config.admin_user: password})
    return password


def _secrets(config: PlatformConfig) -> dict[str, str]:
    path = config.airflow_home / SECRETS_FILE
    if path.exists():
        return dict(json.loads(path.read_text()))
    path.parent.mkdir(parents=True, exist_ok=True)
    # 64 bytes: shorter HMAC keys make PyJWT warn on every token.
    values = {"jwt_secret": secrets.token_urlsafe(64), "secret_key": secrets.token_urlsafe(32)}
    _write_private(path, values)
    return values


def _write_private(path: Path, data: dict[str, str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=2)


def spark_connection() -> str:
    """``spark_default`` as Airflow reads it from AIRFLOW_CONN_SPARK_DEFAULT: local[2],
    client mode, ``spark-submit`` from the venv (first on PATH)."""
    return json.dumps(
        {
            "conn_type": "spark",
            "host": "local[2]",
            "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"},
        }
    )


def statekeeper_env(config: PlatformConfig) -> dict[str, str]:
    """STATEKEEPER_* settings so apps, DAGs and the CLI use the platform's broker and
    folders (names: statekeeper.settings.StatekeeperSettings fields, plus the DAGs'
    STATEKEEPER_SPECS_DIR)."""
    return {
        "STATEKEEPER_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "STATEKEEPER_STATE_DIR": str(config.app_data_dirs[0]),
        "STATEKEEPER_CHECKPOINT_DIR": str(config.app_data_dirs[1]),
        "STATEKEEPER_SNAPSHOT_URL": config.app_data_dirs[2].as_uri(),
        "STATEKEEPER_SPECS_DIR": str(config.apps_specs_dir),
    }


def airflow_config(config: PlatformConfig) -> dict[str, str]:
    """The AIRFLOW_* variables of every Airflow component."""
    home = config.airflow_home
    keys = _secrets(config)
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(config.repo / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(config.repo / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(config.airflow_port),
        "AIRFLOW__API__BASE_URL": config.ui_url,
        "AIRFLOW__API__SECRET_KEY": keys["secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{config.ui_url}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{config.admin_user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / PASSWORDS_FILE),
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(),
    }


def platform_env(config: PlatformConfig, base: dict[str, str] | None = None) -> dict[str, str]:
    """The full environment of a platform process: ``base`` (default: this process's)
    without inherited AIRFLOW_* settings, plus Airflow's config, the statekeeper settings,
    Spark's loopback and interpreter settings, the venv first on PATH and the marker that
    lets `down` find every descendant."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not (k.startswith("AIRFLOW__") or k.startswith("AIRFLOW_CONN_") or k == "AIRFLOW_HOME")
    }
    venv_bin = str(Path(sys.executable).parent)
    env.update(airflow_config(config))
    env.update(statekeeper_env(config))
    env.update(
        PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
    )
    env[MARKER_ENV] = str(config.root)
    env.update(config.extra)
    return env
