from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from core.ids import RUN_ID_PATTERN
from dashboard.views import (
    assets,
    audit,
    budgets,
    keys,
    live,
    organizations,
    overview,
    playground,
    rerun,
    runs,
    sessions,
    spend,
)


class RunIdConverter:
    """A run id in a dashboard URL: one that could name no run (a NUL, a control character)
    does not match, so it is a 404 and never a lookup."""

    regex = RUN_ID_PATTERN

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(RunIdConverter, "run_id")

app_name = "dashboard"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="dashboard/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", overview.overview, name="overview"),
    path("live/", live.live, name="live"),
    path("live/generations.json", live.live_generations, name="live-generations"),
    path("runs/", runs.runs, name="runs"),
    path("runs/<run_id:run_id>/", runs.run, name="run"),
    path("runs/<run_id:run_id>/stop", live.stop_generation, name="run-stop"),
    path("runs/<run_id:run_id>/replay", runs.run_replay, name="run-replay"),
    path("runs/<run_id:run_id>/download", runs.run_download, name="run-download"),
    path("runs/<run_id:run_id>/images/<int:position>", runs.run_image, name="run-image"),
    path("runs/<run_id:run_id>/rerun", rerun.run_rerun, name="run-rerun"),
    path(
        "runs/<run_id:run_id>/compare/<run_id:other_id>/",
        rerun.run_compare,
        name="run-compare",
    ),
    path("playground/", playground.playground, name="playground"),
    path("playground/send", playground.playground_send, name="playground-send"),
    path("sessions/", sessions.sessions, name="sessions"),
    path("spend/", spend.spend, name="spend"),
    path("audit/", audit.audit, name="audit"),
    path("budgets/", budgets.budgets, name="budgets"),
    path("keys/", keys.keys, name="keys"),
    path("keys/<int:key_id>/rename", keys.key_rename_view, name="key-rename"),
    path("keys/<int:key_id>/revoke", keys.key_revoke_view, name="key-revoke"),
    path("organizations/", organizations.organizations, name="organizations"),
    path(
        "organizations/<int:organization_id>/finish-chunk-delta",
        organizations.organization_finish_chunk_delta,
        name="organization-finish-chunk-delta",
    ),
    path("assets/<path:path>", assets.asset, name="asset"),
]
