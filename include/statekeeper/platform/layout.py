"""Where the embedded platform keeps its files, and the ports it listens on.

Everything lives under one root (``var/platform`` by default, gitignored):

```
var/platform/
  platform.json     ports and paths of this platform (written by the first `up`)
  run/<service>.json  PID files (pid, start time, argv, port, log)
  logs/<service>.log  each service's output
  broker/           the embedded broker's run dir (broker.json, tansu.pid, tansu.log)
  airflow/          AIRFLOW_HOME: airflow.db (SQLite), passwords.json, task logs
  state/ checkpoints/ snapshots/   the apps' statekeeper state, Spark checkpoints, snapshots
```
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from statekeeper.atomic_file import replace_text
from statekeeper.errors import ConfigError

#: The repo this package is installed from (editable install): dags/, plugins/, spark_apps/.
REPO = Path(__file__).resolve().parents[3]
DEFAULT_ROOT = Path("var/platform")
DEFAULT_AIRFLOW_PORT = 8080
DEFAULT_BROKER_PORT = 9092
#: The State stores nav entry's ``url_route`` (statekeeper.airflow.plugin.web_app
#: EXTERNAL_VIEW; not imported: that module loads Airflow). The UI renders the page at
#: ``/plugin/<url_route>``; tests/platform checks both agree through the api-server.
STATE_STORES_ROUTE = "state-stores"
CONFIG_FILE = "platform.json"


@dataclass
class PlatformConfig:
    """Ports and folders of one embedded platform."""

    root: Path = DEFAULT_ROOT
    airflow_port: int = DEFAULT_AIRFLOW_PORT
    broker_port: int = DEFAULT_BROKER_PORT
    repo: Path = REPO
    specs_dir: Path | None = None  # default: <repo>/spark_apps
    admin_user: str = "admin"
    extra: dict[str, str] = field(default_factory=dict)  # more env for every service

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.repo = Path(self.repo).resolve()
        if self.specs_dir is not None:
            self.specs_dir = Path(self.specs_dir).resolve()
        for folder in ("dags", "plugins"):
            if not (self.repo / folder).is_dir():
                raise ConfigError(
                    f"{self.repo} has no {folder}/ folder: the platform runs the DAGs and "
                    "plugins of a statekeeper checkout (install it editable: make install)"
                )

    # -- paths -----------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        """PID files."""
        return self.root / "run"

    @property
    def logs_dir(self) -> Path:
        """Service logs."""
        return self.root / "logs"

    @property
    def airflow_home(self) -> Path:
        """AIRFLOW_HOME."""
        return self.root / "airflow"

    @property
    def broker_run_dir(self) -> Path:
        """The embedded broker's run dir."""
        return self.root / "broker"

    @property
    def app_data_dirs(self) -> list[Path]:
        """The apps' state, Spark checkpoints and snapshots (they describe the broker's
        topics, so they go when a fresh broker starts)."""
        return [self.root / name for name in ("state", "checkpoints", "snapshots")]

    @property
    def apps_specs_dir(self) -> Path:
        """The app specs the DAGs act on."""
        return self.specs_dir or self.repo / "spark_apps"

    @property
    def bootstrap_servers(self) -> str:
        """The platform broker's address."""
        return f"127.0.0.1:{self.broker_port}"

    @property
    def ui_url(self) -> str:
        """The Airflow UI and REST API."""
        return f"http://127.0.0.1:{self.airflow_port}"

    @property
    def state_stores_url(self) -> str:
        """The State stores page inside the Airflow UI (the plugin's nav entry)."""
        return f"{self.ui_url}/plugin/{STATE_STORES_ROUTE}"

    def pid_file(self, service: str) -> Path:
        """The PID file of ``service``."""
        return self.run_dir / f"{service}.json"

    def log_file(self, service: str) -> Path:
        """The log of ``service``."""
        return self.logs_dir / f"{service}.log"

    # -- persistence -----------------------------------------------------------------------

    def save(self) -> None:
        """Record the ports and folders, so `status` and `down` need no flags."""
        data = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        replace_text(self.root / CONFIG_FILE, json.dumps(data, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, root: Path | str = DEFAULT_ROOT, **overrides: object) -> PlatformConfig:
        """The config recorded under ``root`` (defaults where none is), with ``overrides``
        (None values ignored) applied."""
        path = Path(root) / CONFIG_FILE
        data: dict[str, object] = {}
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except ValueError as exc:
                raise ConfigError(f"{path} is unreadable ({exc}); delete it") from exc
        data.update({k: v for k, v in overrides.items() if v is not None})
        data["root"] = Path(root)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)  # type: ignore[arg-type]
