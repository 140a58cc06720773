"""Fixtures of the runtime unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statekeeper.processing.topology import Topology

from .harness import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """``harness(topology, subtopology=0, vectorize=True, name=...)`` → a Harness."""
    made: list[Harness] = []

    def make(topology: Topology, *, name: str = "h", **kwargs: object) -> Harness:
        h = Harness(topology, tmp_path / name, **kwargs)  # type: ignore[arg-type]
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


@pytest.fixture(params=[True, False], ids=["vectorised", "record-at-a-time"])
def vectorize(request: pytest.FixtureRequest) -> bool:
    """Run a test in both execution modes (they must agree on state)."""
    return request.param
