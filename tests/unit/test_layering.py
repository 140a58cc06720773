"""The library's layering, checked by walking every import in include/statekeeper.

The lower floors (stores, kafka, changelog, state, processing) run in a plain Python
process: they import neither pyspark, airflow nor great_expectations, nor any package above
them. Imports inside functions and under ``TYPE_CHECKING`` count too: a deferred import is
still a dependency. A new package under include/statekeeper must be added to ``ALLOWED``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "include" / "statekeeper"

FLOORS = ("stores", "kafka", "changelog", "state", "processing", "snapshots")
HEAVY = ("pyspark", "airflow", "great_expectations")

# Which statekeeper packages (or top-level modules) each one may import, besides itself.
# Derived from the imports after the runtime/ split; each row only reaches downwards.
_BASE = {"errors", "settings", "atomic_file", "gc_pause"}
_FLOORS_BELOW_PROCESSING = _BASE | {"stores", "kafka", "changelog", "state"}
_RUNTIME = _FLOORS_BELOW_PROCESSING | {"processing"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    # Replacing a small file atomically (records, status files): below everything.
    "atomic_file": set(),
    # Pausing the cyclic GC around tight read loops.
    "gc_pause": set(),
    "settings": {"errors"},
    "procfs": set(),
    # Which process: pid, start time and boot (on top of procfs).
    "process_identity": {"procfs"},
    "stores": {"errors"},
    "kafka": {"errors", "process_identity", "atomic_file"},
    "changelog": {"errors", "kafka", "stores", "gc_pause"},
    "state": _BASE | {"kafka", "stores", "changelog"},
    "processing": _FLOORS_BELOW_PROCESSING,
    "spark": _RUNTIME,
    # Running on a cluster: executor identity, the local cluster.
    "cluster": _BASE | {"procfs", "process_identity"},
    # Where each task runs (pure decisions, the executor's published copy).
    "placement": _BASE | {"cluster"},
    # What an executor runs beside its tasks: standby replicas and the query server.
    "standby": _FLOORS_BELOW_PROCESSING | {"cluster", "placement"},
    "query": _FLOORS_BELOW_PROCESSING | {"processing", "cluster", "placement"},
    # App versions: a topology's fingerprint and what a new version may run on (pure but for
    # the state root's topology.json); the app checks it at start, the CLI plans upgrades.
    "versions": _RUNTIME,
    # Snapshots sit beside the runtime: the worker takes and installs them, ops lists them.
    "snapshots": _FLOORS_BELOW_PROCESSING,
    # State migration between app versions: reads the old version's state (snapshots and
    # changelogs, read-only), writes the new one's; its job is given a SparkContext, and
    # the CLI calls it. It reads the old version's Spark checkpoint (where its last
    # micro-batch ended: the takeover) with spark.checkpoint_log's file readers.
    "migration": _RUNTIME | {"snapshots", "versions", "app", "spark"},
    # Upgrades: cut-over (stop the old version, migrate, verify, record) and rollback.
    "upgrade": _RUNTIME | {"snapshots", "versions", "app", "spark", "migration", "procfs"},
    "worker": _RUNTIME
    | {"spark", "snapshots", "cluster", "placement", "standby", "query"}
    | {"procfs", "process_identity"},
    "app": _RUNTIME
    | {"spark", "worker", "snapshots", "cluster", "placement", "standby", "versions"},
    "ops": _RUNTIME | {"spark", "worker", "app", "snapshots", "cluster", "placement", "versions"},
    # Backfill: runs the app's own topology as a bounded run of StatekeeperApp (app) under its
    # checkpoint; reads offset JSON and Spark's checkpoint files (spark), the takeover and
    # state root (versions), and whether the app runs (ops); a store fill snapshots the
    # store it filled (snapshots).
    "backfill": _RUNTIME | {"app", "spark", "versions", "ops", "snapshots"},
    "airflow": _RUNTIME
    | {"spark", "worker", "app", "ops", "snapshots", "cluster", "placement"}
    | {"procfs", "process_identity", "versions", "upgrade"},
    # The embedded platform runs Airflow and the broker as processes; it imports neither
    # (the third-party rule below keeps airflow out). It reads app specs and supervision's
    # records through airflow/supervision/, whose modules import no Airflow.
    "platform": _BASE | {"kafka", "procfs", "process_identity", "app", "airflow"},
    # Leaves: the command line and the public facade (statekeeper/__init__.py) call anything.
    "cli": {"*"},
    "__init__": {"*"},
    # The harness that tests and demos run apps with (like pyspark.testing); see LEAVES.
    "testing": {"*"},
    # Shipped apps, their generators and reference models, on their way to spark_apps/.
    "apps": {"*"},
    "demo": {"*"},
    "generate": {"*"},
    "recompute": {"*"},
}
# Packages no other part of the library imports, whatever its row allows: the test and demo
# harness serves the tests, the benchmarks and the apps' demos only.
LEAVES = ("testing",)
# Top-level modules the library never imports: the shipped apps are examples built on it
# (a spec names its files by path; they are loaded without sys.path).
OUTSIDE = ("spark_apps",)
# Third-party packages a package must not import (on top of the floors' HEAVY rule).
FORBIDDEN_THIRD_PARTY: dict[str, tuple[str, ...]] = {
    **{floor: HEAVY for floor in FLOORS},
    "errors": HEAVY,
    "settings": HEAVY,
    "procfs": HEAVY,
    "process_identity": HEAVY,
    "cluster": HEAVY,
    "placement": HEAVY,
    "versions": HEAVY,
    "standby": HEAVY,
    "query": HEAVY,
    "platform": HEAVY,
    **{
        layer: ("airflow",)
        for layer in ("spark", "worker", "app", "ops", "snapshots", "migration", "upgrade")
    },
}
# Known breaks waiting for their fix, as (file, statekeeper package imported). An entry that no
# longer matches anything fails the test, so it is deleted with the fix.
EXEMPT: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class ImportSite:
    """One import statement: where it sits (``statekeeper/x.py:12``) and the name imported."""

    where: str
    imported: str

    @property
    def file(self) -> str:
        """The importing file, relative to include/."""
        return self.where.rsplit(":", 1)[0]

    def __str__(self) -> str:
        return f"{self.where} imports {self.imported}"


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a (possibly relative) ``from … import`` in ``module`` names."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, root: Path = PACKAGE_ROOT) -> list[ImportSite]:
    """Every module ``path`` (a file under ``root``) imports, wherever the statement sits.

    ``importlib.import_module("x")`` with a literal name counts as an import of ``x``.
    """
    relative = path.relative_to(root.parent)
    parts = relative.with_suffix("").parts
    is_package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if is_package else parts)
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[ImportSite] = []

    def site(node: ast.stmt | ast.expr, imported: str) -> ImportSite:
        return ImportSite(f"{relative}:{node.lineno}", imported)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [site(node, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            # `from statekeeper import stores` imports the package statekeeper.stores.
            if target == "statekeeper":
                found += [site(node, f"statekeeper.{alias.name}") for alias in node.names]
            else:
                found.append(site(node, target))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(site(node, node.args[0].value))
    return found


def layer_of(path: Path, root: Path = PACKAGE_ROOT) -> str:
    """The package (``stores``) or top-level module (``cli``) a library file belongs to."""
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else path.stem


def layering_violations(
    root: Path = PACKAGE_ROOT, exempt: set[tuple[str, str]] | None = None
) -> list[str]:
    """Every import under ``root`` that breaks ``ALLOWED``, ``LEAVES``, ``OUTSIDE`` or
    ``FORBIDDEN_THIRD_PARTY``.

    ``exempt`` entries are skipped while they match an import and reported once they match none.
    """
    exempt = set(exempt or ())
    unused = set(exempt)
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")):
        layer = layer_of(path, root)
        if layer not in ALLOWED:
            problems.append(f"{path.relative_to(root.parent)}: {layer!r} has no row in ALLOWED")
            continue
        allowed = ALLOWED[layer]
        for site in imports_of(path, root):
            top, _, rest = site.imported.partition(".")
            if top == "statekeeper":
                target = rest.split(".")[0] or "__init__"
                if target in LEAVES and target != layer:
                    problems.append(f"{site}: nothing in the library imports statekeeper.{target}")
                    continue
                if target == layer or "*" in allowed or target in allowed:
                    continue
                if (site.file, target) in exempt:
                    unused.discard((site.file, target))
                    continue
                problems.append(f"{site}: {layer} may not import statekeeper.{target}")
            elif top in OUTSIDE:
                problems.append(f"{site}: the library may not import {top}")
            elif top in FORBIDDEN_THIRD_PARTY.get(layer, ()):
                problems.append(f"{site}: {layer} may not import {top}")
    problems += [f"{file}: stale EXEMPT entry for {target}, delete it" for file, target in unused]
    return problems


def test_every_import_follows_the_layering() -> None:
    problems = layering_violations(exempt=EXEMPT)
    assert not problems, "layering broken:\n" + "\n".join(problems)


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    root = tmp_path / "statekeeper"
    (root / "stores").mkdir(parents=True)
    (root / "stores" / "__init__.py").write_text("")
    (root / "stores" / "bad.py").write_text(
        "def later():\n"
        "    import pyspark.sql\n"
        "    from ..app import statekeeper_app\n"
        "    from statekeeper import state\n"
        "    import importlib\n"
        "    return importlib.import_module('airflow')\n"
    )
    (root / "cli").mkdir()
    (root / "cli" / "harness.py").write_text(
        "from statekeeper.testing.app_process import AppProcess\n"
        "from spark_apps.word_count import generator\n"
    )
    problems = layering_violations(root, exempt={("statekeeper/stores/gone.py", "app")})
    assert [p.split(": ", 1)[1] for p in problems] == [
        "nothing in the library imports statekeeper.testing",
        "the library may not import spark_apps",
        "stores may not import pyspark",
        "stores may not import statekeeper.app",
        "stores may not import statekeeper.state",
        "stores may not import airflow",
        "stale EXEMPT entry for app, delete it",
    ]


@pytest.mark.parametrize("module", ["statekeeper", "statekeeper.cli"])
def test_importing_the_library_loads_no_heavy_dependency(module: str) -> None:
    """The CLI and the facade start fast: pyspark, great_expectations, airflow load lazily."""
    probe = (
        f"import sys, {module}\n"
        f"print(sorted({{name.split('.')[0] for name in sys.modules}} & {set(HEAVY)!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
