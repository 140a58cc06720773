"""Check d: data quality. A Great Expectations suite per restored store, run on a pandas
DataFrame of its entries, with Data Docs written into the drill's report directory.

Per store: keys non-null and unique (key and window start for window stores), every key and
value decodes with the store's serdes, values non-negative where the value serde is numeric
(``int``: the counts and sums of the shipped apps), and for window stores window end >
window start and every window inside retention (start > observed stream time - retention).
Great Expectations is imported here, lazily (3-11 s), and runs in an ephemeral context.

Data Docs work offline (:func:`make_offline`): Great Expectations' pages load Bootstrap,
jQuery, Vega and fonts from CDNs, and its index page fills its tables with those scripts. So
after the run every page loses its remote stylesheets and images (the logo points at the
copy under ``static/``) and all of its scripts, which need the libraries removed, and gets
a small inline stylesheet; stylesheets lose remote imports and ``url()`` s; the index is
replaced by a static one listing each store's validation result and expectation suite.
Nothing in the Data Docs references an ``http(s)://`` asset.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from html import escape
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

    from statekeeper.errors import require_extra

    require_extra("quality", "great_expectations", "the drill's data-quality checks")
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
            "site_index_builder": {
                "class_name": "DefaultSiteIndexBuilder",
                "show_how_to_buttons": False,
            },
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
    run = QualityRun(results, pages, str(docs_dir / "index.html"))
    make_offline(docs_dir, run)
    return run


# --- offline Data Docs ----------------------------------------------------------------------

#: A URL that leaves the machine: ``http://``, ``https://`` or protocol-relative ``//``.
_REMOTE = r"""(?:https?:)?//"""
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.I | re.S)
_LINK = re.compile(r"""<link\b[^>]*\bhref\s*=\s*["']?""" + _REMOTE + r"[^>]*>", re.I)
_IMG = re.compile(r"""<img\b[^>]*\bsrc\s*=\s*["']?""" + _REMOTE + r"[^>]*>", re.I)
_ALT = re.compile(r"""\balt\s*=\s*["']([^"']*)["']""", re.I)
_SRC_ATTR = re.compile(
    r"""\b(src|srcset|poster|data)\s*=\s*["']?""" + _REMOTE + r"""[^"'\s>]*["']?""", re.I
)
_CSS_IMPORT = re.compile(r"@import\s+(?:url\()?\s*[\"']?" + _REMOTE + r"[^;]*;", re.I)
_CSS_URL = re.compile(r"url\(\s*[\"']?" + _REMOTE + r"[^)]*\)", re.I)
_HEAD_END = re.compile(r"</head\s*>", re.I)
#: Enough style for readable pages without Bootstrap and without the icon font (the status
#: icons become characters).
OFFLINE_STYLE = (
    "<style>body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
    "text-align:left;vertical-align:top}img{max-height:50px}.navbar{height:auto!important}"
    ".pass,.text-success{color:#17692b}.fail,.text-danger{color:#b3261e}"
    ".fa-check-circle::before{content:'\\2714'}.fa-times::before{content:'\\2718'}"
    ".fa-exclamation-triangle::before{content:'\\26A0'}"
    ".fa-question-circle::before{content:'?'}</style>"
)


def strip_remote_assets(html: str, logo: str | None = None) -> str:
    """``html`` without remote stylesheets, scripts (every script: the inline ones need the
    remote libraries), images (an image alt-texted "Great Expectations" becomes ``logo``, a
    local path, when given) or CSS imports and ``url()`` s, with :data:`OFFLINE_STYLE` in its
    head. Plain links (``<a href>``) stay: they load nothing."""

    def image(match: re.Match[str]) -> str:
        alt = _ALT.search(match.group(0))
        text = alt.group(1) if alt else ""
        if logo and text == "Great Expectations":
            return f'<img src="{escape(logo)}" alt="{escape(text)}">'
        return escape(text)

    html = _SCRIPT.sub("", html)
    html = _LINK.sub("", html)
    html = _IMG.sub(image, html)
    html = strip_remote_css(_SRC_ATTR.sub("", html))
    if OFFLINE_STYLE in html:  # stripped before (a report directory used again)
        return html
    html, found = _HEAD_END.subn(lambda _: OFFLINE_STYLE + "</head>", html, count=1)
    return html if found else OFFLINE_STYLE + html


def strip_remote_css(css: str) -> str:
    """``css`` (a stylesheet, or a page's inline styles) without imports or ``url()`` s of
    another host (``url()`` becomes ``none``)."""
    return _CSS_URL.sub("none", _CSS_IMPORT.sub("", css))


def _relative(target: Path, page: Path) -> str:
    return Path(os.path.relpath(target, page.parent)).as_posix()


def make_offline(docs_dir: Path, run: QualityRun) -> None:
    """Make the Data Docs under ``docs_dir`` work offline (see the module docstring)."""
    logo = docs_dir / "static" / "images" / "logo-long.png"
    for page in docs_dir.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        local = _relative(logo, page) if logo.is_file() else None
        page.write_text(strip_remote_assets(html, local), encoding="utf-8")
    for sheet in docs_dir.rglob("*.css"):  # copied by the site builder, linked or not
        css = sheet.read_text(encoding="utf-8")
        sheet.write_text(strip_remote_css(css), encoding="utf-8")
    index = docs_dir / "index.html"
    index.write_text(offline_index(docs_dir, run), encoding="utf-8")


def offline_index(docs_dir: Path, run: QualityRun) -> str:
    """A static index of the Data Docs: per store its result and links to its validation
    page and expectation suite (relative, so the directory can be moved or served)."""
    rows = []
    for (task, store), result in sorted(run.results.items()):
        name = f"{task}-{store}"
        page = run.pages.get((task, store))
        suite = docs_dir / "expectations" / f"{name}.html"
        validation = (
            f'<a href="{escape(_relative(Path(page), docs_dir / "index.html"))}">result</a>'
            if page
            else "-"
        )
        expectations = (
            f'<a href="{escape(_relative(suite, docs_dir / "index.html"))}">suite</a>'
            if suite.is_file()
            else "-"
        )
        rows.append(
            f"<tr><td><code>{escape(task)}</code></td><td>{escape(store)}</td>"
            f'<td class="{escape(result.status)}">{escape(result.status.upper())}</td>'
            f"<td>{escape(result.detail)}</td><td>{validation}</td><td>{expectations}</td></tr>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Data Docs: restored stores"
        f"</title>{OFFLINE_STYLE}</head><body><h1>Data quality of the restored stores</h1>"
        "<p>One Great Expectations suite per restored store, validated on its entries.</p>"
        "<table><tr><th>Task</th><th>Store</th><th>Result</th><th>Detail</th>"
        "<th>Validation</th><th>Expectations</th></tr>" + "".join(rows) + "</table></body></html>"
    )
