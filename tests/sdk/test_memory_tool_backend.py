"""Anthropic's memory tool backed by memgate, through the official `anthropic` SDK: a key with
`memory_tool_backend`, a request that declares `memory_20250818` and sends
`X-Memory-Tool-Backend: memgate`, the mock upstream's model calling `memory` as a model would, and
what the SDK makes of the answer — one message, streamed (`beta.messages.stream(...)
.get_final_message()`) and not, with no `memory` call for the client to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import anthropic
import pytest

from conftest import MockLog, Service, admin_call, make_client, managed_memgate

ADMIN_TOKEN = "sdk-memtool-admin-token-0123456789"
UPSTREAM_KEY = "sk-ant-upstream-memtool-0123456789"
TENANT = "acme"
MODEL = "claude-mock-1"
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}
BETAS = ["context-management-2025-06-27"]
BACKEND = {"X-Memory-Tool-Backend": "memgate"}


def admin(service: Service, method: str, path: str, body: Any = None) -> Any:
    return admin_call(service, ADMIN_TOKEN, TENANT, method, path, body)


@pytest.fixture(scope="module")
def gateway(mock_upstream: Service, workdir: Path) -> Iterator[Service]:
    service = managed_memgate("memgate-serve-memtool", mock_upstream, workdir, UPSTREAM_KEY, ADMIN_TOKEN)
    yield service
    service.stop()


@pytest.fixture(scope="module")
def agent(gateway: Service) -> Iterator[tuple[anthropic.Anthropic, str]]:
    answer = admin(gateway, "POST", "/keys", {"name": "memtool", "scopes": [],
                                              "permissions": ["memory_tool_backend", "assert_subject"]})
    with make_client(gateway.url, api_key=answer["key"],
                     default_headers={"X-Memory-Subject": "u-sdk-files", **BACKEND}) as client:
        yield client, answer["id"]


def test_a_created_file_is_listed_by_a_later_streamed_view(
    agent: tuple[anthropic.Anthropic, str], gateway: Service, mock_log: MockLog
) -> None:
    client, key_id = agent
    before = len(mock_log.requests())
    message = client.beta.messages.create(
        model=MODEL, max_tokens=256, tools=[MEMORY_TOOL], betas=BETAS,
        messages=[{"role": "user", "content": "Remember that the office plant is called Fernando."}],
    )
    assert [block.type for block in message.content] == ["text", "text"]
    assert message.content[1].text == (
        "From memory: File created successfully at: /memories/the-office-plant-is-called.md"
    )
    assert message.stop_reason == "end_turn"
    assert len(mock_log.requests()) - before == 2
    records = admin(gateway, "GET", "/memories?scope=user:u-sdk-files")["data"]
    assert [(r["key"], r["author"]) for r in records] == [("/memories/the-office-plant-is-called.md", f"agent:{key_id}")]

    events: list[Any] = []
    with client.beta.messages.stream(
        model=MODEL, max_tokens=256, tools=[MEMORY_TOOL], betas=BETAS,
        messages=[{"role": "user", "content": "What do you remember about the office?"}],
    ) as stream:
        for event in stream:
            events.append(event)
        final = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds.count("message_start") == 1
    assert kinds.count("message_stop") == 1
    starts = [event.index for event in events if event.type == "content_block_start"]
    assert starts == list(range(len(starts))), starts
    assert [block.type for block in final.content] == ["text", "text"]
    assert final.content[1].text == (
        "From memory: Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n"
        "35B\t/memories\n35B\t/memories/the-office-plant-is-called.md"
    )
    assert final.stop_reason == "end_turn"


def test_without_the_header_the_sdk_gets_the_memory_call_to_run_itself(
    agent: tuple[anthropic.Anthropic, str],
) -> None:
    client, _ = agent
    message = client.beta.messages.create(
        model=MODEL, max_tokens=256, tools=[MEMORY_TOOL], betas=BETAS,
        extra_headers={"X-Memory-Tool-Backend": "client"},
        messages=[{"role": "user", "content": "Remember that I like tea."}],
    )
    calls = [block for block in message.content if block.type == "tool_use"]
    assert [(call.name, call.input["command"]) for call in calls] == [("memory", "create")]
    assert message.stop_reason == "tool_use"
