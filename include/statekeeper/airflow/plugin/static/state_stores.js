// The State stores page: fetches api/overview and renders it. No framework, no CDN (the
// machines may be offline); every value goes in through textContent, never as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const REFRESH_MS = 15000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function ago(epochSeconds) {
  if (!epochSeconds) return "–";
  return duration(Math.max(0, Date.now() / 1000 - epochSeconds)) + " ago";
}

function num(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en");
}

function badge(text, kind) {
  return el("span", { class: "badge " + kind }, text);
}

function stateBadge(app) {
  if (app.errors && app.errors.spec) return badge("spec error", "bad");
  if (app.running) return badge(app.state || "RUNNING", app.state === "RUNNING" ? "ok" : "warn");
  return badge("not running", "off");
}

function when(epochSeconds) {
  return epochSeconds ? new Date(epochSeconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–";
}

// What the supervising DAG knows: its condition, restarts in the window (unplanned exits
// only; relaunches after make down / an action are not restarts), uptime, FAILED + remedy.
function supervisionCell(sup) {
  if (!sup) return el("span", { class: "note" }, "–");
  const kind = sup.condition === "RUNNING" ? "ok"
    : ["FAILED", "DOWN", "ERROR"].includes(sup.condition) ? "bad"
    : ["STOPPED", "DISABLED", "NOT SUPERVISED"].includes(sup.condition) ? "off" : "warn";
  const last = sup.last_restart;
  return el("span", { class: "supervision", "data-condition": sup.condition,
    "data-restarts": sup.restarts_in_window, title: last ? `last restart ${when(last.at)}: ${last.reason}` : "" },
    badge(sup.condition, kind), " ",
    el("span", { class: "restarts" }, `${sup.restarts_in_window} restart(s) in ` +
      `${duration(sup.restart_window_s)}`),
    sup.uptime_s !== null && sup.uptime_s !== undefined ? ` · up ${duration(sup.uptime_s)}` : "");
}

function supervisionSection(app) {
  const sup = app.supervision;
  if (!sup) return el("p", { class: "note" }, "No supervision record (not launched by the statekeeper_apps DAG yet).");
  const last = sup.last_restart;
  const relaunch = sup.last_relaunch;
  const rows = [
    ["Condition", supervisionCell(sup)],
    ["Uptime", duration(sup.uptime_s)],
    ["Restarts in window", `${sup.restarts_in_window}` +
      (sup.max_restarts !== null && sup.max_restarts !== undefined ? ` of at most ${sup.max_restarts}` : "") +
      ` within ${duration(sup.restart_window_s)}`],
    ["Last restart", last ? el("span", { class: "last-restart" }, `${when(last.at)}: ${last.reason}`) : "none"],
    ["Relaunches after intended stops", relaunch
      ? `${sup.relaunches_in_window} (last ${when(relaunch.at)}, stopped by ${relaunch.by})` : "none"],
  ];
  if (sup.failed) {
    rows.push(["FAILED", el("span", { class: "error failed" },
      `${when(sup.failed.at)}: ${sup.failed.reasons} (${sup.failed.explanation})`)]);
    rows.push(["Remedy", el("span", { class: "remedy" }, sup.failed.remedy)]);
  }
  if (sup.stopped) rows.push(["Stopped", `${when(sup.stopped.at)} by ${sup.stopped.by || "an operator"}`]);
  return el("table", { class: "grid kv supervision-details" },
    el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))));
}

function link(href, text) {
  return href ? el("a", { href: href, target: "_blank", rel: "noopener" }, text) : "–";
}

function table(headers, rows, numeric) {
  const nums = new Set(numeric || []);
  return el("table", { class: "grid" },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) =>
      el("tr", {}, cells.map((c, i) => el("td", nums.has(i) ? { class: "num" } : {}, c))))));
}

function lastOf(list) {
  return list && list.length ? list[list.length - 1] : null;
}

function appRow(app) {
  const batch = app.last_batch;
  const snaps = app.snapshots;
  const newest = snaps && snaps.recent && snaps.recent[0];
  const drill = lastOf(app.drills);
  const audit = app.audits && app.audits[0];
  return el("tr", { "data-app": app.application_id },
    el("td", {}, el("a", { href: "#app-" + app.application_id }, app.application_id)),
    el("td", { title: app.status_note || "" }, stateBadge(app), " ",
      el("span", { class: "note" }, app.running ? "" : "last status " + ago(app.status_updated_at))),
    el("td", {}, supervisionCell(app.supervision)),
    el("td", { class: "num" }, num(app.lag)),
    el("td", {}, batch ? `#${batch.batch_id}: ${num(batch.records)} records in ` +
      `${duration(batch.seconds)}, ${ago(batch.finished_at)}` : "–"),
    el("td", { class: "num" }, app.throughput && app.throughput.records_per_s_processing
      ? num(app.throughput.records_per_s_processing) + " rec/s" : "–"),
    el("td", {}, snaps && snaps.count ? `${snaps.count} (${bytes(snaps.bytes)}); newest ` +
      duration(newest.age_s) + " old" : "none"),
    el("td", {}, drill ? [badge(drill.passed ? "pass" : "fail", drill.passed ? "ok" : "bad"),
      ` RTO ${duration(drill.rto_s)}`] : "none"),
    el("td", {}, audit ? badge(audit.verdict, audit.verdict === "ok" ? "ok"
      : audit.verdict === "fail" ? "bad" : "warn") : "none"));
}

function storesSection(app) {
  const rows = [];
  for (const task of app.tasks || []) {
    if (!task.stores.length) continue; // stateless tasks have nothing to restore
    for (const s of task.stores) {
      const restore = s.restore || {};
      const source = s.restore_source
        ? s.restore_source + (restore.snapshot_id ? " " + restore.snapshot_id : "")
        : "–";
      rows.push([task.task, s.store, bytes(s.bytes_on_disk), num(s.approx_entries),
        el("span", { title: restore.snapshot_note || restore.reason || "" }, source),
        num(restore.records), num(task.committed_batch_id), num(task.source_lag)]);
    }
  }
  if (!rows.length) return el("p", { class: "note" }, "No stores on this machine yet.");
  return table(["Task", "Store", "On disk", "Entries (approx.)", "Restored from",
    "Records replayed", "Committed batch", "Source lag"], rows, [2, 3, 5, 6, 7]);
}

function snapshotsSection(app) {
  const snaps = app.snapshots;
  if (!snaps) return el("p", { class: "error" }, "Snapshots unavailable.");
  if (!snaps.count) return el("p", { class: "note" }, snaps.note || "No snapshots yet.");
  const rows = Object.values(snaps.latest).map((m) => [m.task, m.store,
    el("span", { class: "mono" }, m.snapshot_id), duration(m.age_s), bytes(m.bytes),
    num(m.key_count), num(m.batch_id)]);
  return el("div", {},
    el("p", { class: "note" }, `${snaps.count} snapshots, ${bytes(snaps.bytes)} in all, at `,
      el("span", { class: "mono" }, snaps.url), ". Latest per task and store:"),
    table(["Task", "Store", "Latest snapshot", "Age", "Size", "Keys", "Batch"], rows,
      [3, 4, 5, 6]));
}

// RTO (left axis, solid) and RPO as snapshot age (right axis, dashed) per drill, oldest
// first; each RTO point is green (passed) or red (failed).
function trendChart(drills) {
  const W = 760, H = 220, L = 56, R = 56, T = 14, B = 30;
  const chart = svg("svg", { class: "trend", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": "RTO and RPO of the drills" });
  const xs = (i) => L + (drills.length === 1 ? (W - L - R) / 2 : i * (W - L - R) / (drills.length - 1));
  const maxRto = Math.max(...drills.map((d) => d.rto_s || 0), 0.001);
  const rpos = drills.map((d) => d.rpo_snapshot_age_s);
  const maxRpo = Math.max(...rpos.filter((v) => v !== null && v !== undefined), 0.001);
  const yRto = (v) => H - B - (v / maxRto) * (H - T - B);
  const yRpo = (v) => H - B - (v / maxRpo) * (H - T - B);
  chart.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  chart.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  chart.append(svg("line", { class: "axis", x1: W - R, y1: T, x2: W - R, y2: H - B }));
  chart.append(svg("text", { x: 4, y: T + 8 }, duration(maxRto)));
  chart.append(svg("text", { x: 4, y: H - B }, "0"));
  chart.append(svg("text", { x: W - R + 4, y: T + 8 }, duration(maxRpo)));
  chart.append(svg("text", { x: L, y: H - 8 }, "RTO (left, solid) · RPO snapshot age (right, dashed) · oldest → newest drill"));
  chart.append(svg("polyline", { class: "rto",
    points: drills.map((d, i) => `${xs(i)},${yRto(d.rto_s || 0)}`).join(" ") }));
  const rpoPoints = drills.map((d, i) => (rpos[i] === null || rpos[i] === undefined)
    ? null : `${xs(i)},${yRpo(rpos[i])}`).filter(Boolean);
  if (rpoPoints.length) chart.append(svg("polyline", { class: "rpo", points: rpoPoints.join(" ") }));
  drills.forEach((d, i) => {
    if (rpos[i] !== null && rpos[i] !== undefined) {
      chart.append(svg("rect", { class: "rpo", x: xs(i) - 3, y: yRpo(rpos[i]) - 3, width: 6, height: 6 }));
    }
    const dot = svg("circle", { class: d.passed ? "pass" : "fail", cx: xs(i), cy: yRto(d.rto_s || 0), r: 4 });
    dot.append(svg("title", {}, `${d.drill_id}: ${d.passed ? "passed" : "FAILED"}, RTO ` +
      `${duration(d.rto_s)}, RPO ${duration(d.rpo_snapshot_age_s)}`));
    chart.append(dot);
  });
  return chart;
}

function drillsSection(app) {
  const drills = app.drills || [];
  if (!drills.length) return el("p", { class: "note" }, "No drills yet.");
  const rows = drills.slice().reverse().map((d) => [
    el("span", { class: "mono" }, d.drill_id), d.started_at.replace("T", " ").slice(0, 19),
    el("span", { title: (d.failures || []).join("\n") }, badge(d.passed ? "pass" : "fail", d.passed ? "ok" : "bad")),
    duration(d.rto_s), duration(d.rpo_snapshot_age_s), num(d.rpo_source_records_behind),
    num(d.records_replayed), d.from_snapshot || "–",
    el("span", {}, link((d.urls || {}).report, "report"), " · ",
      link((d.urls || {}).data_docs, "Data Docs"))]);
  return el("div", {}, trendChart(drills),
    table(["Drill", "Started (UTC)", "Result", "RTO", "RPO (snapshot age)",
      "RPO (source records behind)", "Records replayed", "From", "Reports"], rows, [3, 4, 5, 6]));
}

function auditsSection(app) {
  const audits = app.audits || [];
  if (!audits.length) return el("p", { class: "note" }, "No changelog audits yet.");
  const rows = audits.map((a) => [a.audited_at.replace("T", " ").slice(0, 19),
    badge(a.verdict, a.verdict === "ok" ? "ok" : a.verdict === "fail" ? "bad" : "warn"),
    num(a.topics), num(a.fixes_applied),
    a.reasons.length ? el("ul", {}, a.reasons.map((r) => el("li", {}, r))) : "–"]);
  return table(["Audited (UTC)", "Verdict", "Topics", "Fixes applied", "Why"], rows, [2, 3]);
}

function versionSection(app) {
  const v = app.version;
  if (!v) return el("p", { class: "note" }, "No version recorded yet (the app records its topology at its first start).");
  const head = el("p", { class: "version" },
    "Topology ", el("span", { class: "mono" }, v.digest || "not recorded yet"), " · ",
    badge(v.active ? "active" : "superseded", v.active ? "ok" : "warn"), " ",
    el("span", { class: "note" }, v.why));
  if (!v.upgrades.length) return head;
  const rows = v.upgrades.map((u) => [when(u.at), u.kind, `${u.from_app} → ${u.to_app}`,
    badge(u.stage, u.stage === "done" ? "ok" : u.stage === "failed" ? "bad" : "warn"),
    u.error || (u.verify ? `verified: ${num(u.verify.expected_different + u.verify.equal)} keys, ` +
      `${num(u.verify.unexpected)} unexpected` : "") + (u.batch_base != null ? `; batches from ${u.batch_base}` : "")]);
  return el("div", {}, head, table(["When", "Upgrade", "Versions", "Stage", "Details"], rows));
}

function appDetails(app) {
  const errors = Object.entries(app.errors || {});
  return el("section", { class: "app", id: "app-" + app.application_id },
    el("h2", {}, app.application_id, " ", stateBadge(app)),
    el("p", { class: "note" }, app.status_note || "", " · spec ",
      el("span", { class: "mono" }, app.spec_path),
      app.status_url ? [" · status ", link(app.status_url, app.status_url)] : ""),
    errors.length ? el("ul", { class: "error" }, errors.map(([k, v]) => el("li", {}, `${k}: ${v}`))) : "",
    app.error ? el("p", { class: "error" }, "Last error: " + app.error) : "",
    el("h3", {}, "Supervision"), supervisionSection(app),
    el("h3", {}, "Version"), versionSection(app),
    el("h3", {}, "Tasks and stores"), storesSection(app),
    el("h3", {}, "Snapshots"), snapshotsSection(app),
    el("h3", {}, "Restore drills"), drillsSection(app),
    el("h3", {}, "Changelog audits"), auditsSection(app));
}

async function load() {
  const error = document.getElementById("error");
  try {
    const resp = await fetch("api/overview", { credentials: "same-origin" });
    if (resp.status === 401 || resp.status === 403) {
      throw new Error(`not allowed (HTTP ${resp.status}): log in to Airflow first`);
    }
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      throw new Error(`HTTP ${resp.status}` + (body.detail ? ": " + body.detail : ""));
    }
    const data = await resp.json();
    document.querySelector("#apps tbody").replaceChildren(...data.apps.map(appRow));
    document.getElementById("details").replaceChildren(...data.apps.map(appDetails));
    document.getElementById("updated").textContent =
      `${data.apps.length} app(s) · updated ${new Date(data.generated_at * 1000).toLocaleString()}`;
    error.hidden = true;
  } catch (exc) {
    error.textContent = "Could not load the overview: " + exc.message;
    error.hidden = false;
  }
}

document.getElementById("refresh").addEventListener("click", load);
setInterval(() => { if (document.getElementById("auto").checked) load(); }, REFRESH_MS);
load();
