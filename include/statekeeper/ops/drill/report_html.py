"""The drill report: one self-contained HTML page (no external JS or CSS, works offline).

The verdict (pass, fail, or error with its message), the recovery point (RPO: committed
records behind the live head first, snapshot age second) and time (RTO), check results per
store, the mismatching keys with their restored, recomputed/expected and live values, the
restore-time trend of the app's past drills (errored ones included) as an inline SVG chart,
and links to the Great Expectations Data Docs in the same report directory.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from statekeeper.ops.drill.history import HistoryRow
from statekeeper.ops.drill.record import CHECKS, ERROR, FAIL, PASS, SIDES, DrillRecord, StoreDrill

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f3f3f3}
.pass{color:#17692b;font-weight:600}.fail{color:#b3261e;font-weight:600}.skipped{color:#777}
.banner{padding:.6em 1em;border-radius:4px;font-size:1.2em}
.error{color:#a15c00;font-weight:600}
.banner.pass{background:#e3f4e6}.banner.fail{background:#fbe4e2}.banner.error{background:#fdf0dc}
small{color:#666}code{font-size:.9em}.absent{color:#777;font-style:italic}
"""
#: Trend point colours by drill status.
_COLOURS = {PASS: "#17692b", FAIL: "#b3261e", ERROR: "#d98200"}


def _status(status: str) -> str:
    return f'<span class="{escape(status)}">{escape(status.upper())}</span>'


def rto_trend_svg(rows: list[HistoryRow], width: int = 640, height: int = 220) -> str:
    """An inline SVG line chart of RTO seconds per drill, oldest left; passed drills green,
    failed red, errored orange (at the RTO they got to, 0 when they never restored)."""
    if not rows:
        return "<p><small>No drills in the history yet.</small></p>"
    pad_l, pad_r, pad_t, pad_b = 56, 16, 16, 40
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    top = max(r.rto_s for r in rows) or 1.0
    top *= 1.1
    step = plot_w / max(1, len(rows) - 1)

    def xy(i: int, value: float) -> tuple[float, float]:
        x = pad_l + (i * step if len(rows) > 1 else plot_w / 2)
        return x, pad_t + plot_h - (value / top) * plot_h

    points = [xy(i, r.rto_s) for i, r in enumerate(rows)]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="RTO per drill">',
        f'<line x1="{pad_l}" y1="{pad_t + plot_h}" x2="{pad_l + plot_w}" '
        f'y2="{pad_t + plot_h}" stroke="#999"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + plot_h}" stroke="#999"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = pad_t + plot_h - frac * plot_h
        parts.append(
            f'<text x="{pad_l - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{top * frac:.2f} s</text>"
        )
    if len(points) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#3566a8" stroke-width="2"/>')
    for (x, y), row in zip(points, rows, strict=True):
        color = _COLOURS.get(row.outcome, "#777")
        label = escape(f"{row.started_at} {row.drill_id} {row.outcome}: RTO {row.rto_s:.3f} s")
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>{label}</title>'
            "</circle>"
        )
    first, last = escape(rows[0].started_at[:19]), escape(rows[-1].started_at[:19])
    parts.append(
        f'<text x="{pad_l}" y="{height - 12}" font-size="11">{first}</text>'
        f'<text x="{pad_l + plot_w}" y="{height - 12}" font-size="11" text-anchor="end">'
        f"{last}</text></svg>"
    )
    return "".join(parts)


def _link(report_dir: Path, target: str | None, text: str) -> str:
    if not target:
        return '<span class="skipped">-</span>'
    path = Path(target)
    href = (
        path.relative_to(report_dir)
        if path.is_absolute() and path.is_relative_to(report_dir)
        else path
    )
    return f'<a href="{escape(href.as_posix())}">{escape(text)}</a>'


def _value(mismatch: dict[str, str | None], side: str) -> str:
    if side not in mismatch:
        return '<span class="skipped">not known</span>'
    value = mismatch[side]
    return '<span class="absent">absent</span>' if value is None else escape(value)


def mismatch_tables(stores: list[StoreDrill]) -> list[str]:
    """Per store and check with mismatching keys: a table of each key's values, restored
    first, then what it was compared with, then live (a side the check does not know shows
    "not known", a key missing on a side "absent")."""
    out: list[str] = []
    for s in stores:
        for name in [*CHECKS, *(c for c in s.checks if c not in CHECKS)]:
            check = s.checks.get(name)
            if check is None or not check.mismatches:
                continue
            sides = [x for x in SIDES if any(x in m for m in check.mismatches)]
            sides += sorted({x for m in check.mismatches for x in m} - {"key", *SIDES})
            shown = len(check.mismatches)
            total = sum(check.counts.values()) or shown
            out.append(
                f"<h3><code>{escape(s.task)}</code> {escape(s.store)}: {escape(name)} "
                f"<small>({shown} of {total} key(s))</small></h3>"
                "<table><tr><th>Key</th>"
                + "".join(f"<th>{escape(x.capitalize())}</th>" for x in sides)
                + "</tr>"
            )
            out += [
                f"<tr><td><code>{escape(str(m.get('key')))}</code></td>"
                + "".join(f"<td>{_value(m, x)}</td>" for x in sides)
                + "</tr>"
                for m in check.mismatches
            ]
            out.append("</table>")
    return out


def _rpo_rto(record: DrillRecord) -> list[str]:
    age = "-" if record.snapshot_age_s is None else f"{record.snapshot_age_s:.1f} s"
    return [
        "<h2>Recovery point (RPO)</h2>",
        "<table><tr><th>Committed records behind the live head</th><th>Snapshot age</th>"
        "<th>Source records not yet processed</th><th>Changelog offsets after the restored "
        "markers</th></tr>",
        f"<tr><td><b>{record.committed_records_behind}</b></td><td>{age}</td>"
        f"<td>{record.source_records_behind}</td><td>{record.changelog_records_behind}</td>"
        "</tr></table>",
        "<h2>Recovery time (RTO)</h2>",
        "<table><tr><th>RTO (restore until usable)</th><th>Records replayed</th>"
        "<th>Bytes downloaded</th><th>Drill wall time</th></tr>",
        f"<tr><td><b>{record.rto_s:.3f} s</b></td><td>{record.records_replayed}</td>"
        f"<td>{record.bytes_downloaded}</td><td>{record.wall_s:.2f} s</td></tr></table>",
    ]


def _store_rows(record: DrillRecord, report_dir: Path) -> list[str]:
    out = [
        "<h2>Stores</h2><table><tr><th>Task</th><th>Store</th><th>Source</th><th>Keys</th>"
        "<th>Batch</th><th>Committed behind</th><th>Snapshot age</th><th>Replayed</th>"
        + "".join(f"<th>{c}</th>" for c in CHECKS)
        + "<th>Data Docs</th></tr>"
    ]
    for s in record.stores:
        source = f"snapshot {s.snapshot_id}" if s.snapshot_id else s.source
        behind = "-" if s.committed_records_behind is None else str(s.committed_records_behind)
        age = "-" if s.snapshot_age_s is None else f"{s.snapshot_age_s:.1f} s"
        cells = []
        for c in CHECKS:
            check = s.checks.get(c)
            if check is None:
                cells.append('<td><span class="skipped">-</span></td>')
                continue
            examples = (
                "<br><small>keys: " + escape(", ".join(check.examples)) + "</small>"
                if check.examples
                else ""
            )
            cells.append(
                f"<td>{_status(check.status)}<br><small>{escape(check.detail)}</small>"
                f"{examples}</td>"
            )
        out.append(
            f"<tr><td>{escape(s.task)}</td><td>{escape(s.store)}</td><td>{escape(source)}</td>"
            f"<td>{s.key_count}</td><td>{s.batch_id}</td><td>{behind}</td><td>{age}</td>"
            f"<td>{s.records_replayed}</td>"
            + "".join(cells)
            + f"<td>{_link(report_dir, s.data_docs, 'validation')}</td></tr>"
        )
    out.append("</table>")
    return out


def render_report(record: DrillRecord, history: list[HistoryRow]) -> str:
    """The report page of ``record`` with the RTO trend of ``history`` (this drill included)."""
    report_dir = Path(record.report_dir)
    verdict = record.status
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Drill {escape(record.drill_id)} of {escape(record.app)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Restore drill of <code>{escape(record.app)}</code></h1>",
        f'<p class="banner {verdict}">{_status(verdict)} &nbsp; drill '
        f"<code>{escape(record.drill_id)}</code>, {escape(record.started_at)} → "
        f"{escape(record.finished_at)}</p>",
    ]
    if record.error is not None:
        out.append(
            "<h2>The drill could not finish</h2>"
            f"<p><code>{escape(record.error)}</code></p>"
            "<p><small>What it found before the error is below.</small></p>"
        )
    out += _rpo_rto(record)
    if record.phase_s:
        phases = ", ".join(f"{escape(k)} {v:.2f} s" for k, v in record.phase_s.items())
        out.append(f"<p><small>Time per phase: {phases}</small></p>")
    out.append("<h2>Checks</h2><table><tr><th>Check</th><th>Result</th></tr>")
    out += [f"<tr><td>{c}</td><td>{_status(record.check_status(c))}</td></tr>" for c in CHECKS]
    out.append("</table>")
    failures = record.failures() if not record.passed else []
    if failures:
        out.append("<h2>Why it failed</h2><ul>")
        out += [f"<li><code>{escape(line)}</code></li>" for line in failures]
        out.append("</ul>")
    tables = mismatch_tables(record.stores)
    if tables:
        out.append(
            "<h2>Mismatching keys</h2><p><small>Up to 20 keys per store and check, with the "
            "restored value, the value it was compared with, and the live store's value "
            "where this machine has a copy.</small></p>"
        )
        out += tables
    out += _store_rows(record, report_dir)
    out.append(
        "<h2>Data quality (Great Expectations Data Docs)</h2><p>"
        + _link(report_dir, record.data_docs_index, "Data Docs index")
        + "</p>"
    )
    if record.live_mode:
        out.append("<h2>Consistency mode per task</h2><ul>")
        out += [
            f"<li><code>{escape(t)}</code>: {escape(m)}</li>"
            for t, m in sorted(record.live_mode.items())
        ]
        out.append("</ul>")
    if record.notes:
        out.append("<h2>Notes</h2><ul>")
        out += [
            f"<li><pre>{escape(n)}</pre></li>" if "\n" in n else f"<li>{escape(n)}</li>"
            for n in record.notes
        ]
        out.append("</ul>")
    out.append(f"<h2>Restore time (RTO) of the last {len(history)} drill(s)</h2>")
    out.append(
        "<p><small>Green: passed, red: failed, orange: could not finish (error).</small></p>"
    )
    out.append(rto_trend_svg(history))
    out.append("</body></html>")
    return "\n".join(out)
