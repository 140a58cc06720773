"""The README's example app (spark_apps/page_views/app.py) builds and computes what it says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .harness import Harness, as_json, records

APP_FILE = Path(__file__).resolve().parents[3] / "spark_apps" / "page_views" / "app.py"


def _build_topology(burst: int):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("page_views_app", APP_FILE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build_topology(burst=burst)


def test_page_views_counts_users_and_reports_closed_bursty_minutes(tmp_path) -> None:
    topology = _build_topology(burst=2)
    h = Harness(topology, tmp_path, vectorize=False)
    view = {"url": "/"}
    batch = records(
        "page-views",
        [
            ("ann", view, 1_000),
            ("ann", view, 2_000),
            ("ann", view, 3_000),  # 3 views in minute 0: a burst (> 2)
            ("bob", view, 4_000),
            ("bob", b'"a string"', 5_000),  # valid JSON, not a view: filtered out
            ("bob", b"{broken", 5_500),  # not JSON: goes to the DLQ
            ("bob", view, 66_000),  # stream time 66 s closes minute 0 (60 s + 5 s grace)
        ],
    )
    h.run(batch)
    assert h.contents("views-per-user") == {"ann": 3, "bob": 2}
    assert [s.key for s in h.emitter.to("app-dlq")] == [b"bob"]
    assert h.emitter.kv("page-view-bursts", decode=as_json) == [("ann", {"minute": 0, "views": 3})]


def test_the_readme_shows_the_app_file_as_it_is() -> None:
    readme = (APP_FILE.parents[2] / "README.md").read_text()
    shown = readme.split("`spark_apps/page_views/app.py`:\n\n```python\n", 1)[1].split("```")[0]
    code = APP_FILE.read_text()
    body = code[code.index('"""', 3) + 3 :].lstrip("\n")  # the file after its docstring
    assert shown == body
