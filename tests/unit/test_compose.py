"""docker-compose.yml cannot run here (no Docker engine): check what can be checked without it.

It parses; the services docs/compose.md names exist (and every service is documented); every
STATEKEEPER_* variable is a settings field with a valid value; every AIRFLOW__SECTION__KEY is
an option of the installed Airflow and every AIRFLOW_CONN_* is connection JSON; the
Dockerfiles and bind-mounted folders exist; published ports bind 127.0.0.1 and differ. The
embedded platform's environment (``make up``) passes the same variable checks. The
triggerer and the api-server see what the supervisor launched in the scheduler container
(its pids, its loopback, the state dir the Spark worker writes) and the executors can reach
the driver (:func:`pod_problems`). A bad compose file is caught.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from statekeeper.settings import StatekeeperSettings, load_settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCS = REPO / "docs" / "compose.md"
# STATEKEEPER_* variables that are not settings fields, and the module that reads each.
NOT_SETTINGS = {
    "STATEKEEPER_SPECS_DIR": REPO / "include/statekeeper/app/spec_discovery.py",
    "STATEKEEPER_PLATFORM": REPO / "include/statekeeper/platform/processes.py",
}
AIRFLOW_VAR = re.compile(r"^AIRFLOW__([A-Z0-9_]+)__([A-Z0-9_]+)$")
DEFAULTED = re.compile(r"\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}")


@functools.cache
def _airflow_options() -> dict[str, set[str]]:
    """{section: options} from the installed Airflow's config.yml (read, not imported)."""
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "config_templates" / "config.yml"
    sections = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {name: set((body or {}).get("options") or {}) for name, body in sections.items()}


def _resolved(value: Any) -> str:
    """A compose value with ``${VAR:-default}`` replaced by its default."""
    return DEFAULTED.sub(lambda m: m.group(2) or "", str(value))


def env_problems(env: dict[str, Any], where: str, options: dict[str, set[str]]) -> list[str]:
    """What is wrong with the STATEKEEPER_*, AIRFLOW__* and AIRFLOW_CONN_* vars of ``env``."""
    problems = []
    fields = StatekeeperSettings.model_fields
    settings: dict[str, str] = {}
    for name, raw in env.items():
        value = _resolved(raw)
        if name.startswith("STATEKEEPER_"):
            field = name.removeprefix("STATEKEEPER_").lower()
            if name in NOT_SETTINGS:
                if name not in NOT_SETTINGS[name].read_text():
                    problems.append(f"{where}: {name} is read nowhere")
            elif field not in fields:
                problems.append(f"{where}: {name} is not a statekeeper setting")
            else:
                settings[field] = value
        elif name.startswith("AIRFLOW__"):
            match = AIRFLOW_VAR.match(name)
            if match is None:
                problems.append(f"{where}: {name} is not AIRFLOW__SECTION__KEY")
                continue
            section, key = match.group(1).lower(), match.group(2).lower()
            if key not in options.get(section, set()):
                problems.append(f"{where}: {name}: Airflow has no option [{section}] {key}")
        elif name.startswith("AIRFLOW_CONN_"):
            try:
                conn = json.loads(value)
            except ValueError:
                problems.append(f"{where}: {name} is not JSON")
                continue
            if not isinstance(conn, dict) or not conn.get("conn_type"):
                problems.append(f"{where}: {name} has no conn_type")
            elif conn["conn_type"] == "spark":
                binary = (conn.get("extra") or {}).get("spark-binary", "spark-submit")
                if binary not in ("spark-submit", "spark2-submit", "spark3-submit"):
                    problems.append(f"{where}: {name}: the Spark provider refuses {binary!r}")
    if settings:
        try:
            load_settings(**settings)
        except Exception as exc:  # noqa: BLE001 - the message is the finding
            problems.append(f"{where}: invalid settings: {exc}")
    return problems


def compose_problems(doc: dict[str, Any], repo: Path, documented: set[str]) -> list[str]:
    """Everything wrong with a parsed compose file."""
    problems = []
    services: dict[str, Any] = doc.get("services") or {}
    options = _airflow_options()
    for name in sorted(documented - set(services)):
        problems.append(f"docs name service {name!r}, compose has none")
    for name in sorted(set(services) - documented):
        problems.append(f"service {name!r} is not documented")
    published: dict[int, str] = {}
    for name, service in services.items():
        env = service.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        problems += env_problems(env, name, options)
        build = service.get("build")
        if isinstance(build, dict):
            dockerfile = repo / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
            if "dockerfile_inline" not in build and not dockerfile.is_file():
                problems.append(f"{name}: Dockerfile {dockerfile} does not exist")
        if "image" not in service and "build" not in service:
            problems.append(f"{name}: neither image nor build")
        for dep in service.get("depends_on") or {}:
            if dep not in services:
                problems.append(f"{name}: depends on unknown service {dep!r}")
        for volume in service.get("volumes") or []:
            source = str(volume).split(":", 1)[0]
            if source.startswith(".") and not (repo / source).exists():
                problems.append(f"{name}: bind mount {source} does not exist")
        if str(service.get("network_mode", "")).startswith("service:"):
            # Docker refuses both in a container that joins another's network namespace.
            for key in ("ports", "hostname"):
                if service.get(key):
                    problems.append(f"{name}: {key} with network_mode {service['network_mode']}")
        for port in service.get("ports") or []:
            parts = str(port).split(":")
            if len(parts) != 3 or parts[0] != "127.0.0.1":
                problems.append(f"{name}: port {port!r} is not bound to 127.0.0.1")
                continue
            host = int(parts[1])
            if host in published:
                problems.append(f"{name}: host port {host} already published by {published[host]}")
            published[host] = name
    return problems


def _service_running(services: dict[str, Any], component: str) -> str | None:
    """The service whose command is ``airflow <component>`` (or ``spark-class ...<component>``)."""
    for name, service in services.items():
        command = [str(c) for c in service.get("command") or []]
        if command[:2] == ["airflow", component] or (
            command[:1] == ["spark-class"] and command[1:2] and command[1].endswith(component)
        ):
            return name
    return None


def _env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: _resolved(v) for k, v in env.items()}


def _volume_holding(service: dict[str, Any], path: str) -> str | None:
    """The source of the mount that holds ``path`` in the service's container (longest
    mount point that is a prefix of it), or None: the container's own disk."""
    best: tuple[int, str] | None = None
    for volume in service.get("volumes") or []:
        source, _, rest = str(volume).partition(":")
        target = rest.split(":", 1)[0].rstrip("/")
        inside = path == target or path.startswith(target + "/")
        if inside and (best is None or len(target) > best[0]):
            best = (len(target), source)
    return None if best is None else best[1]


def _java_props(opts: str) -> dict[str, str]:
    """``-Dkey=value`` pairs of a JVM options string (SPARK_SUBMIT_OPTS)."""
    return dict(o[2:].split("=", 1) for o in opts.split() if o.startswith("-D") and "=" in o)


LOOPBACK = re.compile(r"^(127\.|localhost$|::1$)")


def pod_problems(doc: dict[str, Any]) -> list[str]:
    """What keeps the supervision from seeing the apps it launched, the State stores page
    from their status endpoints, or the executors from the driver and the state dir.

    The supervisor's spark-submit runs detached in the scheduler container (LocalExecutor,
    client mode); the health trigger checks its pid in /proc and the app's status endpoint
    on 127.0.0.1; the executors on the Spark worker write the tasks' state under
    STATEKEEPER_STATE_DIR, which the driver (restore progress), the operators and the page
    read.
    """
    services: dict[str, Any] = doc.get("services") or {}
    problems: list[str] = []
    scheduler = _service_running(services, "scheduler")
    if scheduler is None:
        return ["no service runs `airflow scheduler`"]
    joiners = {"triggerer": ("network", "pid"), "api-server": ("network",)}
    readers = [scheduler]
    for component, shares in joiners.items():
        name = _service_running(services, component)
        if name is None:
            problems.append(f"no service runs `airflow {component}`")
            continue
        readers.append(name)
        if name == scheduler:
            continue  # one container: it sees everything the scheduler sees
        service = services[name]
        if "network" in shares and service.get("network_mode") != f"service:{scheduler}":
            problems.append(
                f"{name} cannot reach the apps' status endpoints on the scheduler's loopback "
                f"(network_mode {service.get('network_mode')!r}, not 'service:{scheduler}')"
            )
        if "pid" in shares and service.get("pid") != f"service:{scheduler}":
            problems.append(
                f"{name} cannot see the scheduler's processes (the launched spark-submit) "
                f"(pid {service.get('pid')!r}, not 'service:{scheduler}')"
            )
    worker = _service_running(services, "Worker")
    if worker is not None:
        readers.append(worker)
    state_dirs = {n: _env_of(services[n]).get("STATEKEEPER_STATE_DIR") for n in readers}
    if len(set(state_dirs.values())) != 1:
        problems.append(f"STATEKEEPER_STATE_DIR differs between services: {state_dirs}")
    sources = {}
    for name, state_dir in state_dirs.items():
        if not state_dir or not state_dir.startswith("/"):
            problems.append(f"{name}: state dir {state_dir!r} is not an absolute path")
            continue
        sources[name] = _volume_holding(services[name], state_dir)
        if sources[name] is None:
            problems.append(f"{name}: state dir {state_dir} is on the container's own disk")
    if len({s for s in sources.values() if s}) > 1:
        problems.append(f"the state dir is on different volumes: {sources}")
    conn = json.loads(_env_of(services[scheduler]).get("AIRFLOW_CONN_SPARK_DEFAULT") or "{}")
    if str(conn.get("host", "")).startswith("spark://"):  # a cluster: executors call back
        env = _env_of(services[scheduler])
        props = _java_props(env.get("SPARK_SUBMIT_OPTS", ""))
        host = props.get("spark.driver.host")
        expected = services[scheduler].get("hostname") or scheduler
        if host != expected:
            problems.append(
                f"{scheduler}: the Spark driver advertises {host!r} (SPARK_SUBMIT_OPTS "
                f"-Dspark.driver.host), not {expected!r}: executors cannot reach it"
            )
        bind = props.get("spark.driver.bindAddress", host or "")
        if LOOPBACK.match(bind) or LOOPBACK.match(env.get("SPARK_LOCAL_IP", "0")):
            problems.append(f"{scheduler}: the Spark driver binds loopback ({bind!r})")
    return problems


def _documented(text: str) -> set[str]:
    """Service names in the first column of the docs' services table."""
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.MULTILINE))


def test_compose_file_matches_docs_settings_and_airflow():
    doc = yaml.safe_load(COMPOSE.read_text())
    documented = _documented(DOCS.read_text())
    assert {"kafka", "s3", "spark-master", "spark-worker", "postgres"} <= documented
    assert {n for n in documented if n.startswith("airflow-")} >= {
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    }
    assert compose_problems(doc, REPO, documented) == []


def test_dockerfile_installs_the_lock_and_copies_what_exists():
    doc = yaml.safe_load(COMPOSE.read_text())
    dockerfiles = {
        REPO / s["build"]["context"] / s["build"]["dockerfile"]
        for s in doc["services"].values()
        if isinstance(s.get("build"), dict)
    }
    assert dockerfiles == {REPO / "docker" / "statekeeper.Dockerfile"}
    text = next(iter(dockerfiles)).read_text()
    assert "-r requirements.lock" in text
    for line in text.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), line
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and "var" in ignored  # the build context stays small


def test_platform_environment_passes_the_same_checks(tmp_path):
    from statekeeper.platform import PlatformConfig
    from statekeeper.platform.airflow_env import platform_env

    env = platform_env(PlatformConfig(root=tmp_path), base={"PATH": "/usr/bin"})
    assert env_problems(env, "make up", _airflow_options()) == []


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"env": {"STATEKEEPER_NO_SUCH_SETTING": "1"}}, "is not a statekeeper setting"),
        ({"env": {"STATEKEEPER_BROKER_FLAVOR": "redpanda"}}, "invalid settings"),
        ({"env": {"AIRFLOW__CORE__NO_SUCH_OPTION": "1"}}, "Airflow has no option [core]"),
        ({"env": {"AIRFLOW__COREDAGS_FOLDER": "/x"}}, "is not AIRFLOW__SECTION__KEY"),
        ({"env": {"AIRFLOW_CONN_SPARK_DEFAULT": "{not json"}}, "is not JSON"),
        ({"ports": ["8080:8080"]}, "is not bound to 127.0.0.1"),
        ({"ports": ["127.0.0.1:9092:9092"]}, "already published by kafka"),
        ({"build": {"context": ".", "dockerfile": "docker/missing.Dockerfile"}}, "does not exist"),
        ({"depends_on": {"zookeeper": {}}}, "unknown service 'zookeeper'"),
        ({"volumes": ["./no-such-folder:/x"]}, "bind mount ./no-such-folder"),
        ({"ports": ["127.0.0.1:8090:8080"]}, "ports with network_mode service:airflow-scheduler"),
        ({"service": "extra"}, "service 'extra' is not documented"),
        ({"drop": "s3"}, "docs name service 's3'"),
    ],
)
def test_a_bad_compose_file_is_caught(patch, expected):
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    if "drop" in patch:
        del services[patch["drop"]]
    elif "service" in patch:
        services[patch["service"]] = {"image": "busybox"}
    else:
        target = services["airflow-apiserver"]
        if "env" in patch:
            target["environment"] = {**target["environment"], **patch["env"]}
        for key in ("ports", "build", "depends_on", "volumes"):
            if key in patch:
                target[key] = patch[key]
    problems = compose_problems(doc, REPO, _documented(DOCS.read_text()))
    assert any(expected in p for p in problems), problems


def test_triggerer_and_page_see_the_launched_apps_and_executors_the_driver():
    assert pod_problems(yaml.safe_load(COMPOSE.read_text())) == []


def _without(service: dict[str, Any], key: str, value: Any = None) -> None:
    if value is None:
        service.pop(key, None)
    else:
        service[key] = value


@pytest.mark.parametrize(
    ("service", "key", "value", "expected"),
    [
        ("airflow-triggerer", "pid", None, "cannot see the scheduler's processes"),
        ("airflow-triggerer", "network_mode", None, "airflow-triggerer cannot reach"),
        ("airflow-apiserver", "network_mode", "bridge", "airflow-apiserver cannot reach"),
        ("airflow-triggerer", "volumes", ["./dags:/opt/statekeeper/dags"], "own disk"),
        ("spark-worker", "volumes", ["spark-scratch:/var/lib/statekeeper"], "different volumes"),
        ("airflow-scheduler", "environment", "no SPARK_SUBMIT_OPTS", "advertises"),
    ],
)
def test_a_pod_that_cannot_see_its_apps_is_caught(service, key, value, expected):
    doc = yaml.safe_load(COMPOSE.read_text())
    target = doc["services"][service]
    if key == "environment":  # the scheduler's env without SPARK_SUBMIT_OPTS
        target["environment"] = {
            k: v for k, v in target["environment"].items() if k != "SPARK_SUBMIT_OPTS"
        }
    else:
        _without(target, key, value)
    problems = pod_problems(doc)
    assert any(expected in p for p in problems), problems


def test_the_old_separate_triggerer_is_caught():
    """Before the pod: the triggerer and the api-server in their own namespaces, the driver
    on the hook's default loopback."""
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    for name in ("airflow-triggerer", "airflow-apiserver"):
        services[name].pop("network_mode")
        services[name].pop("pid", None)
    services["airflow-scheduler"]["environment"].pop("SPARK_SUBMIT_OPTS")
    problems = pod_problems(doc)
    assert len(problems) == 4, problems
