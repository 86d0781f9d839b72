"""The runs list's free-text search and its filters as choices: the text the run writer stores
for a run (its prompt's, once, when it stores the run; its reply's, handed over at the close),
what the search and each new filter keep, and the choices the filters offer."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import orjson
import pytest

from accounts.models import Organization
from dashboard.forms import RunFilterForm
from dashboard.selectors.catalog import end_user_names, error_codes
from dashboard.selectors.runs import RunFilters, filtered_runs, runs_page
from gateway.generation.reply import Generation
from telemetry.models import Run
from telemetry.store.batches import write_batch
from telemetry.store.fields import RunFields
from telemetry.store.items import RunClosed, RunOpened
from telemetry.store.search_text import PROMPT_TEXT_LIMIT, capped, prompt_text
from tests.support.recording import SinkRun, capturing_sink
from tests.support.runs import query_plan

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 5, 6, 10, 0, tzinfo=UTC)
_ids = itertools.count(1)


@pytest.fixture
def org() -> Organization:
    return Organization.objects.create(name="search-org")


def stored_run(
    org: Organization,
    *,
    messages: list[dict[str, object]] | None = None,
    reply: str = "",
    seconds: int = 0,
    close: bool = True,
    **outcome: object,
) -> str:
    """A run written as the gateway writes one: opened with its body, closed with its reply."""
    run_id = f"chatcmpl-{next(_ids):024x}"
    body = orjson.dumps({"messages": messages or [{"role": "user", "content": "hello"}]})
    opened: RunFields = {
        "id": run_id,
        "organization_id": org.pk,
        "accepted_at": T0 + timedelta(seconds=seconds),
        "status": Run.Status.IN_PROGRESS,
        "request_body": body,
    }
    write_batch([RunOpened(opened)])
    if close:
        closed: dict[str, object] = {
            "status": Run.Status.COMPLETED,
            "finished_at": T0 + timedelta(seconds=seconds, milliseconds=500),
            "reply_text": reply,
            **outcome,
        }
        write_batch([RunClosed(run_id, closed)])  # type: ignore[arg-type]
    return run_id


def found(org: Organization, **filters: object) -> set[str]:
    return {r["id"] for r in runs_page(RunFilters(organization_id=org.pk, **filters)).runs}  # type: ignore[arg-type]


def test_the_writer_stores_the_text_of_every_message_once_per_run(org: Organization) -> None:
    run_id = stored_run(
        org,
        messages=[
            {"role": "system", "content": "You answer about lighthouses."},
            {"role": "user", "content": [{"type": "text", "text": "Where is Fastnet?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"rock": "Fastnet"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "51.39N 9.60W"},
        ],
        reply="Off the coast of County Cork.",
    )
    run = Run.objects.get(pk=run_id)
    assert run.prompt_text == (
        'You answer about lighthouses.\nWhere is Fastnet?\n{"rock": "Fastnet"}\n51.39N 9.60W'
    )
    assert run.reply_text == "Off the coast of County Cork."


def test_a_long_prompt_keeps_its_start_and_its_end() -> None:
    text = prompt_text(
        orjson.dumps(
            {
                "system": "begin-marker " + "filler " * 20_000,
                "messages": [{"role": "user", "content": "the latest question end-marker"}],
            }
        )
    )
    assert len(text) == PROMPT_TEXT_LIMIT + 1
    assert text.startswith("begin-marker")
    assert text.endswith("end-marker")
    assert prompt_text(b"not json {") == ""
    assert prompt_text(b"[1, 2]") == ""
    assert capped("short", 10) == "short"


def test_the_reply_text_joins_text_reasoning_and_tool_calls_a_piece_a_line() -> None:
    generation = Generation()
    generation.add_delta({"content": "Checking.", "reasoning_content": "think first"})
    generation.add_delta(
        {"tool_calls": [{"index": 0, "function": {"name": "lookup", "arguments": "{}"}}]}
    )
    assert generation.searchable_text() == "Checking.\nthink first\nlookup\n{}"
    plain = Generation()
    plain.add_delta({"content": "Just text."})
    assert plain.searchable_text() == "Just text."


def test_search_finds_a_word_of_the_prompt_or_of_the_reply(org: Organization) -> None:
    in_prompt = stored_run(
        org, messages=[{"role": "user", "content": "Tell me about Zanzibar"}], reply="An isle."
    )
    in_reply = stored_run(
        org,
        messages=[{"role": "user", "content": "Name a spice island"}],
        reply="Zanzibar, off Tanzania.",
        seconds=1,
    )
    stored_run(org, messages=[{"role": "user", "content": "Something else"}], seconds=2)

    assert found(org, search="zanzibar") == {in_prompt, in_reply}
    assert found(org, search="tanzania") == {in_reply}
    assert found(org, search="ZANZIBAR island") == {in_reply}  # every word, any case
    assert found(org, search="madagascar") == set()


def test_search_skips_runs_in_flight(org: Organization) -> None:
    stored_run(org, messages=[{"role": "user", "content": "unfinished quokka"}], close=False)
    done = stored_run(org, messages=[{"role": "user", "content": "finished quokka"}], seconds=1)
    assert found(org, search="quokka") == {done}


@pytest.mark.parametrize("keep_content", [True, False])
def test_a_metadata_organization_s_runs_have_no_text_to_search(
    org: Organization, keep_content: bool
) -> None:
    sink, writer = capturing_sink()
    run = SinkRun(f"chatcmpl-{next(_ids):024x}", org.pk, keeps_content=keep_content)
    decided: RunFields = {
        "id": run.run_id,
        "accepted_at": T0,
        "organization_id": org.pk,
        "request_body": orjson.dumps({"messages": [{"role": "user", "content": "secret plans"}]}),
    }
    sink.opened(run, decided, [])
    outcome: RunFields = {"status": Run.Status.COMPLETED, "reply_text": "classified answer"}
    sink.closed(
        run,
        fields={**decided, **outcome},
        outcome=outcome,
        opened=True,
        images=[],
        chunks=[],
        seconds=0.1,
        first_token_seconds=None,
        replica_name=None,
    )
    write_batch(writer.items)

    stored = Run.objects.get(pk=run.run_id)
    if keep_content:
        assert (stored.prompt_text, stored.reply_text) == ("secret plans", "classified answer")
        assert found(org, search="secret") == found(org, search="classified") == {stored.pk}
    else:
        assert (stored.prompt_text, stored.reply_text) == ("", "")
        assert found(org, search="secret") == found(org, search="classified") == set()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("filters", "index"),
    [
        (RunFilters(search="lighthouse"), "run_search"),
        (RunFilters(error_code="overloaded"), "run_errors"),
        (RunFilters(cost_min=Decimal("0.10")), "run_costly"),
        (RunFilters(latency_min=timedelta(seconds=5)), "run_latency"),
        (RunFilters(status="stopped"), "run_not_completed"),
        (RunFilters(status="in_progress"), "run_not_completed"),
    ],
)
def test_postgres_finds_rare_runs_through_their_indexes(filters: RunFilters, index: str) -> None:
    """The search's GIN index, and the partial indexes of the filters that look for few runs:
    the query must say what they cover exactly as they do, or the planner reads every run."""
    plan = query_plan(
        filtered_runs(filters).order_by("-accepted_at", "-id").values("id")[:51],
        ordered_index_scans=False,
    )
    assert index in plan, plan


def test_error_code_cost_and_latency_filters(org: Organization) -> None:
    failed = stored_run(
        org,
        status=Run.Status.FAILED,
        error_code="upstream_timeout",
        cost=Decimal("0.0000005"),
    )
    free = stored_run(org, seconds=1, cost=Decimal("0"))
    dear = stored_run(org, seconds=2, cost=Decimal("0.25"))
    slow = stored_run(
        org, seconds=3, cost=Decimal("0.002"), finished_at=T0 + timedelta(seconds=3 + 7)
    )

    assert found(org, error_code="upstream_timeout") == {failed}
    assert found(org, cost_max=Decimal("0.000000001")) == {free}
    assert found(org, cost_min=Decimal("0.10")) == {dear}
    assert found(org, cost_min=Decimal("0.001"), cost_max=Decimal("0.01")) == {slow}
    assert found(org, latency_min=timedelta(seconds=5)) == {slow}
    assert found(org, latency_max=timedelta(seconds=1)) == {failed, free, dear}


def test_the_form_turns_named_ranges_and_choices_into_filters() -> None:
    from django.http import QueryDict

    form = RunFilterForm(
        QueryDict("q=+lighthouse+keeper+&cost=0.01-up&latency=5s-up&error_code=overloaded"),
        organizations=[],
        keys=[],
        models=["m-a"],
        deployments=["d-a"],
        end_users=["ann"],
        error_codes=error_codes(),
    )
    filters = form.filters()
    assert form.errors == {}
    assert filters.search == "lighthouse keeper"
    assert (filters.cost_min, filters.cost_max) == (Decimal("0.01"), None)
    assert (filters.latency_min, filters.latency_max) == (timedelta(seconds=5), None)
    assert filters.error_code == "overloaded"


def test_the_form_refuses_a_search_without_words_and_keeps_the_other_filters() -> None:
    from django.http import QueryDict

    form = RunFilterForm(
        QueryDict("q=%21%21%21&model=gone-model&end_user=zed&cost=bogus"),
        organizations=[],
        keys=[],
        models=["m-a"],
        deployments=[],
        end_users=["ann"],
        error_codes=[],
    )
    filters = form.filters()
    assert set(form.errors) == {"q", "cost"}
    assert filters.search == ""
    # A value not among the choices (a removed model, an end user past the list) still filters.
    assert (filters.model, filters.end_user) == ("gone-model", "zed")
    assert ("gone-model", "gone-model") in form.fields["model"].choices  # type: ignore[attr-defined]


def test_end_user_choices_are_every_distinct_name_in_order_up_to_the_limit(
    org: Organization,
) -> None:
    for i, name in enumerate(["carol", "ann", "bob", "ann", "", "bob"]):
        stored_run(org, seconds=i, end_user=name)
    names = end_user_names()
    assert [n for n in names if n in {"ann", "bob", "carol"}] == ["ann", "bob", "carol"]
    assert "" not in names
    assert len(end_user_names(limit=2)) == 2


def test_error_code_choices_include_the_errors_and_runs_cut_short() -> None:
    codes = error_codes()
    for code in ("invalid_parameter", "upstream_timeout", "overloaded", "client_disconnected"):
        assert code in codes
    assert "worker_interrupted" in codes and "worker_shutdown" in codes
    assert codes == sorted(set(codes))
