"""page_views: views per user, per-minute bursts — the README's complete example app.

spark-submit spark_apps/page_views/app.py   # needs topic page-views (key user, JSON value)
"""

from statekeeper import (
    Materialized,
    StatekeeperApp,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    load_settings,
)


def build_topology(burst: int = 100):
    builder = StreamsBuilder()
    views = builder.stream("page-views", key_serde="str", value_serde="json")
    valid = views.filter(lambda user, view: isinstance(view, dict) and "url" in view)
    valid.group_by_key().count(Materialized.as_("views-per-user").with_serdes("str", "int"))
    per_minute = (
        valid.group_by_key()
        .windowed_by(TimeWindows.tumbling(60_000, grace_ms=5_000))
        .count(Materialized.as_("views-per-minute").with_retention(6 * 3600_000))
        .suppress(Suppressed.until_window_closes())
    )
    (
        per_minute.to_stream()
        .filter(lambda window, n: n > burst)
        .map(lambda window, n: (window.key, {"minute": window.start, "views": n}))
        .to("page-view-bursts", key_serde="str", value_serde="json")
    )
    return builder.build()


if __name__ == "__main__":
    settings = load_settings(application_id="page-views")  # STATEKEEPER_* env overrides
    StatekeeperApp(build_topology(), settings).run()  # SIGTERM: finish batch, commit, stop
