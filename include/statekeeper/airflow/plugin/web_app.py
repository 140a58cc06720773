"""The State stores FastAPI app, mounted by Airflow's api-server at :data:`URL_PREFIX`.

Routes (all ``GET``):

- ``/`` — the page (HTML; its CSS and JS from ``/static/<file>``);
- ``/api/overview`` — every app's overview (:func:`statekeeper.ops.overview.gather_overview`)
  with the drills' report and Data Docs URLs added;
- ``/api/apps/{app}`` — one app's overview;
- ``/drills/{app}/{drill_id}/{path}`` — a file of that drill's report directory (report.html,
  record.json, data_docs/...), as the drill history records the directory.

Each app of the overview carries ``supervision``: what the supervising DAG knows (its
condition, restarts within the window with the last reason and time, relaunches after
intended stops, uptime, FAILED with the remedy), from the supervision record's copy beside
the app's status file (:mod:`statekeeper.airflow.supervision.summary`).

Path parameters are names and relative file paths: one holding a NUL, another control
character or bytes that are not UTF-8 (decoded to U+FFFD) names nothing here, so it is
answered 404 before any file system call (which would raise on a NUL).

Airflow mounts plugin apps without its auth, so the whole app depends on Airflow's own check
(:func:`airflow.api_fastapi.core_api.security.requires_access_view` for the ``PLUGINS``
view): the user comes from a Bearer token or the UI's ``_token`` cookie, and a request
without one is refused (401, 403 for a bad token or a user without the view). The OpenAPI
and docs routes are off, so no route answers without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

from statekeeper.airflow.plugin.links import URL_PREFIX, drill_report_path
from statekeeper.errors import ConfigError

__all__ = ["EXTERNAL_VIEW", "URL_PREFIX", "create_app", "fastapi_app_entry"]

STATIC = Path(__file__).resolve().parent / "static"
#: The page's own files, the only ones ``/static`` serves.
STATIC_FILES = {
    "state_stores.css": "text/css",
    "state_stores.js": "text/javascript",
}
#: The nav entry: "State stores" in the Airflow UI's nav, rendering the page inside the UI
#: at ``/plugin/state-stores``.
EXTERNAL_VIEW = {
    "name": "State stores",
    "href": f"{URL_PREFIX}/",
    "url_route": "state-stores",
    "destination": "nav",
    "nav_top_level": True,
}

#: Returns the app spec paths to show (read per request: a new spec shows up at once).
SpecPaths = Callable[[], list[str]]


def discovered_spec_paths() -> list[str]:
    """The specs the DAGs drive (``$STATEKEEPER_SPECS_DIR``, :mod:`statekeeper.airflow.specs`)."""
    from statekeeper.airflow.specs import discover_apps

    return [target.spec_path for target in discover_apps()]


def create_app(spec_paths: SpecPaths = discovered_spec_paths) -> FastAPI:
    """The State stores app over the specs ``spec_paths()`` returns; every route requires an
    Airflow user allowed the PLUGINS view."""
    app = FastAPI(
        title="statekeeper State stores",
        dependencies=[Depends(requires_access_view(AccessView.PLUGINS))],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse((STATIC / "state_stores.html").read_text())

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        if name not in STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}")
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name])

    @app.get("/api/overview")
    def overview() -> dict[str, Any]:
        from statekeeper.ops.overview import gather_overview

        try:
            paths = spec_paths()
        except ConfigError as exc:  # e.g. no specs folder: say so on the page
            raise HTTPException(503, f"cannot list the app specs: {exc}") from None
        data = gather_overview(paths)
        for entry in data["apps"]:
            _add_links(entry)
            _add_supervision(entry)
        return data

    @app.get("/api/apps/{application_id}")
    def one_app(application_id: str) -> dict[str, Any]:
        from statekeeper.ops.overview import app_overview
        from statekeeper.ops.overview.overview import spec_of

        require_clean(application_id)
        try:
            path = spec_of(spec_paths(), application_id)
        except ConfigError as exc:
            raise HTTPException(404, str(exc)) from None
        return _add_supervision(_add_links(app_overview(path)))

    @app.get("/drills/{application_id}/{drill_id}/{file_path:path}")
    def drill_file(application_id: str, drill_id: str, file_path: str) -> FileResponse:
        from statekeeper.ops.overview import drill_report_dir

        require_clean(application_id, drill_id, file_path)
        try:
            root = drill_report_dir(spec_paths(), application_id, drill_id)
        except (ConfigError, ValueError, OSError) as exc:
            raise HTTPException(404, f"no drill {drill_id!r} of {application_id!r}") from exc
        return FileResponse(report_file(root, file_path or "report.html"))

    return app


def is_clean(text: str) -> bool:
    """Whether ``text`` can name something here: no NUL or other control character, no
    U+FFFD (bytes that were not UTF-8) and no lone surrogate."""
    return not any(
        ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or ch == "\ufffd" or 0xD800 <= ord(ch) < 0xE000
        for ch in text
    )


def require_clean(*texts: str) -> None:
    """HTTPException 404 unless every path parameter :func:`is_clean`."""
    if not all(is_clean(text) for text in texts):
        raise HTTPException(404, "no such path: it holds a NUL, control or invalid character")


def report_file(root: Path, relative: str) -> Path:
    """``relative`` inside the report directory ``root``; HTTPException 404 for a path that
    leaves it (``..``, absolute, a symlink out), names a hidden entry (the kept sandbox),
    holds a NUL, control or invalid character, or is not a file."""
    parts = PurePosixPath(relative).parts
    if (
        not parts
        or not is_clean(relative)
        or relative.startswith("/")
        or any(p in ("..", "") or p.startswith(".") for p in parts)
    ):
        raise HTTPException(404, f"no report file {relative!r}")
    try:
        base = root.resolve()
        target = base.joinpath(*parts).resolve()
        found = target.is_relative_to(base) and target.is_file()
    except (OSError, ValueError):  # too long a name, a loop of links, ...
        found = False
    if not found:
        raise HTTPException(404, f"no report file {relative!r}")
    return target


def supervision_of(spec_path: str | Path) -> dict[str, Any]:
    """The supervision summary of the app of ``spec_path`` (see
    :func:`statekeeper.airflow.supervision.summary.summarize`)."""
    from statekeeper.airflow.supervision.probe import read_status_file
    from statekeeper.airflow.supervision.process import AppProcessIdentity
    from statekeeper.airflow.supervision.summary import read_supervision_file, summarize
    from statekeeper.app.spec import load_app_spec

    spec = load_app_spec(spec_path)
    status_path = spec.resolved_settings().status_path().absolute()
    record = read_supervision_file(status_path.parent)
    identity = (record or {}).get("identity")
    alive = AppProcessIdentity.from_json(identity).alive()[0] if identity else None
    if record is not None and not identity:
        alive = False
    status, _mtime = read_status_file(status_path)
    return summarize(spec.application_id, record, status, process_alive=alive)


def _add_links(app: dict[str, Any]) -> dict[str, Any]:
    """Each drill row gets ``urls``: its report files' routes (report, Data Docs)."""
    for drill in app.get("drills") or []:
        drill["urls"] = {
            name: drill_report_path(app["application_id"], drill["drill_id"], rel)
            for name, rel in (drill.get("files") or {}).items()
        }
    return app


def _add_supervision(app: dict[str, Any]) -> dict[str, Any]:
    """The app gets ``supervision`` (None, and an ``errors`` entry, when it cannot be read)."""
    if (app.get("errors") or {}).get("spec"):  # already one broken row
        app["supervision"] = None
        return app
    try:
        app["supervision"] = supervision_of(app["spec_path"])
    except Exception as exc:  # shown on the page, like the overview's other sections
        app["supervision"] = None
        app.setdefault("errors", {})["supervision"] = f"{type(exc).__name__}: {exc}"
    return app


def fastapi_app_entry() -> dict[str, Any]:
    """The plugin's ``fastapi_apps`` entry."""
    return {"app": create_app(), "url_prefix": URL_PREFIX, "name": "statekeeper State stores"}
