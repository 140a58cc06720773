"""Check d: data quality. A Great Expectations suite per restored store, run on a pandas
DataFrame of its entries, with Data Docs written into the drill's report directory.

Per store: keys non-null and unique (key and window start for window stores), every key and
value decodes with the store's serdes, values non-negative where the value serde is numeric
(``int``: the counts and sums of the shipped apps), and for window stores window end >
window start and every window inside retention (start > observed stream time - retention).
Great Expectations is imported here, lazily (3-11 s), and runs in an ephemeral context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.ops.drill.record import FAIL, MAX_EXAMPLES, PASS, CheckResult
from statekeeper.ops.drill.sandbox import RestoredStore
from statekeeper.stores.serdes import IntSerde, serde_for
from statekeeper.stores.window_bytes import split_changelog_window_key

SITE = "drill"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)


def store_rows(store: RestoredStore) -> list[dict[str, Any]]:
    """One row per entry: key (decoded, as text; None when it does not decode), whether key
    and value decode, the value (numeric serdes) or its text, window start and end."""
    spec = store.spec
    key_serde, value_serde = serde_for(spec.key_serde), serde_for(spec.value_serde)
    numeric = isinstance(value_serde, IntSerde)
    window = spec.kind == "window"
    rows = []
    for raw_key, raw_value in store.contents.items():
        row: dict[str, Any] = {}
        if window:
            raw_key, start = split_changelog_window_key(raw_key)
            row["window_start"] = start
            row["window_end"] = start + (spec.window_size_ms or 0)
        try:
            row["key"], row["key_decodes"] = _text(key_serde.deserialize(raw_key)), True
        except Exception:  # noqa: BLE001 - a serde failure is what this row reports
            row["key"], row["key_decodes"] = None, False
        try:
            value = value_serde.deserialize(raw_value)
            row["value_decodes"] = True
        except Exception:  # noqa: BLE001
            value, row["value_decodes"] = None, False
        row["value" if numeric else "value_text"] = (
            value if numeric or value is None else _text(value)
        )
        rows.append(row)
    return rows


def _columns(store: RestoredStore) -> list[str]:
    numeric = isinstance(serde_for(store.spec.value_serde), IntSerde)
    cols = ["key", "key_decodes", "value_decodes", "value" if numeric else "value_text"]
    return cols + (["window_start", "window_end"] if store.spec.kind == "window" else [])


def _expectations(gx: Any, store: RestoredStore) -> list[Any]:
    ge = gx.expectations
    spec = store.spec
    found = [
        ge.ExpectColumnValuesToNotBeNull(column="key"),
        ge.ExpectColumnValuesToBeInSet(column="key_decodes", value_set=[True]),
        ge.ExpectColumnValuesToBeInSet(column="value_decodes", value_set=[True]),
    ]
    if spec.kind == "window":
        found += [
            ge.ExpectCompoundColumnsToBeUnique(column_list=["key", "window_start"]),
            ge.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="window_end", column_B="window_start"
            ),
        ]
        observed = store.observed_stream_time
        if observed is not None and observed >= 0 and spec.retention_ms:
            found.append(
                ge.ExpectColumnValuesToBeBetween(
                    column="window_start", min_value=observed - spec.retention_ms + 1
                )
            )
    else:
        found.append(ge.ExpectColumnValuesToBeUnique(column="key"))
    if isinstance(serde_for(spec.value_serde), IntSerde):
        found.append(ge.ExpectColumnValuesToBeBetween(column="value", min_value=0))
    return found


@dataclass
class QualityRun:
    """Results per ``(task, store)`` and where the Data Docs are."""

    results: dict[tuple[str, str], CheckResult]
    pages: dict[tuple[str, str], str]  # validation page per store
    index: str


def _failure(er: Any) -> tuple[str, list[str]]:
    config = er.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k not in ("batch_id",)}
    unexpected = (er.result or {}).get("partial_unexpected_list") or []
    return f"{config.type}({kwargs})", [str(u) for u in unexpected[:MAX_EXAMPLES]]


def run_quality(stores: list[tuple[str, RestoredStore]], docs_dir: Path) -> QualityRun:
    """Validate every ``(task, store)`` and write Data Docs under ``docs_dir``."""
    import logging

    import great_expectations as gx
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    docs_dir = Path(docs_dir).resolve()
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    context.add_data_docs_site(
        site_name=SITE,
        site_config={
            "class_name": "SiteBuilder",
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(docs_dir),
            },
        },
    )
    source = context.data_sources.add_pandas("restored-state")
    results: dict[tuple[str, str], CheckResult] = {}
    pages: dict[tuple[str, str], str] = {}
    for task_id, store in stores:
        name = f"{task_id}-{store.spec.name}"
        asset = source.add_dataframe_asset(name)
        batch = asset.add_batch_definition_whole_dataframe(f"{name}-all")
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        for expectation in _expectations(gx, store):
            suite.add_expectation(expectation)
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"{name}-validation", data=batch, suite=suite)
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=f"{name}-checkpoint",
                validation_definitions=[validation],
                actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=[SITE])],
            )
        )
        frame = pd.DataFrame(store_rows(store), columns=_columns(store))
        outcome = checkpoint.run(batch_parameters={"dataframe": frame})
        failed, examples = [], []
        evaluated = 0
        for run in outcome.run_results.values():
            for er in run.results:
                evaluated += 1
                if not er.success:
                    what, unexpected = _failure(er)
                    failed.append(what)
                    examples += unexpected
        key = (task_id, store.spec.name)
        if failed:
            results[key] = CheckResult(
                FAIL,
                f"{len(failed)} of {evaluated} expectations failed: " + "; ".join(failed),
                examples[:MAX_EXAMPLES],
            )
        else:
            results[key] = CheckResult(PASS, f"{evaluated} expectations met on {len(frame)} rows")
        page = sorted((docs_dir / "validations" / name).rglob("*.html"))
        if page:
            pages[key] = str(page[-1])
    return QualityRun(results, pages, str(docs_dir / "index.html"))
