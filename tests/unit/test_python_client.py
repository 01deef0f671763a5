"""The Python client (clients/python) without a server: retries and their Idempotency-Key, typed errors,
polling a pending completion, paging the event feed, and webhook signatures."""

from __future__ import annotations

import json

import httpx
import pytest
from nexum_client import BadRequest, ConnectionFailed, Forbidden, Nexum, Unavailable
from nexum_client.webhooks import InvalidSignature, sign, verify

ITEM = {"id": "i-1", "kind": "fact", "text": "t", "trust_class": "agent_reported", "position": 7}


def client_for(handler, **kwargs) -> tuple[Nexum, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request, len(seen))

    client = Nexum(
        "http://nexum.test", "tok", transport=httpx.MockTransport(record), sleep=lambda s: None, **kwargs
    )
    return client, seen


def error(status: int, code: str, field: str | None = None) -> httpx.Response:
    body = {"error": {"code": code, "message": code, "field": field, "details": {}, "request_id": "r-1"}}
    return httpx.Response(status, json=body)


def test_a_post_is_retried_with_the_same_idempotency_key_after_a_dropped_connection():
    def handler(request, count):
        if count == 1:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(201, json=ITEM)

    client, seen = client_for(handler)
    item = client.record_fact("t", task_id="task-1")
    assert item.id == "i-1" and len(seen) == 2
    keys = {request.headers["Idempotency-Key"] for request in seen}
    assert len(keys) == 1 and keys != {""}
    assert seen[0].headers["Authorization"] == "Bearer tok"
    assert json.loads(seen[1].content) == {"text": "t"}  # absent options are not sent


def test_each_call_gets_its_own_key_and_a_named_key_is_sent_as_given():
    client, seen = client_for(lambda request, count: httpx.Response(201, json=ITEM))
    client.record_progress("a", task_id="t")
    client.record_progress("a", task_id="t")
    client.request("POST", "tasks/t/progress", json={"text": "a"}, idempotency_key="mine")
    keys = [request.headers["Idempotency-Key"] for request in seen]
    assert keys[0] != keys[1] and keys[2] == "mine"


def test_reads_after_a_write_carry_its_position_so_a_replica_serves_them_only_once_it_has_it():
    task = {"id": "t", "goal_id": "g", "key": "k", "objective": "o", "state": "ready", "version": 1}
    positions = {2: "12", 3: "9"}  # the answers to the writes, by request

    def handler(request, count):
        if request.method == "GET":
            return httpx.Response(200, json=task)
        return httpx.Response(201, json=ITEM, headers={"Nexum-Position": positions[count]})

    client, seen = client_for(handler)
    client.task("t")
    client.record_fact("t", task_id="t")
    client.record_fact("u", task_id="t")  # an older position never lowers the one remembered
    client.task("t")
    assert [request.headers.get("Nexum-Min-Position") for request in seen] == [None, None, "12", "12"]

    client, seen = client_for(handler, read_your_writes=False)
    client.task("t")
    client.record_fact("t", task_id="t")
    client.task("t")
    assert [request.headers.get("Nexum-Min-Position") for request in seen] == [None, None, None]


def test_503_is_retried_and_errors_are_typed_with_code_field_and_request_id():
    answers = [error(503, "broker_unavailable"), error(400, "unknown_field", "colour")]
    client, seen = client_for(lambda request, count: answers[count - 1])
    with pytest.raises(BadRequest) as raised:
        client.record_fact("t", goal_id="g")
    assert (raised.value.code, raised.value.field, raised.value.request_id) == (
        "unknown_field",
        "colour",
        "r-1",
    )
    assert raised.value.status == 400 and len(seen) == 2


def test_errors_that_are_not_transient_are_raised_at_once():
    client, seen = client_for(lambda request, count: error(403, "forbidden", "contracts"))
    with pytest.raises(Forbidden) as raised:
        client.create_goal("g", tasks=[{"key": "a", "objective": "a"}], contracts={})
    assert raised.value.field == "contracts" and len(seen) == 1


def test_retries_end_in_a_typed_error():
    client, seen = client_for(lambda request, count: error(503, "unavailable"))
    with pytest.raises(Unavailable):
        client.task("t")
    assert len(seen) == 4

    def refuse(request, count):
        raise httpx.ConnectError("refused", request=request)

    client, seen = client_for(refuse)
    with pytest.raises(ConnectionFailed) as raised:
        client.task("t")
    assert raised.value.code == "connection_failed" and len(seen) == 4


def test_complete_polls_a_pending_request_until_the_gate_decides():
    pending = {"request_id": "c-1", "task_id": "t", "status": "pending", "outcome": "pending", "reason": ""}
    decided = {**pending, "status": "decided", "outcome": "failed", "reason": "check x failed"}

    def handler(request, count):
        if request.method == "POST":
            body = {"outcome": "pending", "reason": "", "task": {}, "completion": pending, "poll": "/c"}
            return httpx.Response(202, json=body)
        return httpx.Response(200, json=pending if count < 4 else decided)

    client, seen = client_for(handler)
    completion = client.complete("t", "done")
    assert (completion.outcome, completion.reason, completion.request_id) == (
        "failed",
        "check x failed",
        "c-1",
    )
    assert [request.url.path for request in seen][1:] == ["/api/v1/completions/c-1"] * 3


def test_a_completion_already_pending_is_followed():
    decided = {"request_id": "c-9", "task_id": "t", "status": "decided", "outcome": "completed", "reason": ""}

    def handler(request, count):
        if request.method == "POST":
            return httpx.Response(
                409,
                json={
                    "error": {"code": "completion_pending", "message": "m", "details": {"request_id": "c-9"}}
                },
            )
        return httpx.Response(200, json=decided)

    client, _ = client_for(handler)
    assert client.complete("t").outcome == "completed"


def test_the_event_feed_follows_the_cursor_page_by_page():
    log = [
        {"position": n, "stream_id": "s", "version": n, "type": "T", "data": {}, "metadata": {}}
        for n in range(1, 6)
    ]

    def handler(request, count):
        after = int(request.url.params.get("cursor", 0))
        limit = int(request.url.params["limit"])
        page = [event for event in log if event["position"] > after][:limit]
        more = bool(page) and page[-1]["position"] < log[-1]["position"]
        return httpx.Response(
            200, json={"results": page, "next_cursor": str(page[-1]["position"]) if more else None}
        )

    client, _ = client_for(handler)
    assert [event.position for event in client.events(limit=2)] == [1, 2, 3, 4, 5]
    assert [event.position for event in client.events(cursor=3, limit=2)] == [4, 5]
    followed = client.events(cursor=5, follow=True, poll_interval_s=0, idle_timeout_s=0)
    assert list(followed) == []


def test_webhook_signatures_verify_only_the_exact_body_within_the_tolerance():
    body = b'{"position": 3}'
    header = sign("whsec_x", body, 1_000)
    assert verify("whsec_x", body, header, now=1_010) == 1_000
    for secret, payload, given, now in [
        ("whsec_y", body, header, 1_010),
        ("whsec_x", body + b" ", header, 1_010),
        ("whsec_x", body, header, 2_000),
        ("whsec_x", body, "v1=abc", 1_010),
        ("whsec_x", body, None, 1_010),
    ]:
        with pytest.raises(InvalidSignature):
            verify(secret, payload, given, now=now)


def test_the_excluded_list_of_a_context_is_followed_page_by_page():
    records = [
        {"kind": "fact", "id": f"f{n}", "tokens_needed": 9, "tokens_left": 0, "reason": "r"} for n in range(5)
    ]

    def handler(request, count):
        assert request.url.path == "/api/v1/contexts/d1/excluded"
        start, limit = int(request.url.params.get("cursor", 0)), int(request.url.params["limit"])
        more = start + limit < len(records)
        return httpx.Response(
            200,
            json={
                "results": records[start : start + limit],
                "next_cursor": str(start + limit) if more else None,
            },
        )

    client, seen = client_for(handler)
    assert list(client.excluded("d1", limit=2)) == records and len(seen) == 3


def test_items_are_listed_page_by_page_with_their_filters():
    pages = {None: ([dict(ITEM, id="i-1")], "7"), "7": ([dict(ITEM, id="i-2")], None)}

    def handler(request, count):
        assert request.url.path == "/api/v1/items"
        params = dict(request.url.params)
        cursor = params.pop("cursor", None)
        assert params == {"task": "t-1", "kind": "fact", "current": "true", "limit": "1"}
        results, next_cursor = pages[cursor]
        return httpx.Response(200, json={"results": results, "next_cursor": next_cursor})

    client, seen = client_for(handler)
    items = list(client.items(task_id="t-1", kind="fact", current=True, own=False, limit=1))
    assert [item.id for item in items] == ["i-1", "i-2"] and len(seen) == 2


def test_every_write_carries_one_key_across_its_retries_and_reads_carry_none():
    def handler(request, count):
        return error(503, "database_unavailable") if count % 2 else httpx.Response(200, json={})

    client, seen = client_for(handler)
    for method in ("PUT", "PATCH", "DELETE", "POST"):
        client.request(method, "tasks/t/contract", json={})
    client.request("GET", "tasks/t")
    writes = [request.headers.get("Idempotency-Key") for request in seen[:8]]
    assert all(writes) and [writes[i] == writes[i + 1] for i in range(0, 8, 2)] == [True] * 4
    assert len(set(writes)) == 4  # one key per call, the same on its retry
    assert "Idempotency-Key" not in seen[8].headers


def test_a_503_waits_as_long_as_the_servers_retry_after_within_the_bound():
    slept: list[float] = []
    answers = iter(
        [error(503, "database_unavailable"), error(503, "database_unavailable"), httpx.Response(200, json={})]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        response = next(answers)
        response.headers["Retry-After"] = "2" if response.status_code == 503 else "0"
        return response

    client = Nexum(
        "http://nexum.test",
        "tok",
        transport=httpx.MockTransport(handler),
        sleep=slept.append,
        backoff_max_s=8,
    )
    client.request("GET", "tasks")
    assert slept == [2.0, 2.0]

    def unavailable_for_long(request: httpx.Request) -> httpx.Response:
        response = error(503, "database_unavailable")
        response.headers["Retry-After"] = "600"
        return response

    unavailable = httpx.MockTransport(unavailable_for_long)
    bounded = Nexum(
        "http://nexum.test", "tok", transport=unavailable, sleep=slept.append, backoff_max_s=1.5, retries=2
    )
    with pytest.raises(Unavailable):
        bounded.request("GET", "tasks")
    assert slept[2:] == [1.5, 1.5]  # never longer than backoff_max_s, and given up after the retries


def test_usage_is_reported_under_one_key_and_totals_are_read_with_their_filter():
    def handler(request, count):
        if request.method == "POST":
            assert request.url.path == "/api/v1/contexts/d1/usage"
            body = json.loads(request.content)
            assert body == {"prompt_tokens": 10, "completion_tokens": 2, "provider": "p", "model": "m"}
            return httpx.Response(201, json={"usage_id": "u-1", **body, "drift": 0.25})
        assert request.url.path == "/api/v1/usage" and dict(request.url.params) == {"goal": "g-1"}
        return httpx.Response(200, json={"scope": "goal", "scope_id": "g-1", "totals": {}, "by_card": []})

    client, seen = client_for(handler)
    reported = client.report_usage("d1", prompt_tokens=10, completion_tokens=2, provider="p", model="m")
    assert reported["drift"] == 0.25 and seen[0].headers["Idempotency-Key"]
    assert client.usage(goal_id="g-1")["scope"] == "goal"


def test_a_fork_is_posted_with_its_position_and_reason_and_read_back():
    answer = {
        "goal_id": "g-2",
        "task_id": "t-2",
        "source_goal_id": "g-1",
        "source_task_id": "t-1",
        "at_position": 41,
        "task_ids": {"t-1": "t-2"},
        "carried_items": 12,
        "replayed": False,
    }
    client, seen = client_for(lambda request, count: httpx.Response(201, json=answer))
    fork = client.fork_task("t-1", at_position=41, reason="retry", idempotency_key="k-1")
    assert (fork.goal_id, fork.task_id, fork.task_ids, fork.carried_items) == (
        "g-2",
        "t-2",
        {"t-1": "t-2"},
        12,
    )
    assert seen[0].url.path == "/api/v1/tasks/t-1/fork" and seen[0].headers["Idempotency-Key"] == "k-1"
    assert json.loads(seen[0].content) == {"at_position": 41, "reason": "retry"}
    goal_fork = client.fork_goal("g-1", at_position=41, reason="side by side")
    assert seen[1].url.path == "/api/v1/goals/g-1/fork" and goal_fork.source_goal_id == "g-1"
