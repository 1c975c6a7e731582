"""Whose key goes upstream, as an SDK user of each auth mode relies on it.

`managed` mode: callers present a gateway key issued by `memgate key create`; memgate sends its own
upstream key (ANTHROPIC_API_KEY) and never the caller's credential. (Passthrough mode is covered by
`test_passthrough_forwards_the_callers_key` in test_proxy_parity.py.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import anthropic
import pytest

from conftest import (
    MEMGATE_BIN,
    REPO,
    MockLog,
    Service,
    _child_env,
    database_env,
    make_client,
    start_service,
)

UPSTREAM_KEY = "sk-ant-upstream-managed-0123456789"
UNKNOWN_CALLER_KEY = "sk-ant-caller-own-key-9876543210"
MESSAGE = {"model": "claude-mock-1", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def managed_dir(workdir: Path) -> Path:
    path = workdir / "serve-managed"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def gateway_key(managed_dir: Path) -> str:
    """A gateway key issued the way an operator does it: `memgate key create`."""
    result = subprocess.run(
        [MEMGATE_BIN, "key", "create", "--name", "sdk-suite"],
        cwd=REPO,
        env=_child_env(database_env(managed_dir)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"memgate key create failed:\n{result.stderr}"
    key = json.loads(result.stdout)["key"]
    assert isinstance(key, str) and key
    return key


@pytest.fixture(scope="module")
def managed_memgate(mock_upstream: Service, workdir: Path, managed_dir: Path, gateway_key: str) -> Iterator[Service]:
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
        workdir,
        env_extra={"ANTHROPIC_API_KEY": UPSTREAM_KEY, **database_env(managed_dir)},
    )
    yield service
    service.stop()


def test_managed_mode_sends_its_own_key_upstream(
    direct: anthropic.Anthropic, managed_memgate: Service, gateway_key: str, mock_log: MockLog
) -> None:
    expected = direct.messages.create(**MESSAGE)
    mock_log.clear()
    with make_client(managed_memgate.url, api_key=gateway_key) as client:
        message = client.messages.create(**MESSAGE)
    assert message.model_dump() == expected.model_dump()
    received = mock_log.requests()
    assert len(received) == 1, received
    headers = received[0]["headers"]
    assert headers.get("x-api-key") == UPSTREAM_KEY
    assert "authorization" not in headers
    leaked = {name: value for name, value in headers.items() if gateway_key in value}
    assert not leaked, f"the caller's gateway key reached the upstream in {leaked}"


def test_managed_mode_refuses_an_unknown_key(managed_memgate: Service, mock_log: MockLog) -> None:
    with make_client(managed_memgate.url, api_key=UNKNOWN_CALLER_KEY) as client:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            client.messages.create(**MESSAGE)
    # memgate's own error, in Anthropic's shape, so the SDK raised the right class.
    assert caught.value.status_code == 401
    assert caught.value.type == "authentication_error"
    assert mock_log.requests() == [], "a refused request must not reach the upstream"


def test_managed_mode_refuses_batches_without_the_permission_as_the_sdk_expects(
    managed_memgate: Service, gateway_key: str, mock_log: MockLog
) -> None:
    """Batches share memgate's upstream workspace with every tenant: a key needs `batches`."""
    client = make_client(managed_memgate.url, api_key=gateway_key)
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        client.messages.batches.list()
    assert refused.value.status_code == 403
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    assert body["error"]["type"] == "permission_error"
    assert "batches" in body["error"]["message"]
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.batches.create(requests=[{"custom_id": "a", "params": MESSAGE}])
    assert not [r for r in mock_log.requests() if r["path"].startswith("/v1/messages/batches")]
    client.close()
