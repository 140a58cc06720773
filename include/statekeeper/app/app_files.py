"""The app's files a spec names (``topology:``, ``generator:``, ``drill_model:``, each
"file.py:function" relative to the spec, or "package.module:function"): made absolute at
load, checked without running them, and imported by path without touching ``sys.path``.

A topology file is registered with Spark's cloudpickle to be pickled by value: the executors
get its functions without being able to import the file. The other files run in the driver
or the command only: each is imported as a module of its folder, which is registered as a
package under a name of its own (:func:`import_app_file`), so it imports its siblings with
relative imports (``from .reference import recompute``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def absolute_ref(spec_path: Path, ref: Any) -> Any:
    """A ``file.py:function`` (topology, generator, drill_model) with its file made absolute,
    from the spec's folder.

    Done at load time, so a spec dumped elsewhere (``model_dump``) still names the file.
    """
    if not isinstance(ref, str) or ":" not in ref:
        return ref
    file, _, func = ref.rpartition(":")
    if not file.endswith(".py"):
        return ref
    return f"{(spec_path.parent / file).resolve()}:{func}"


def import_topology_file(path: Path) -> ModuleType:
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


def function_file_problems(
    refs: dict[str, str | None], where_of: Callable[[str], str]
) -> list[str]:
    """Problems of the files ``refs`` (field -> reference) name: each exists, parses and
    defines its function at the top level (read, not run: their code runs when a command
    needs it). ``where_of(field)``: where the spec sets it, for messages."""
    problems = []
    for field, ref in refs.items():
        file, _, func = str(ref).rpartition(":")
        if ref is None or not file.endswith(".py"):
            continue
        where = where_of(field)
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
