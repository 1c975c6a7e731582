"""Fixtures for the real-client suite: the official `anthropic` SDK against memgate.

One `memgate mock-upstream` and one `memgate serve` (pointed at it) run for the whole session as
subprocesses on loopback ports chosen by the OS. Each test gets two SDK clients: `direct` (at the
mock) and `proxied` (at memgate), so every check compares what a user sees both ways.

The binary is `$MEMGATE_BIN`, or `<repo>/target/debug/memgate` (built by `tests/sdk/run.sh`).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import anthropic
import pytest

REPO = Path(__file__).resolve().parents[2]
MEMGATE_BIN = os.environ.get("MEMGATE_BIN") or str(REPO / "target" / "debug" / "memgate")
API_KEY = "sk-ant-test-key"
# Seconds a process may take to print its "listening on" line.
STARTUP_DEADLINE_S = float(os.environ.get("MEMGATE_SDK_STARTUP_TIMEOUT", "30"))
# Per-request timeout of the SDK clients, so that a hung proxy fails a test instead of the run.
CLIENT_TIMEOUT_S = 30.0

_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


@dataclass
class Service:
    """A memgate subprocess that announced its URL."""

    name: str
    url: str
    proc: subprocess.Popen[str]
    stderr_path: Path
    stdout_lines: list[str] = field(default_factory=list)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


# Settings passed on to the services: where the embedding model and ONNX Runtime are, and logging.
_KEPT_SETTINGS = ("MEMGATE_MODEL_DIR", "MEMGATE_LOG_LEVEL", "MEMGATE_LOG_FORMAT")


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The services must not pick up a developer's real settings or keys by accident.
    for name in list(env):
        if (name.startswith("MEMGATE_") and name not in _KEPT_SETTINGS) or name in (
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
        ):
            del env[name]
    # memgate's default `.assets/...` paths are relative to the working directory; give them as
    # absolute paths unless set already (tests/sdk/run.sh sources .assets/env.sh).
    assets = REPO / ".assets"
    env.setdefault("MEMGATE_MODEL_DIR", str(assets / "models" / "multilingual-e5-small"))
    ort = sorted((assets / "onnxruntime").glob("libonnxruntime.so*"))
    if ort:
        env.setdefault("ORT_DYLIB_PATH", str(ort[-1]))
    env.update(extra or {})
    return env


def start_service(
    name: str, args: list[str], workdir: Path, env_extra: dict[str, str] | None = None
) -> Service:
    """Start `memgate <args>`, wait for its "listening on" line, return its URL.

    It runs from the repository root (where `templates/` and `.assets/` are, as for a user running
    memgate from a checkout); its stderr goes to `workdir/<name>.stderr.log`.

    Fails the test session with the process's stderr if it exits or stays silent past the deadline.
    """
    if not os.access(MEMGATE_BIN, os.X_OK):
        pytest.fail(
            f"memgate binary not found at {MEMGATE_BIN}: run `cargo build` (or tests/sdk/run.sh), "
            "or set MEMGATE_BIN",
            pytrace=False,
        )
    stderr_path = workdir / f"{name}.stderr.log"
    stderr_file = open(stderr_path, "w")  # noqa: SIM115 - kept open for the child's lifetime
    proc = subprocess.Popen(
        [MEMGATE_BIN, *args],
        cwd=REPO,
        env=_child_env(env_extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        text=True,
    )
    stderr_file.close()  # the child has its own descriptor
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        # Keeps reading stdout for the process's whole life, so it never blocks on a full pipe.
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name=f"{name}-stdout", daemon=True).start()

    service = Service(name=name, url="", proc=proc, stderr_path=stderr_path, stdout_lines=seen)
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            service.stop()
            pytest.fail(
                f"{name}: no 'listening on' line within {STARTUP_DEADLINE_S:.0f}s\n"
                f"command: {MEMGATE_BIN} {' '.join(args)}\nstdout: {seen}\n"
                f"stderr:\n{service.stderr()}",
                pytrace=False,
            )
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        if line is None:
            code = proc.wait(timeout=10)
            pytest.fail(
                f"{name} exited with status {code} before listening\n"
                f"command: {MEMGATE_BIN} {' '.join(args)}\nstdout: {seen}\n"
                f"stderr:\n{service.stderr()}",
                pytrace=False,
            )
        match = _LISTENING.search(line)
        if match:
            service.url = match.group(1)
            return service


def database_env(directory: Path) -> dict[str, str]:
    """A fresh SQLite store in `directory`, so no test run sees another's state."""
    return {"MEMGATE_DATABASE_URL": f"sqlite://{directory / 'memgate.db'}"}


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    # The services' logs and SQLite files land here.
    with tempfile.TemporaryDirectory(prefix="memgate-sdk-") as path:
        yield Path(path)


@pytest.fixture(scope="session")
def mock_upstream(workdir: Path) -> Iterator[Service]:
    service = start_service("mock-upstream", ["mock-upstream", "--listen", "127.0.0.1:0"], workdir)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def memgate(mock_upstream: Service, workdir: Path) -> Iterator[Service]:
    service_dir = workdir / "serve"
    service_dir.mkdir()
    service = start_service(
        "memgate-serve",
        [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            mock_upstream.url,
            "--auth-mode",
            "passthrough",
        ],
        workdir,
        env_extra=database_env(service_dir),
    )
    yield service
    service.stop()


def admin_call(service: Service, token: str, tenant: str, method: str, path: str, body: Any = None) -> Any:
    """One admin API call (`/admin/v1<path>`) with `token` in `tenant`; an error status fails the test."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{service.url}/admin/v1{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("x-memory-tenant", tenant)
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - loopback only
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        pytest.fail(f"{method} {path} answered {err.code}: {err.read().decode(errors='replace')}")


def managed_memgate(name: str, mock_upstream: Service, workdir: Path, upstream_key: str, admin_token: str) -> Service:
    """A managed-mode memgate of its own in front of the mock, with a generous funnel budget."""
    directory = workdir / name
    directory.mkdir()
    config = directory / "memgate.toml"
    config.write_text("[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n")
    return start_service(
        name,
        ["serve", "--listen", "127.0.0.1:0", "--upstream-url", mock_upstream.url, "--auth-mode", "managed",
         "--config", str(config)],
        workdir,
        env_extra={"ANTHROPIC_API_KEY": upstream_key, "MEMGATE_ADMIN_TOKEN": admin_token, **database_env(directory)},
    )


def make_client(base_url: str, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=base_url,
        api_key=kwargs.pop("api_key", API_KEY),
        max_retries=0,
        timeout=CLIENT_TIMEOUT_S,
        **kwargs,
    )


@pytest.fixture(scope="session")
def direct(mock_upstream: Service) -> Iterator[anthropic.Anthropic]:
    client = make_client(mock_upstream.url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def proxied(memgate: Service) -> Iterator[anthropic.Anthropic]:
    client = make_client(memgate.url)
    yield client
    client.close()


class MockLog:
    """The mock's record of the requests it received (`/_mock/requests`)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def _call(self, method: str) -> tuple[int, bytes]:
        req = urllib.request.Request(f"{self.base_url}/_mock/requests", method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read()

    def clear(self) -> None:
        status, _ = self._call("DELETE")
        assert status == 204, f"DELETE /_mock/requests answered {status}"

    def requests(self) -> list[dict[str, Any]]:
        status, body = self._call("GET")
        assert status == 200, f"GET /_mock/requests answered {status}"
        return json.loads(body)["requests"]


@pytest.fixture
def mock_log(mock_upstream: Service) -> MockLog:
    log = MockLog(mock_upstream.url)
    log.clear()
    return log


@pytest.fixture(autouse=True)
def _service_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """On a failed test, print the services' stderr, which usually says why."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is None or not report.failed:
        return
    for name in ("mock_upstream", "memgate"):
        if name in request.fixturenames:
            service: Service = request.getfixturevalue(name)
            tail = service.stderr()[-4000:]
            if tail:
                print(f"\n--- {service.name} stderr (tail) ---\n{tail}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
