"""Whose key goes upstream, as an SDK user of each auth mode would rely on it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import anthropic
import pytest

from conftest import MockLog, Service, make_client, start_service

UPSTREAM_KEY = "sk-ant-upstream-managed-0123456789"
CALLER_KEY = "sk-ant-caller-own-key-9876543210"


@pytest.fixture(scope="module")
def managed_memgate(mock_upstream: Service, workdir: Path) -> Iterator[Service]:
    service_dir = workdir / "serve-managed"
    service_dir.mkdir()
    service = start_service(
        "memgate-serve-managed",
        [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            mock_upstream.url,
            "--auth-mode",
            "managed",
        ],
        service_dir,
        env_extra={"ANTHROPIC_API_KEY": UPSTREAM_KEY},
    )
    yield service
    service.stop()


def test_managed_mode_never_forwards_the_callers_key(managed_memgate: Service, mock_log: MockLog) -> None:
    client = make_client(managed_memgate.url, api_key=CALLER_KEY)
    try:
        message = client.messages.create(
            model="claude-mock-1", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    except (anthropic.AuthenticationError, anthropic.PermissionDeniedError):
        # A gateway that refuses an unknown caller key is fine, as long as nothing went upstream.
        assert mock_log.requests() == []
        return
    finally:
        client.close()
    assert message.id.startswith("msg_mock_")
    received = mock_log.requests()
    assert len(received) == 1, received
    headers = received[0]["headers"]
    assert headers.get("x-api-key") == UPSTREAM_KEY
    assert "authorization" not in headers
    leaked = {name: value for name, value in headers.items() if CALLER_KEY in value}
    assert not leaked, f"the caller's key reached the upstream in {leaked}"
