"""The public facade: ``from statekeeper import …`` gives the names an app needs, lazily."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import statekeeper

APP_NAMES = {
    "Stores",
    "StreamsBuilder",
    "Materialized",
    "Suppressed",
    "TimeWindows",
    "StatekeeperApp",
    "load_settings",
    "StatekeeperSettings",
}


def test_the_facade_exports_what_an_app_needs() -> None:
    assert set(statekeeper.__all__) >= APP_NAMES
    assert set(statekeeper.__all__) == set(statekeeper._EXPORTS)
    assert set(dir(statekeeper)) >= set(statekeeper.__all__)


@pytest.mark.parametrize("name", statekeeper.__all__)
def test_each_public_name_is_the_defining_modules_object(name: str) -> None:
    defining = importlib.import_module(statekeeper._EXPORTS[name])
    assert getattr(statekeeper, name) is getattr(defining, name)


def test_an_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        statekeeper.no_such_name  # noqa: B018
    # Subpackages still import through the package as usual.
    from statekeeper import stores

    assert stores.Stores is statekeeper.Stores


def test_importing_the_package_loads_no_submodule() -> None:
    probe = (
        "import sys, statekeeper\n"
        "print(sorted(m for m in sys.modules if m.startswith('statekeeper.')))\n"
        "from statekeeper import StreamsBuilder\n"
        "print('statekeeper.app' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split("\n")[:2] == ["[]", "False"], done.stdout + done.stderr
