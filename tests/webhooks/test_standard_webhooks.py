"""memgate's trigger deliveries, checked by the Standard Webhooks specification's own verifier.

A receiver on 127.0.0.1:0 answers 500, then 429 with `Retry-After: 1`, then 204, and verifies
every request it gets with `standardwebhooks.Webhook` for each of the two secrets memgate signs
with during a rotation. memgate's side is the ignored Rust test `triggers::external_receiver`
(tests/integration/triggers.rs), run from the integration-test binary that run.sh builds: its
delivery worker decides one action and delivers it to this receiver.
"""

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SECRET_OLD = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SECRET_NEW = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCwgMzIgYnl0ZXM="


class Receiver(ThreadingHTTPServer):
    """Answers from a script, then 204; keeps every request and whether each secret verified it."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = [(500, {}), (429, {"Retry-After": "1"})]
        self.seen = []
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        verified = {}
        for name, secret in (("old", SECRET_OLD), ("new", SECRET_NEW)):
            try:
                Webhook(secret).verify(body, headers)
                verified[name] = True
            except WebhookVerificationError as error:
                verified[name] = str(error)
        with self.server.lock:
            self.server.seen.append(
                {"at": time.monotonic(), "path": self.path, "headers": headers, "body": body, "verified": verified}
            )
            status, extra = self.server.script.pop(0) if self.server.script else (204, {})
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_library_agrees_with_the_specifications_test_vector():
    # The vector memgate's own signing test reproduces (src/triggers/signing.rs).
    from datetime import datetime, timezone

    signature = Webhook(SECRET_OLD).sign(
        "msg_p5jXN8AQM9LWM0D4loKWxJek", datetime.fromtimestamp(1614265330, tz=timezone.utc), '{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_deliveries_verify_with_standardwebhooks_through_retries(receiver):
    binary = os.environ.get("MEMGATE_INTEGRATION_BIN")
    assert binary, "run through tests/webhooks/run.sh, which builds the integration tests"
    port = receiver.server_address[1]
    env = dict(
        os.environ,
        MEMGATE_WEBHOOK_URL=f"http://127.0.0.1:{port}/hook",
        MEMGATE_WEBHOOK_SECRETS=f"{SECRET_OLD} {SECRET_NEW}",
    )
    run = subprocess.run(
        [binary, "--ignored", "--exact", "triggers::external_receiver", "--nocapture"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"memgate's side failed:\n{run.stdout}\n{run.stderr}"
    assert "1 passed" in run.stdout, run.stdout

    seen = receiver.seen
    assert len(seen) == 3, [s["verified"] for s in seen]
    # Every attempt verifies with either secret: a receiver that has moved to the new secret and
    # one that still has the old one both accept it.
    for attempt in seen:
        assert attempt["verified"] == {"old": True, "new": True}, attempt["verified"]
        assert attempt["path"] == "/hook"
        assert attempt["headers"]["content-type"] == "application/json"
    ids = {attempt["headers"]["webhook-id"] for attempt in seen}
    assert len(ids) == 1 and ids.pop().startswith("evt_"), "one idempotency id for every attempt"
    assert seen[2]["at"] - seen[1]["at"] >= 0.99, "Retry-After: 1 was honoured"
    assert len({attempt["body"] for attempt in seen}) == 1, "the same bytes every time"

    payload = json.loads(seen[2]["body"])
    assert payload["type"] == "memgate.trigger.fired"
    data = payload["data"]
    assert data["request_id"] == "req-python"
    assert data["service"] == "ticketing" and data["method"] == "create_ticket"
    assert data["record"]["content"]["process_name"] == "customer complaint escalation"
    assert data["matched"]["hit"] == "lawyer"
    # This endpoint opted in to the conversation (include_conversation = true).
    assert data["conversation"] == "Я поговорю со своим адвокатом — my lawyer"
    assert data["matched"]["excerpt"] == "lawyer"

    # And the library refuses what it should: a changed body, or an unknown secret.
    headers = seen[2]["headers"]
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_OLD).verify(seen[2]["body"].replace(b"lawyer", b"lawyor"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB").verify(seen[2]["body"], headers)
