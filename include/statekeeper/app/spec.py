"""App specs: the YAML/TOML file a stateful app is launched with.

```yaml
application_id: word-count
topology: topology.py:build_topology       # "file.py:function" (relative to the spec) or
                                           # "package.module:function" -> Topology
params: {input_topic: lines}               # keyword arguments of that function
settings: {max_records_per_batch: 100000}  # StatekeeperSettings fields
spark: {conf: {spark.sql.shuffle.partitions: "4"}}
enabled: true                              # false: the statekeeper_apps DAG keeps it stopped
supervision: {stall_timeout_s: 300}        # its health thresholds (SupervisionConfig fields)
```
Precedence: defaults < spec file < ``STATEKEEPER_*`` environment variables.

A topology file is imported from its path and registered with Spark's cloudpickle to be
pickled by value: the executors get its functions without being able to import the file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statekeeper.errors import ConfigError
from statekeeper.settings import StatekeeperSettings, load_settings


class SparkSpec(BaseModel):
    """Spark session options for the app (spark-submit flags win over these)."""

    model_config = ConfigDict(extra="forbid")

    conf: dict[str, str] = Field(default_factory=dict)


class AppSpec(BaseModel):
    """What to run: the topology factory, its parameters, settings and Spark options."""

    model_config = ConfigDict(extra="forbid")

    application_id: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    topology: str = Field(pattern=r"^([A-Za-z_][\w.]*|[^:]+\.py):[A-Za-z_]\w*$")
    params: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    #: Desired state for the supervising DAG (statekeeper_apps): run it, or keep it stopped.
    enabled: bool = True
    #: Supervision thresholds of this app (statekeeper.airflow.supervision.SupervisionConfig
    #: fields), validated by the supervisor.
    supervision: dict[str, Any] = Field(default_factory=dict)

    def resolved_settings(self, **overrides: Any) -> StatekeeperSettings:
        """Settings = defaults < spec < env < ``overrides`` (e.g. CLI flags)."""
        from_spec = {
            key: value
            for key, value in self.settings.items()
            if f"STATEKEEPER_{key.upper()}" not in os.environ
        }
        from_spec.setdefault("application_id", self.application_id)
        return load_settings(**{**from_spec, **overrides})

    def build_topology(self) -> Any:
        """Import ``module:function`` and call it with ``params``; returns the Topology."""
        module_name, _, func_name = self.topology.rpartition(":")
        try:
            if module_name.endswith(".py"):
                module = _import_topology_file(Path(module_name))
            else:
                module = importlib.import_module(module_name)
        except (ImportError, OSError) as exc:
            raise ConfigError(f"app spec topology {self.topology!r}: cannot import: {exc}") from exc
        factory = getattr(module, func_name, None)
        if not callable(factory):
            raise ConfigError(f"app spec topology {self.topology!r}: no function {func_name!r}")
        try:
            return factory(**self.params)
        except TypeError as exc:
            raise ConfigError(
                f"app spec topology {self.topology!r} rejected params {self.params}: {exc}"
            ) from exc


def load_app_spec(path: str | Path) -> AppSpec:
    """Read and validate a ``.yaml``/``.yml`` or ``.toml`` app spec."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read app spec {path}: {exc}") from exc
    try:
        if path.suffix == ".toml":
            raw = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            raw = yaml.safe_load(text)
        else:
            raise ConfigError(f"app spec {path}: use a .yaml, .yml or .toml file")
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"app spec {path} is not valid {path.suffix[1:]}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"app spec {path}: expected a mapping at the top level")
    raw["topology"] = _relative_to(path, raw.get("topology"))
    try:
        spec = AppSpec(**raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"app spec {path}: {problems}") from exc
    # Validate the settings now, so a typo fails before Spark starts.
    spec.resolved_settings()
    return spec


def _relative_to(spec_path: Path, topology: Any) -> Any:
    """A ``file.py:function`` topology with its file made absolute, from the spec's folder.

    Done at load time, so a spec dumped elsewhere (``model_dump``) still names the file.
    """
    if not isinstance(topology, str) or ":" not in topology:
        return topology
    file, _, func = topology.rpartition(":")
    if not file.endswith(".py"):
        return topology
    return f"{(spec_path.parent / file).resolve()}:{func}"


def _import_topology_file(path: Path) -> ModuleType:
    """Import a topology file once per path and have Spark pickle its code by value.

    cloudpickle pickles functions by reference when their module is importable in the
    driver; the executors could not import a file that is not on their path.
    """
    path = path.resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"statekeeper_topology_{path.stem}_{digest}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ImportError(f"not a Python file: {path}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # cloudpickle registers only modules found here
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    try:
        from pyspark import cloudpickle
    except ImportError:  # no Spark in this process: nothing pickles the topology
        return module
    cloudpickle.register_pickle_by_value(module)
    return module
