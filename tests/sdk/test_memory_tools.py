"""memgate's memory tools through the official `anthropic` SDK: a key with `memory_write_tools`,
the mock upstream's model calling `memory_add` and `memory_search` as a model would, and what the
SDK makes of the answer — one message, streaming (`messages.stream(...).get_final_message()` and
the events it saw) and not, with none of memgate's tool blocks and the usage of every round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import anthropic
import pytest

from conftest import MockLog, Service, admin_call, make_client, managed_memgate

ADMIN_TOKEN = "sdk-tools-admin-token-0123456789"
UPSTREAM_KEY = "sk-ant-upstream-tools-0123456789"
TENANT = "acme"
MODEL = "claude-mock-1"
MEMGATE_TOOLS = {"memory_search", "memory_get", "memory_list", "memory_add", "memory_update", "memory_delete"}


def admin(service: Service, method: str, path: str, body: Any = None) -> Any:
    return admin_call(service, ADMIN_TOKEN, TENANT, method, path, body)


@pytest.fixture(scope="module")
def gateway(mock_upstream: Service, workdir: Path) -> Iterator[Service]:
    service = managed_memgate("memgate-serve-tools", mock_upstream, workdir, UPSTREAM_KEY, ADMIN_TOKEN)
    yield service
    service.stop()


@pytest.fixture(scope="module")
def agent(gateway: Service) -> Iterator[tuple[anthropic.Anthropic, str]]:
    answer = admin(gateway, "POST", "/keys", {"name": "agent", "scopes": [],
                                              "permissions": ["memory_write_tools", "assert_subject"]})
    with make_client(gateway.url, api_key=answer["key"], default_headers={"X-Memory-Subject": "u-sdk"}) as client:
        yield client, answer["id"]


def rounds_input_tokens(mock_log: MockLog, since: int) -> int:
    """The mock's `input_tokens` of every round it answered after the first `since` requests."""
    total = 0
    for entry in mock_log.requests()[since:]:
        body = entry["body"]
        size = sum(len(json.dumps(body[k], separators=(",", ":"), sort_keys=True, ensure_ascii=False))
                   for k in ("system", "messages", "tools") if k in body)
        total += -(-size // 4)
    return total


def test_a_remembered_fact_comes_back_as_one_message_without_memgates_blocks(
    agent: tuple[anthropic.Anthropic, str], gateway: Service, mock_log: MockLog
) -> None:
    client, key_id = agent
    before = len(mock_log.requests())
    message = client.messages.create(
        model=MODEL, max_tokens=256,
        messages=[{"role": "user", "content": "Remember that the office plant is called Fernando."}],
    )
    assert [block.type for block in message.content] == ["text", "text"]
    assert message.content[1].text.startswith("From memory: Saved as mem-")
    assert message.stop_reason == "end_turn"
    assert len(mock_log.requests()) - before == 2
    assert message.usage.input_tokens == rounds_input_tokens(mock_log, before)
    records = admin(gateway, "GET", "/memories?scope=user:u-sdk")["data"]
    assert [r["author"] for r in records] == [f"agent:{key_id}"]


def test_a_streamed_search_gives_get_final_message_one_coherent_message(
    agent: tuple[anthropic.Anthropic, str], mock_log: MockLog
) -> None:
    client, _ = agent
    client.messages.create(
        model=MODEL, max_tokens=256,
        messages=[{"role": "user", "content": "Remember that my locker number is 42."}],
    )
    before = len(mock_log.requests())
    events: list[Any] = []
    with client.messages.stream(
        model=MODEL, max_tokens=256,
        messages=[{"role": "user", "content": "What is my locker number?"}],
    ) as stream:
        for event in stream:
            events.append(event)
        final = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds.count("message_start") == 1
    assert kinds.count("message_stop") == 1
    starts = [event.index for event in events if event.type == "content_block_start"]
    assert starts == list(range(len(starts))), starts
    assert all(
        event.content_block.name not in MEMGATE_TOOLS
        for event in events
        if event.type == "content_block_start" and event.content_block.type == "tool_use"
    )
    assert [block.type for block in final.content] == ["text", "text"]
    assert "locker number is 42" in final.content[1].text
    assert final.stop_reason == "end_turn"
    assert len(mock_log.requests()) - before == 2
    assert final.usage.input_tokens == rounds_input_tokens(mock_log, before)
