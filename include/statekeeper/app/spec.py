"""App specs: the YAML/TOML file a stateful app is launched with.

```yaml
application_id: word-count
topology: statekeeper.apps.word_count:build_topology   # "module:function" -> Topology
params: {input_topic: lines}                            # keyword arguments of that function
settings: {max_records_per_batch: 100000}              # StatekeeperSettings fields
spark: {conf: {spark.sql.shuffle.partitions: "4"}}
```
Precedence: defaults < spec file < ``STATEKEEPER_*`` environment variables.
"""

from __future__ import annotations

import importlib
import os
import tomllib
from pathlib import Path
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
    topology: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    params: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    spark: SparkSpec = Field(default_factory=SparkSpec)

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
        module_name, _, func_name = self.topology.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
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
