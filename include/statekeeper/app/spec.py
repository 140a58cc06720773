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
generator: generator.py:main               # optional: main(argv) -> exit code, for
                                           # `statekeeper generate --app`
drill_model: drill_model.py:spark_models   # optional: spark_models(params), for `drill --spark`
```
Precedence: defaults < spec file < ``STATEKEEPER_*`` environment variables < overrides
(``--set``). The whole spec is validated at load; a problem names the field and the line.
``statekeeper spec schema`` prints its JSON Schema.

A topology file is imported from its path and registered with Spark's cloudpickle to be
pickled by value: the executors get its functions without being able to import the file.
The app's other files (``generator:``, ``drill_model:``) run in the driver or the command
only: each is imported from its path as a module of its folder, which is registered as a
package under a name of its own (:func:`import_app_file`), so it imports its siblings with
relative imports (``from .reference import recompute``) and nothing is added to ``sys.path``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import tomllib
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
)

from statekeeper.app.supervision_config import SupervisionConfig
from statekeeper.errors import ConfigError
from statekeeper.settings import SourceOf, StatekeeperSettings, describe_error, settings_from

#: The folder of app specs the DAGs act on and ``--app APP_ID`` looks in.
SPECS_DIR_ENV = "STATEKEEPER_SPECS_DIR"
#: The repo's shipped apps (for a checkout or an editable install).
DEFAULT_SPECS_DIR = Path(__file__).resolve().parents[3] / "spark_apps"
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")
#: What ``topology:``, ``generator:`` and ``drill_model:`` hold: "file.py:function" (relative
#: to the spec) or "package.module:function".
FUNCTION_REF = r"^([A-Za-z_][\w.]*|[^:]+\.py):[A-Za-z_]\w*$"
#: The spec's fields naming a function of the app besides its topology (optional).
APP_FUNCTIONS = ("generator", "drill_model")


def _spark_value(value: Any) -> Any:
    """A Spark conf value as the string Spark expects: ``true``/``false`` for booleans,
    numbers as written; anything else is left for the str check to reject."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


SparkConfValue = Annotated[
    str,
    BeforeValidator(_spark_value),
    WithJsonSchema({"type": ["string", "integer", "number", "boolean"]}),
]


def _supervision_schema() -> dict[str, Any]:
    schema = SupervisionConfig.model_json_schema()
    return {
        "type": "object",
        "description": "Supervision thresholds of this app (all optional; the defaults apply)",
        "properties": {
            name: {k: v for k, v in prop.items() if k != "title"}
            for name, prop in schema["properties"].items()
        },
        "additionalProperties": False,
    }


class SparkSpec(BaseModel):
    """Spark session options for the app (spark-submit flags win over these)."""

    model_config = ConfigDict(extra="forbid")

    conf: dict[str, SparkConfValue] = Field(
        default_factory=dict,
        description="Spark conf (spark.* keys); numbers and booleans are passed as strings",
    )


class SpecSource:
    """Where an app spec came from: its file and the line of each key (for messages)."""

    def __init__(self, path: Path, lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def where(self, *key: str) -> str:
        """``at <file>:<line>`` of ``key`` (or of its nearest enclosing key), else
        ``in <file>``."""
        for end in range(len(key), 0, -1):
            line = self.lines.get(tuple(key[:end]))
            if line is not None:
                return f"at {self.path}:{line}"
        return f"in {self.path}"


class AppSpec(BaseModel):
    """What to run: the topology factory, its parameters, settings and Spark options."""

    model_config = ConfigDict(extra="forbid")

    application_id: str = Field(
        pattern=r"^[A-Za-z0-9._-]+$", description="The app's id (topic and state names)"
    )
    topology: str = Field(
        pattern=FUNCTION_REF,
        description='"file.py:function" (relative to the spec) or "package.module:function", '
        "returning the Topology",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the topology function"
    )
    settings: Annotated[
        dict[str, Any],
        WithJsonSchema(
            {
                "type": "object",
                "description": "StatekeeperSettings fields (STATEKEEPER_* env vars win)",
                "properties": {
                    name: {k: v for k, v in prop.items() if k != "title"}
                    for name, prop in StatekeeperSettings.model_json_schema()["properties"].items()
                    if name != "application_id"
                },
                "additionalProperties": False,
            }
        ),
    ] = Field(default_factory=dict)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    #: Desired state for the supervising DAG (statekeeper_apps): run it, or keep it stopped.
    enabled: bool = Field(True, description="false: the statekeeper_apps DAG keeps the app stopped")
    #: Supervision thresholds of this app (SupervisionConfig fields), validated at load.
    supervision: Annotated[dict[str, Any], WithJsonSchema(_supervision_schema())] = Field(
        default_factory=dict
    )
    generator: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description='"file.py:function" (relative to the spec) or "package.module:function": '
        "the app's input generator, main(argv) -> exit code, which `statekeeper generate "
        "--app` runs with its options",
    )
    drill_model: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description='"file.py:function" (relative to the spec) or "package.module:function": '
        "spark_models(params) -> the PySpark recomputations `statekeeper drill --spark` "
        "compares the restored stores with",
    )

    _source: SpecSource | None = PrivateAttr(default=None)

    @property
    def spec_path(self) -> Path | None:
        """The file the spec was loaded from (None for a spec built in code)."""
        return self._source.path if self._source is not None else None

    def where(self, *key: str) -> str:
        """Where ``key`` is set in the spec file (``at file:line``), or ``""``."""
        return self._source.where(*key) if self._source is not None else ""

    def resolved_settings(self, **overrides: Any) -> StatekeeperSettings:
        """Settings = defaults < spec < env < ``overrides`` (e.g. CLI flags)."""
        return self.settings_with(overrides)

    def settings_with(
        self, overrides: Mapping[str, Any], override_source: SourceOf | None = None
    ) -> StatekeeperSettings:
        """Settings = defaults < spec < env < ``overrides``; a bad value names its source: the
        spec's line, the environment variable, or ``override_source(field)`` (e.g. ``--set``)."""
        from_spec = {
            key: value
            for key, value in self.settings.items()
            if f"STATEKEEPER_{key.upper()}" not in os.environ
        }
        from_spec.setdefault("application_id", self.application_id)
        values = {**from_spec, **overrides}

        def source_of(field: str) -> tuple[str, str] | None:
            if field in overrides:
                given = override_source(field) if override_source is not None else None
                return given or (field, "(an override)")
            if field in self.settings:
                return f"settings.{field}", self.where("settings", field)
            if field == "application_id":
                return "application_id", self.where("application_id")
            return None

        return settings_from(values, source_of)

    def _named(self, field: str) -> str:
        """``<field> '<value>' (at file:line)``, for messages."""
        where = self.where(field)
        return f"{field} {getattr(self, field)!r}" + (f" ({where})" if where else "")

    def _function(self, field: str, import_file: Callable[[Path], ModuleType]) -> Any:
        """The function ``field`` names, its file imported with ``import_file``."""
        module_name, _, func_name = str(getattr(self, field)).rpartition(":")
        named = self._named(field)
        try:
            if module_name.endswith(".py"):
                module = import_file(Path(module_name))
            else:
                module = importlib.import_module(module_name)
        except SyntaxError as exc:
            raise ConfigError(
                f"{named}: syntax error at {exc.filename}:{exc.lineno}: {exc.msg}"
            ) from exc
        except (ImportError, OSError) as exc:
            raise ConfigError(f"app spec {named}: cannot import: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the module's own code failed at import
            raise ConfigError(f"{named}: importing it raised {_raised(exc)}") from exc
        function = getattr(module, func_name, None)
        if not callable(function):
            raise ConfigError(f"app spec {named}: no function {func_name!r}")
        return function

    def app_function(self, field: str) -> Any:
        """The function the spec's ``generator:`` or ``drill_model:`` names, imported (a file:
        by :func:`import_app_file`, as a module of its folder; sys.path is left alone). A spec
        that names none raises one ConfigError saying so."""
        if field not in APP_FUNCTIONS:
            raise ValueError(f"not one of {APP_FUNCTIONS}: {field!r}")
        if getattr(self, field) is None:
            spec = f" ({self.spec_path})" if self.spec_path is not None else ""
            raise ConfigError(f"app {self.application_id!r} names no {field}: in its spec{spec}")
        return self._function(field, import_app_file)

    def build_topology(self) -> Any:
        """Import ``module:function`` and call it with ``params``; returns the Topology."""
        func_name = self.topology.rpartition(":")[2]
        named = self._named("topology")
        factory = self._function("topology", _import_topology_file)
        try:
            built = factory(**self.params)
        except ConfigError:
            raise
        except TypeError as exc:
            raise ConfigError(f"app spec {named} rejected params {self.params}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the factory's own code failed
            raise ConfigError(f"{named}: {func_name}() raised {_raised(exc)}") from exc
        if built is None:
            raise ConfigError(
                f"{named}: {func_name}() returned None, not a Topology (a missing `return`?)"
            )
        return built


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of an app spec file (``statekeeper spec schema``), for editors."""
    schema = AppSpec.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "statekeeper app spec",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _raised(exc: BaseException) -> str:
    """``Type: message at file:line`` of the innermost frame an exception came from."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{at}"


def load_app_spec(path: str | Path) -> AppSpec:
    """Read and validate a ``.yaml``/``.yml`` or ``.toml`` app spec: every field, the
    ``supervision:`` thresholds and the settings. A problem raises one ConfigError naming the
    field, the file and line, and the close names of an unknown field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read app spec {path}: {exc.strerror or exc}") from exc
    if path.suffix not in SPEC_SUFFIXES:
        raise ConfigError(f"app spec {path}: use a .yaml, .yml or .toml file")
    try:
        if path.suffix == ".toml":
            raw, lines = tomllib.loads(text), _toml_lines(text)
        else:
            raw, lines = yaml.safe_load(text), _yaml_lines(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at {path}:{mark.line + 1}" if mark is not None else f" in {path}"
        raise ConfigError(f"app spec {path} is not valid yaml: {exc.problem}{at}") from exc
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"app spec {path} is not valid {path.suffix[1:]}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"app spec {path}: expected a mapping at the top level")
    source = SpecSource(path, lines)
    raw["topology"] = _relative_to(path, raw.get("topology"))
    for field in APP_FUNCTIONS:
        if field in raw:
            raw[field] = _relative_to(path, raw[field])
    try:
        spec = AppSpec(**raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid app spec: {_spec_problems(exc, source, raw)}") from exc
    spec._source = source
    problems = _function_file_problems(spec, source) + _supervision_problems(
        spec.supervision, source
    )
    try:  # the settings too, so a typo fails before Spark starts
        spec.resolved_settings()
    except ConfigError as exc:
        if not problems:
            raise
        problems.append(str(exc))
    if problems:
        raise ConfigError(f"invalid app spec: {'; '.join(problems)}")
    return spec


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    """The field names a model has at ``loc`` (for the close names of an unknown field)."""
    if loc[:1] == ("spark",) and len(loc) <= 2:
        return list(SparkSpec.model_fields)
    if len(loc) <= 1:
        return list(AppSpec.model_fields)
    return []


def _spec_problems(exc: ValidationError, source: SpecSource, raw: Mapping[str, Any]) -> str:
    problems = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        name = ".".join(loc) or "spec"
        if err["type"] == "string_pattern_mismatch" and loc in (
            ("topology",),
            *((field,) for field in APP_FUNCTIONS),
        ):
            err = {**err, "msg": 'expected "file.py:function" or "package.module:function"'}
        problems.append(describe_error(err, name, source.where(*loc), _known_fields(loc)))
    return "; ".join(problems)


def _function_file_problems(spec: AppSpec, source: SpecSource) -> list[str]:
    """The ``generator:`` and ``drill_model:`` files: each exists, parses and defines its
    function at the top level (read, not run: their code runs when a command needs it)."""
    problems = []
    for field in APP_FUNCTIONS:
        ref = getattr(spec, field)
        file, _, func = str(ref).rpartition(":")
        if ref is None or not file.endswith(".py"):
            continue
        where = source.where(field)
        path = Path(file)
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except FileNotFoundError:
            problems.append(f"{field}: no file {path} {where}")
            continue
        except OSError as exc:
            problems.append(f"{field}: cannot read {path}: {exc.strerror or exc} {where}")
            continue
        except SyntaxError as exc:
            problems.append(f"{field}: syntax error at {path}:{exc.lineno}: {exc.msg} {where}")
            continue
        if func not in _top_level_names(tree.body):
            problems.append(f"{field}: {path} defines no function {func!r} {where}")
    return problems


def _top_level_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's top level binds: functions, classes, assignments, imports (also
    under ``if``/``try``/``with``)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody"):
                names |= _top_level_names(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                names |= _top_level_names(handler.body)
    return names


def _supervision_problems(supervision: Mapping[str, Any], source: SpecSource) -> list[str]:
    """The spec's ``supervision:`` thresholds: known fields, valid values, consistent."""
    known = SupervisionConfig.model_fields
    problems = [
        describe_error(
            {"type": "extra_forbidden"},
            f"supervision.{key}",
            source.where("supervision", key),
            known,
        )
        for key in supervision
        if key not in known
    ]
    if not problems:
        try:
            SupervisionConfig(**supervision)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ("supervision", *(str(p) for p in err["loc"]))
                problems.append(describe_error(err, ".".join(loc), source.where(*loc)))
    return problems


def _yaml_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of every mapping key and sequence item of a YAML document."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                at = (*path, str(key.value))
                lines[at] = key.start_mark.line + 1
                walk(value, at)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                at = (*path, str(i))
                lines[at] = item.start_mark.line + 1
                walk(item, at)

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return lines


_TOML_TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_TOML_BARE = r"""(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)"""
_TOML_KEY = re.compile(rf"^\s*({_TOML_BARE}(?:\s*\.\s*{_TOML_BARE})*)\s*=")
_TOML_PART = re.compile(r""""([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+)""")


def _toml_parts(dotted: str) -> tuple[str, ...]:
    return tuple(next(g for g in m.groups() if g is not None) for m in _TOML_PART.finditer(dotted))


def _toml_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of every table and key of a TOML document (tomllib keeps none):
    ``[a.b]`` headers and ``key = value`` lines; keys of inline tables and multi-line
    values map to their enclosing key."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = _TOML_TABLE.match(line)
        if header:
            table = _toml_parts(header[1])
            lines.setdefault(table, number)
            continue
        key = _TOML_KEY.match(line)
        if key:
            lines.setdefault((*table, *_toml_parts(key[1])), number)
    return lines


def specs_dir() -> Path:
    """The folder of app specs: ``$STATEKEEPER_SPECS_DIR``, else the repo's spark_apps/."""
    return Path(os.environ.get(SPECS_DIR_ENV) or DEFAULT_SPECS_DIR)


def spec_files(folder: Path) -> Iterator[Path]:
    """The spec files one level below ``folder`` (``<folder>/*/*.yaml|yml|toml``), sorted."""
    yield from sorted(p for p in folder.glob("*/*") if p.suffix in SPEC_SUFFIXES)


def peek_field(path: Path, field: str) -> str | None:
    """The string a spec file gives the top-level ``field``, without validating the rest
    (None when it gives none, or the file cannot be read or parsed)."""
    try:
        text = path.read_text()
        raw = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    value = raw.get(field) if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None


def peek_application_id(path: Path) -> str | None:
    """The ``application_id`` a spec file declares, without validating the rest (None when
    the file cannot be read or parsed)."""
    return peek_field(path, "application_id")


def find_spec(app: str, folder: Path | None = None) -> Path | None:
    """The spec file of ``app``: a spec path (an existing file, or a name ending in .yaml,
    .yml or .toml), else the spec in ``folder`` (default :func:`specs_dir`) whose
    ``application_id`` is ``app``; None when there is none."""
    candidate = Path(app)
    if candidate.is_file() or candidate.suffix in SPEC_SUFFIXES:
        return candidate
    folder = folder or specs_dir()
    if not folder.is_dir():
        return None
    for path in spec_files(folder):
        if peek_application_id(path) == app:
            return path
    return None


def _relative_to(spec_path: Path, topology: Any) -> Any:
    """A ``file.py:function`` (topology, generator, drill_model) with its file made absolute,
    from the spec's folder.

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


def import_app_file(path: Path) -> ModuleType:
    """Import an app's file as a module of its folder, without touching ``sys.path``.

    The folder is registered as a package under a name of its own
    (``statekeeper_app_<folder>_<digest of its path>``; its ``__init__.py`` runs when it has
    one) and the file is imported as its submodule, so the file imports its siblings with
    relative imports (``from .reference_spark import frames``). Each file is imported once per
    process.
    """
    path = path.resolve()
    folder = path.parent
    if not path.stem.isidentifier():
        raise ImportError(f"{path}: its name is not a Python module name")
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:10]
    tag = re.sub(r"\W", "_", folder.name)
    package = f"statekeeper_app_{tag}_{digest}"
    if package not in sys.modules:
        init = folder / "__init__.py"
        if init.is_file():
            loader_spec = importlib.util.spec_from_file_location(
                package, init, submodule_search_locations=[str(folder)]
            )
        else:
            loader_spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            loader_spec.submodule_search_locations = [str(folder)]
        if loader_spec is None:
            raise ImportError(f"cannot import the folder {folder} as a package")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[package] = module
        try:
            if loader_spec.loader is not None:
                loader_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[package]
            raise
    if path.stem == "__init__":
        return sys.modules[package]
    if not path.is_file():
        raise ImportError(f"no file {path}")
    return importlib.import_module(f"{package}.{path.stem}")
