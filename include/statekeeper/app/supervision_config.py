"""The supervision thresholds of an app: the spec's ``supervision:`` mapping, validated when
the spec loads, and the supervising DAG's settings (see
:mod:`statekeeper.airflow.supervision.policy`, which re-exports :class:`SupervisionConfig`).
Pure pydantic, no Airflow: the spec loader imports it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SupervisionConfig(BaseModel):
    """Thresholds of one app's supervision (seconds unless named otherwise)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check_interval_s: float = Field(10.0, gt=0, description="Seconds between health checks")
    watch_period_s: float = Field(
        300.0,
        gt=0,
        description="How long one reconcile step watches the app, relaunches included, before "
        "it ends; the DAG's schedule interval (5 min), so the next scheduled run, waiting "
        "behind this one (max_active_runs=1), starts watching as this one ends: no gap",
    )
    startup_timeout_s: float = Field(
        180.0, gt=0, description="A launched app must publish its status within this"
    )
    stall_timeout_s: float = Field(
        120.0,
        gt=0,
        description="A RUNNING app whose batch counter does not advance this long while its "
        "sources have records pending is stalled",
    )
    heartbeat_timeout_s: float = Field(
        60.0,
        gt=0,
        description="An app whose status endpoint does not answer and whose status file is "
        "not rewritten this long is unresponsive (the driver rewrites it every ~2 s)",
    )
    lag_growth_checks: int = Field(
        12, ge=0, description="Source lag growing for this many consecutive checks; 0: off"
    )
    rebalance_timeout_s: float = Field(
        300.0,
        gt=0,
        description="An app still CREATED/REBALANCING this long (by its status' state_since) "
        "while input is pending or its source lag is still unknown, with no restore progress "
        "meanwhile, is hung in start-up (an idle app with nothing pending is not)",
    )
    restore_timeout_s: float = Field(
        300.0,
        gt=0,
        description="An app RESTORING whose restore progress (records restored by any task) "
        "and batch counter do not advance this long is hung in its restore",
    )
    max_restarts: int = Field(
        5,
        ge=0,
        description="Restarts allowed within restart_window_s; one more failure marks the app "
        "FAILED (not restarted until an operator asks: action=restart or redeploy)",
    )
    restart_window_s: float = Field(3600.0, gt=0, description="Window the restarts are counted in")
    backoff_base_s: float = Field(10.0, ge=0, description="Delay before the first restart")
    backoff_factor: float = Field(2.0, ge=1, description="Each further restart waits this × more")
    backoff_max_s: float = Field(300.0, ge=0, description="Cap of the restart delay")
    stop_timeout_s: float = Field(
        60.0, gt=0, description="A graceful stop (SIGTERM) waits this long, then kill -9"
    )
    status_timeout_s: float = Field(2.0, gt=0, description="Timeout of one GET /status")
    restarted_step_fails: bool = Field(
        True,
        description="A supervising step in which the app had to be restarted (an unplanned "
        "exit) ends failed, so the restart shows in the grid, although the app runs again; "
        "false: it succeeds (the restart is still in its log and XCom)",
    )
    stop_signal_target: Literal["spark-submit", "driver"] = Field(
        "spark-submit",
        description="Who gets a graceful stop's SIGTERM: the launched spark-submit (its JVM "
        "stop hook has the Python driver finish and commit first) or the Python driver itself",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SupervisionConfig:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(
                f"backoff_max_s ({self.backoff_max_s}) is below backoff_base_s "
                f"({self.backoff_base_s})"
            )
        if self.watch_period_s < self.check_interval_s:
            raise ValueError(
                f"watch_period_s ({self.watch_period_s}) is below check_interval_s "
                f"({self.check_interval_s}): no check would run"
            )
        return self
