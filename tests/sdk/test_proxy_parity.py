"""Parity: the official SDK sees the same thing direct at the upstream and through memgate.

Each test makes the same call twice, `direct` (at mock-upstream) and `proxied` (at memgate in
front of it), and compares what a user of the SDK gets: parsed messages, stream events, exception
classes, status codes and headers. Each test also checks absolute facts (what the mock is
documented to answer, and what the mock recorded of memgate's request), so that a memgate which
answered by itself, or failed both ways alike, would not pass.

The mock's answers are deterministic (the message id hashes the request body), but each answer
carries its own `request-id: req_mock_<seq>`, which error bodies repeat as `request_id`; those are
compared against the mock's own record instead of between the two calls.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import anthropic
import pytest

from conftest import API_KEY, MockLog

MODEL = "claude-mock-1"  # the model the mock lists; no SDK deprecation warning
MAX_TOKENS = 256
USER_TEXT = "What is the capital of France? Answer in one word, please."
MESSAGES = [{"role": "user", "content": USER_TEXT}]
SYSTEM = [{"type": "text", "text": "You are a terse geography assistant."}]
TOOLS = [
    {
        "name": "lookup_weather",
        "description": "Current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
    {
        "name": "lookup_time",
        "description": "Current local time for a city.",
        "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
    },
]


def params(model: str = MODEL, **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": MAX_TOKENS, "messages": MESSAGES, **extra}


def only_request(log: MockLog, path: str) -> dict[str, Any]:
    """The one request the mock received since the last clear, which must be at `path`."""
    received = log.requests()
    assert len(received) == 1, f"expected exactly one upstream request, the mock saw {received}"
    entry = received[0]
    assert entry["path"] == path, entry
    return entry


def both(
    log: MockLog, call: Callable[[anthropic.Anthropic], Any], direct: Any, proxied: Any
) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """Run `call` direct, then through memgate; return both results and the mock's record of each.

    A result is the return value, or the `anthropic.APIError` raised.
    """

    def run(client: anthropic.Anthropic) -> tuple[Any, dict[str, Any]]:
        log.clear()
        try:
            result: Any = call(client)
        except anthropic.APIError as err:
            result = err
        received = log.requests()
        assert len(received) == 1, (
            f"expected exactly one upstream request per call (max_retries=0), the mock saw {received}"
        )
        return result, received[0]

    direct_result, direct_entry = run(direct)
    proxied_result, proxied_entry = run(proxied)
    return direct_result, proxied_result, direct_entry, proxied_entry


def assert_same_upstream_request(direct_entry: dict[str, Any], proxied_entry: dict[str, Any]) -> None:
    """memgate forwarded what the SDK sent: same method, path, query and JSON body."""
    for key in ("method", "path", "query", "body"):
        assert proxied_entry[key] == direct_entry[key], (
            f"upstream request differs in {key!r}: direct {direct_entry[key]!r}, "
            f"via memgate {proxied_entry[key]!r}"
        )


def without_request_id(body: Any) -> Any:
    """An error body with its per-answer `request_id` taken out, for comparison."""
    if isinstance(body, dict):
        return {k: without_request_id(v) for k, v in body.items() if k != "request_id"}
    return body


# --- non-streaming -----------------------------------------------------------------------------


def test_messages_create_same_message(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(
        mock_log, lambda c: c.messages.create(**params(system=SYSTEM)), direct, proxied
    )
    assert isinstance(d, anthropic.types.Message), d
    assert isinstance(p, anthropic.types.Message), p
    assert p.model_dump() == d.model_dump()
    # What the mock is documented to answer, so an empty or made-up answer cannot pass.
    assert p.id.startswith("msg_mock_")
    assert p.model == MODEL
    assert p.stop_reason == "end_turn"
    assert [block.type for block in p.content] == ["text"]
    assert p.content[0].text == f"Hello from mock-upstream (model {MODEL}). You said: {USER_TEXT[:60]}"
    assert p.usage.input_tokens > 0 and p.usage.output_tokens > 0
    assert_same_upstream_request(d_entry, p_entry)
    assert p_entry["stream"] is None


def test_messages_create_with_raw_response_carries_upstream_request_id(
    direct, proxied, mock_log
) -> None:
    d, p, d_entry, p_entry = both(
        mock_log, lambda c: c.messages.with_raw_response.create(**params()), direct, proxied
    )
    assert p.status_code == d.status_code == 200
    # The request-id a user would quote to support is the upstream's, for this very request.
    assert d.headers["request-id"] == f"req_mock_{d_entry['seq']}"
    assert p.headers["request-id"] == f"req_mock_{p_entry['seq']}"
    assert p.parse()._request_id == p.headers["request-id"]
    # The other upstream headers a client reads come back too.
    for name in ("anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining"):
        assert p.headers.get(name) == d.headers.get(name) is not None, name
    assert "anthropic-ratelimit-requests-reset" in p.headers
    assert p.headers["content-type"].startswith("application/json")
    assert p.parse().model_dump() == d.parse().model_dump()


def test_tool_use_answer(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(
        mock_log,
        lambda c: c.messages.create(**params("mock-tool-use", tools=TOOLS)),
        direct,
        proxied,
    )
    assert isinstance(p, anthropic.types.Message), p
    assert p.model_dump() == d.model_dump()
    assert p.stop_reason == "tool_use"
    assert [block.type for block in p.content] == ["text", "tool_use"]
    tool_use = p.content[1]
    assert tool_use.name == "lookup_weather"  # the first tool of the request
    assert tool_use.input == {"location": "Paris"}
    assert tool_use.id.startswith("toolu_mock_")
    assert_same_upstream_request(d_entry, p_entry)
    assert p_entry["body"]["tools"] == TOOLS


def test_count_tokens(direct, proxied, mock_log) -> None:
    call = lambda c: c.messages.count_tokens(  # noqa: E731
        model=MODEL, messages=MESSAGES, system=SYSTEM, tools=TOOLS
    )
    d, p, d_entry, p_entry = both(mock_log, call, direct, proxied)
    assert isinstance(p, anthropic.types.MessageTokensCount), p
    assert p.model_dump() == d.model_dump()
    # The mock's documented estimate: ceil(bytes of JSON of system, messages and tools / 4);
    # well above zero for this request.
    assert p.input_tokens > 50
    assert p_entry["path"] == "/v1/messages/count_tokens"
    assert_same_upstream_request(d_entry, p_entry)


def test_models_list_passes_through(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(mock_log, lambda c: c.models.list(), direct, proxied)
    assert not isinstance(p, Exception), p
    d_models = [m.model_dump() for m in d.data]
    p_models = [m.model_dump() for m in p.data]
    assert p_models == d_models
    assert len(p_models) == 1 and p_models[0]["type"] == "model"
    assert p_entry["method"] == "GET" and p_entry["path"] == "/v1/models"


# --- streaming ---------------------------------------------------------------------------------


def helper_stream(client: anthropic.Anthropic, **kwargs: Any) -> tuple[list[dict[str, Any]], Any]:
    """`client.messages.stream(...)`: every event the helper yields, and the final message."""
    with client.messages.stream(**kwargs) as stream:
        events = [event.model_dump() for event in stream]
        final = stream.get_final_message()
    return events, final


def raw_stream(client: anthropic.Anthropic, **kwargs: Any) -> list[dict[str, Any]]:
    """`client.messages.create(stream=True)`: every typed event, in order."""
    with client.messages.create(stream=True, **kwargs) as stream:
        return [event.model_dump() for event in stream]


def sse_events(client: anthropic.Anthropic, **kwargs: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """The wire events (name and JSON data), `ping`s included, read through the SDK's raw response."""
    with client.messages.with_streaming_response.create(stream=True, **kwargs) as response:
        events: list[tuple[str, Any]] = []
        name, data = None, []
        for line in response.iter_lines():
            if line == "":
                if name is not None or data:
                    events.append((name, json.loads("\n".join(data)) if data else None))
                name, data = None, []
            elif line.startswith("event:"):
                name = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].strip())
        if name is not None or data:
            events.append((name, json.loads("\n".join(data)) if data else None))
        return response, events


EXPECTED_TEXT_EVENT_TYPES = ["message_start", "content_block_start"]


def test_stream_helper_same_events(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(
        mock_log, lambda c: helper_stream(c, **params(system=SYSTEM)), direct, proxied
    )
    assert not isinstance(p, Exception), p
    d_events, d_final = d
    p_events, p_final = p
    assert [e["type"] for e in p_events] == [e["type"] for e in d_events]
    assert p_events == d_events
    assert p_final.model_dump() == d_final.model_dump()
    # Absolute: a whole answer arrived, in the documented order, split into 5 deltas (default).
    types = [e["type"] for e in p_events]
    assert types[0] == "message_start"
    assert types[-1] == "message_stop"
    assert types.count("content_block_delta") == 5
    assert "".join(e["delta"]["text"] for e in p_events if e["type"] == "content_block_delta") == (
        f"Hello from mock-upstream (model {MODEL}). You said: {USER_TEXT[:60]}"
    )
    assert p_final.id.startswith("msg_mock_") and p_final.stop_reason == "end_turn"
    assert_same_upstream_request(d_entry, p_entry)
    assert p_entry["body"]["stream"] is True


def test_raw_stream_same_events(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(mock_log, lambda c: raw_stream(c, **params()), direct, proxied)
    assert not isinstance(p, Exception), p
    assert p == d
    assert [e["type"] for e in p] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert p[-2]["delta"]["stop_reason"] == "end_turn"
    assert_same_upstream_request(d_entry, p_entry)


def test_wire_events_same_including_ping(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(mock_log, lambda c: sse_events(c, **params()), direct, proxied)
    assert not isinstance(p, Exception), p
    d_response, d_events = d
    p_response, p_events = p
    assert p_response.status_code == 200
    assert p_response.headers["content-type"].startswith("text/event-stream")
    assert p_response.headers["request-id"] == f"req_mock_{p_entry['seq']}"
    assert p_events == d_events
    names = [name for name, _ in p_events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "ping" in names
    # Each event's `type` matches its SSE event name, as on the wire.
    assert all(data["type"] == name for name, data in p_events)
    # The mock finished its stream to memgate, not dropped.
    assert p_entry["stream"]["outcome"] == "completed"


def test_tool_use_stream(direct, proxied, mock_log) -> None:
    d, p, d_entry, p_entry = both(
        mock_log, lambda c: helper_stream(c, **params("mock-tool-use", tools=TOOLS)), direct, proxied
    )
    assert not isinstance(p, Exception), p
    d_events, d_final = d
    p_events, p_final = p
    assert p_events == d_events
    assert p_final.model_dump() == d_final.model_dump()
    json_deltas = [
        e for e in p_events if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert json_deltas, "the tool input should stream as input_json_delta events"
    assert p_final.stop_reason == "tool_use"
    assert p_final.content[-1].type == "tool_use"
    assert p_final.content[-1].name == "lookup_weather"
    assert p_final.content[-1].input == {"location": "Paris"}
    assert_same_upstream_request(d_entry, p_entry)


def timed_events(client: anthropic.Anthropic, **kwargs: Any) -> list[tuple[float, str]]:
    start = time.monotonic()
    with client.messages.create(stream=True, **kwargs) as stream:
        return [(time.monotonic() - start, event.type) for event in stream]


def test_stream_is_relayed_not_buffered(direct, proxied, mock_log) -> None:
    # `mock-pause`: message_start, then a 2 s pause (the mock's default --pause-ms), then the rest.
    d, p, _, p_entry = both(mock_log, lambda c: timed_events(c, **params("mock-pause")), direct, proxied)
    assert not isinstance(p, Exception), p
    assert [name for _, name in p] == [name for _, name in d]
    first_at, first = p[0]
    second_at, _ = p[1]
    assert first == "message_start"
    # Through memgate, message_start must reach the client before the pause ends, as it does direct.
    assert first_at < 1.0, f"message_start arrived after {first_at:.2f}s through memgate: buffered?"
    assert second_at - first_at >= 1.5, p
    assert p_entry["stream"]["outcome"] == "completed"


# --- errors ------------------------------------------------------------------------------------

FAULTS = [
    # model, SDK exception class, status, error type, retry-after
    pytest.param("mock-overloaded", anthropic.OverloadedError, 529, "overloaded_error", None, id="529"),
    pytest.param("mock-500", anthropic.InternalServerError, 500, "api_error", None, id="500"),
    pytest.param("mock-429", anthropic.RateLimitError, 429, "rate_limit_error", "7", id="429"),
]

RELAYED_ERROR_HEADERS = (
    "retry-after",
    "x-should-retry",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
)


def assert_same_error(
    d: Any,
    p: Any,
    p_entry: dict[str, Any],
    exc_class: type[anthropic.APIStatusError],
    status: int,
    error_type: str,
    retry_after: str | None,
) -> None:
    assert isinstance(d, anthropic.APIStatusError), f"direct: expected an APIStatusError, got {d!r}"
    assert isinstance(p, anthropic.APIStatusError), f"via memgate: expected an APIStatusError, got {p!r}"
    assert type(d) is exc_class, type(d)
    assert type(p) is type(d), f"via memgate the SDK raised {type(p).__name__}, direct {type(d).__name__}"
    assert p.status_code == d.status_code == status
    assert p.type == d.type == error_type
    assert p.api_message == d.api_message and p.api_message
    assert without_request_id(p.body) == without_request_id(d.body)
    # The request-id is the upstream's, for this request, in the header and (if present) the body.
    assert p.request_id == f"req_mock_{p_entry['seq']}"
    if isinstance(p.body, dict) and "request_id" in p.body:
        assert p.body["request_id"] == p.request_id
    for name in RELAYED_ERROR_HEADERS:
        assert p.response.headers.get(name) == d.response.headers.get(name), name
    assert p.response.headers.get("retry-after") == retry_after
    if status == 529:
        assert p.response.headers.get("x-should-retry") == "true"
    if status == 429:
        assert p.response.headers.get("anthropic-ratelimit-requests-remaining") == "0"


@pytest.mark.parametrize(("model", "exc_class", "status", "error_type", "retry_after"), FAULTS)
def test_fault_messages_create(direct, proxied, mock_log, model, exc_class, status, error_type, retry_after) -> None:
    d, p, d_entry, p_entry = both(mock_log, lambda c: c.messages.create(**params(model)), direct, proxied)
    assert_same_error(d, p, p_entry, exc_class, status, error_type, retry_after)
    assert_same_upstream_request(d_entry, p_entry)


@pytest.mark.parametrize(("model", "exc_class", "status", "error_type", "retry_after"), FAULTS)
def test_fault_streaming_request(direct, proxied, mock_log, model, exc_class, status, error_type, retry_after) -> None:
    # The error comes before any event: the SDK raises on `create(stream=True)` itself.
    d, p, d_entry, p_entry = both(mock_log, lambda c: raw_stream(c, **params(model)), direct, proxied)
    assert_same_error(d, p, p_entry, exc_class, status, error_type, retry_after)
    assert_same_upstream_request(d_entry, p_entry)


@pytest.mark.parametrize(("model", "exc_class", "status", "error_type", "retry_after"), FAULTS)
def test_fault_count_tokens(direct, proxied, mock_log, model, exc_class, status, error_type, retry_after) -> None:
    call = lambda c: c.messages.count_tokens(model=model, messages=MESSAGES)  # noqa: E731
    d, p, _, p_entry = both(mock_log, call, direct, proxied)
    assert_same_error(d, p, p_entry, exc_class, status, error_type, retry_after)
    assert p_entry["path"] == "/v1/messages/count_tokens"


def events_until_error(client: anthropic.Anthropic, **kwargs: Any) -> tuple[list[dict[str, Any]], Exception | None]:
    events: list[dict[str, Any]] = []
    try:
        with client.messages.create(stream=True, **kwargs) as stream:
            for event in stream:
                events.append(event.model_dump())
    except Exception as err:  # noqa: BLE001 - the class is what is compared
        return events, err
    return events, None


def test_error_event_mid_stream(direct, proxied, mock_log) -> None:
    d, p, _, p_entry = both(
        mock_log, lambda c: events_until_error(c, **params("mock-error-mid-stream")), direct, proxied
    )
    (d_events, d_err), (p_events, p_err) = d, p
    assert [e["type"] for e in d_events] == ["message_start", "content_block_start", "content_block_delta"]
    assert p_events == d_events
    assert isinstance(d_err, anthropic.APIStatusError), d_err
    assert type(p_err) is type(d_err), f"via memgate: {p_err!r}, direct: {d_err!r}"
    assert p_err.type == d_err.type == "overloaded_error"
    assert without_request_id(p_err.body) == without_request_id(d_err.body)


def test_cut_stream_is_not_made_whole(direct, proxied, mock_log) -> None:
    """An upstream that drops the connection mid-stream must not look like a finished stream."""
    d, p, _, p_entry = both(
        mock_log, lambda c: events_until_error(c, **params("mock-drop-connection")), direct, proxied
    )
    (d_events, d_err), (p_events, p_err) = d, p
    assert d_err is not None, "direct: the SDK should fail on a cut stream"
    assert p_err is not None, f"via memgate the cut stream ended cleanly after {p_events}"
    assert p_events == d_events
    assert [e["type"] for e in p_events][:1] == ["message_start"]
    assert "message_stop" not in [e["type"] for e in p_events]
    assert type(p_err) is type(d_err), f"via memgate: {p_err!r}, direct: {d_err!r}"


def test_cut_json_answer_is_not_made_whole(direct, proxied, mock_log) -> None:
    """A non-streaming answer cut halfway: the SDK must raise, never hand back a message."""
    d, p, _, _ = both(mock_log, lambda c: c.messages.create(**params("mock-drop-connection")), direct, proxied)
    assert isinstance(d, anthropic.APIError), f"direct: {d!r}"
    assert isinstance(p, anthropic.APIError), f"via memgate the SDK returned {p!r} instead of raising"


# --- what reaches the upstream -----------------------------------------------------------------


def test_query_and_anthropic_headers_reach_upstream_verbatim(direct, proxied, mock_log) -> None:
    beta = "prompt-caching-2024-07-31, some-future-beta-2099-01-01"
    call = lambda c: c.messages.create(  # noqa: E731
        **params(),
        extra_query={"beta": "true"},
        extra_headers={"anthropic-beta": beta, "anthropic-some-future-header": "Value-Kept-As-Is"},
        extra_body={"metadata": {"user_id": "u-123"}, "some_future_field": {"nested": [1, "two", None]}},
    )
    d, p, d_entry, p_entry = both(mock_log, call, direct, proxied)
    assert isinstance(p, anthropic.types.Message), p
    assert p.model_dump() == d.model_dump()
    assert p_entry["query"] == "beta=true"
    headers = p_entry["headers"]
    assert headers.get("anthropic-beta") == beta
    assert headers.get("anthropic-some-future-header") == "Value-Kept-As-Is"
    # The SDK's own anthropic-version (this SDK release's, not necessarily 2023-06-01).
    assert headers.get("anthropic-version") == d_entry["headers"]["anthropic-version"]
    # Every anthropic-* header the SDK sent arrives unchanged, and memgate adds none.
    d_anthropic = {k: v for k, v in d_entry["headers"].items() if k.startswith("anthropic-")}
    p_anthropic = {k: v for k, v in headers.items() if k.startswith("anthropic-")}
    assert p_anthropic == d_anthropic
    # Unknown body fields go upstream unchanged.
    assert p_entry["body"]["some_future_field"] == {"nested": [1, "two", None]}
    assert_same_upstream_request(d_entry, p_entry)


def test_passthrough_forwards_the_callers_key(direct, proxied, mock_log) -> None:
    """In passthrough mode the caller's own key goes upstream, in the header the SDK put it in."""
    d, p, d_entry, p_entry = both(mock_log, lambda c: c.messages.create(**params()), direct, proxied)
    assert isinstance(p, anthropic.types.Message), p
    credential_headers = ("x-api-key", "authorization")
    sent = {k: v for k, v in d_entry["headers"].items() if k in credential_headers}
    assert any(API_KEY in v for v in sent.values()), f"the SDK sent no key? {d_entry['headers']}"
    forwarded = {k: v for k, v in p_entry["headers"].items() if k in credential_headers}
    assert forwarded == sent
