"""JWT callers, as a user of the official SDK sees them: `auth_token=<jwt>` (`Authorization: Bearer`).

Gateways here run in `managed` mode (memgate sends its own ANTHROPIC_API_KEY upstream, never the
caller's credential), each with a fresh SQLite store:

* `jwks_gateway`: MEMGATE_JWKS_FILE (RSA 2048, EC P-256, EC P-384 and Ed25519 keys, one `kid`
  each) plus MEMGATE_JWT_HS256_SECRET, with MEMGATE_JWT_ISSUER / MEMGATE_JWT_AUDIENCE;
* `pem_gateway`: MEMGATE_JWT_PUBLIC_KEY_FILE (one RSA public key in PEM), no HMAC secret;
* `reload_gateway`: a JWKS file of its own, which the reload test rewrites.

Keys are generated per run with `cryptography`; tokens are signed with PyJWT, except the ones no
honest library will produce (`alg: none`, HMAC keyed with a public key), which are built by hand.
Every refusal test first shows that the same token without its one defect is accepted, so a test
cannot pass because the gateway refuses everything.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import anthropic
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from conftest import MockLog, Service, database_env, make_client, start_service

UPSTREAM_KEY = "sk-ant-upstream-jwt-suite-0123456789"
# >= 64 bytes, so that HS512 gets a full-length key (memgate requires >= 32).
HMAC_SECRET = "memgate-sdk-suite-hmac-secret-0123456789abcdefghijklmnopqrstuvwxyz"
ISSUER = "https://idp.example.test/"
AUDIENCE = "memgate-sdk-suite"
MESSAGE = {"model": "claude-mock-1", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
# memgate re-reads a changed key file at most once a second; allow generously more.
RELOAD_DEADLINE_S = 10.0

KID_RSA = "rsa-2048"
KID_EC256 = "ec-p256"
KID_EC384 = "ec-p384"
KID_ED25519 = "ed25519"
# Which key (by kid) signs each asymmetric algorithm.
KID_FOR_ALG = {
    "RS256": KID_RSA,
    "RS384": KID_RSA,
    "RS512": KID_RSA,
    "ES256": KID_EC256,
    "ES384": KID_EC384,
    "EdDSA": KID_ED25519,
}
HMAC_ALGS = ("HS256", "HS384", "HS512")
ALL_ALGS = (*HMAC_ALGS, *KID_FOR_ALG)


# --- keys and tokens ------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    """The private keys of the JWKS gateway's public keys, by kid."""

    by_kid: dict[str, Any]

    def public_jwks(self) -> dict[str, Any]:
        return {"keys": [public_jwk(key, kid) for kid, key in self.by_kid.items()]}


def public_jwk(private_key: Any, kid: str) -> dict[str, Any]:
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ed25519.Ed25519PublicKey):
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    else:  # pragma: no cover - only the types above are generated
        raise TypeError(type(public))
    return {**jwk, "kid": kid, "use": "sig"}


def public_pem(private_key: Any) -> bytes:
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def write_jwks(path: Path, jwks: dict[str, Any]) -> None:
    """Replace the file whole (write aside, then rename), as a careful operator or agent does."""
    aside = path.with_name(path.name + ".tmp")
    aside.write_text(json.dumps(jwks, indent=2))
    os.replace(aside, path)


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims for the gateways here; `name=None` drops a claim."""
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "sdk-user-1",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 600,
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def sign(keys: Keys, alg: str, payload: dict[str, Any], kid: str | None = "<default>") -> str:
    """`payload` signed with `alg`: HMAC with the gateway's secret, else the kid's private key."""
    if alg in HMAC_ALGS:
        return jwt.encode(payload, HMAC_SECRET, algorithm=alg)
    key_kid = KID_FOR_ALG[alg]
    headers = {} if kid is None else {"kid": key_kid if kid == "<default>" else kid}
    return jwt.encode(payload, keys.by_kid[key_kid], algorithm=alg, headers=headers)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_json(value: dict[str, Any]) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def hand_made_hs256(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> str:
    """An HS256 token keyed with any bytes (PyJWT refuses a PEM as an HMAC secret, rightly)."""
    signing_input = f"{b64url_json(header)}.{b64url_json(payload)}"
    mac = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


# --- gateways -------------------------------------------------------------------------------


def start_managed_gateway(name: str, mock_upstream: Service, workdir: Path, env: dict[str, str]) -> Service:
    directory = workdir / name
    directory.mkdir()
    return start_service(
        name,
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
        env_extra={"ANTHROPIC_API_KEY": UPSTREAM_KEY, **database_env(directory), **env},
    )


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(
        by_kid={
            KID_RSA: rsa.generate_private_key(public_exponent=65537, key_size=2048),
            KID_EC256: ec.generate_private_key(ec.SECP256R1()),
            KID_EC384: ec.generate_private_key(ec.SECP384R1()),
            KID_ED25519: ed25519.Ed25519PrivateKey.generate(),
        }
    )


@pytest.fixture(scope="module")
def jwks_gateway(mock_upstream: Service, workdir: Path, keys: Keys) -> Iterator[Service]:
    jwks_file = workdir / "jwt-jwks.json"
    write_jwks(jwks_file, keys.public_jwks())
    service = start_managed_gateway(
        "memgate-serve-jwt-jwks",
        mock_upstream,
        workdir,
        {
            "MEMGATE_JWKS_FILE": str(jwks_file),
            "MEMGATE_JWT_HS256_SECRET": HMAC_SECRET,
            "MEMGATE_JWT_ISSUER": ISSUER,
            "MEMGATE_JWT_AUDIENCE": AUDIENCE,
        },
    )
    yield service
    service.stop()


@pytest.fixture(scope="module")
def pem_key_file(workdir: Path, keys: Keys) -> Path:
    path = workdir / "jwt-public-key.pem"
    path.write_bytes(public_pem(keys.by_kid[KID_RSA]))
    return path


@pytest.fixture(scope="module")
def pem_gateway(mock_upstream: Service, workdir: Path, pem_key_file: Path) -> Iterator[Service]:
    # No HMAC secret: the one key is the RSA public key.
    service = start_managed_gateway(
        "memgate-serve-jwt-pem",
        mock_upstream,
        workdir,
        {
            "MEMGATE_JWT_PUBLIC_KEY_FILE": str(pem_key_file),
            "MEMGATE_JWT_ISSUER": ISSUER,
            "MEMGATE_JWT_AUDIENCE": AUDIENCE,
        },
    )
    yield service
    service.stop()


@pytest.fixture(autouse=True)
def _jwt_gateway_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """On a failed test, print this module's gateways' stderr (conftest prints only its own)."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is None or not report.failed:
        return
    for name in ("jwks_gateway", "pem_gateway"):
        if name in request.fixturenames:
            service: Service = request.getfixturevalue(name)
            tail = service.stderr()[-4000:]
            if tail:
                print(f"\n--- {service.name} stderr (tail) ---\n{tail}")


# --- calls ----------------------------------------------------------------------------------


def create(gateway: Service, token: str, **extra: Any) -> anthropic.types.Message:
    with make_client(gateway.url, api_key=None, auth_token=token) as client:
        return client.messages.create(**MESSAGE, **extra)


def assert_accepted(gateway: Service, token: str, mock_log: MockLog) -> None:
    """The call succeeds, and the upstream saw memgate's key and nothing of the token."""
    mock_log.clear()
    message = create(gateway, token)
    assert message.type == "message" and message.role == "assistant", message
    assert message.content, message
    received = mock_log.requests()
    assert len(received) == 1, f"expected one upstream request, the mock saw {received}"
    entry = received[0]
    assert entry["path"] == "/v1/messages", entry
    headers = entry["headers"]
    assert headers.get("x-api-key") == UPSTREAM_KEY, headers
    assert "authorization" not in headers, f"a caller credential went upstream: {headers}"
    assert token not in json.dumps(entry), "the caller's JWT reached the upstream"


def assert_refused(gateway: Service, token: str, mock_log: MockLog, reason: str) -> None:
    """401 `authentication_error` (anthropic.AuthenticationError), and nothing went upstream.

    `reason` is a word of memgate's message for this refusal, so that a token refused for some
    other reason (a malformed test token, say) does not pass for the case under test.
    """
    mock_log.clear()
    with pytest.raises(anthropic.AuthenticationError) as caught:
        create(gateway, token)
    error = caught.value
    assert error.status_code == 401
    assert error.type == "authentication_error", error.body
    assert reason in error.message, f"refused, but not because of {reason!r}: {error.message}"
    assert mock_log.requests() == [], "a refused request must not reach the upstream"


# --- every supported algorithm works --------------------------------------------------------


@pytest.mark.parametrize("alg", ALL_ALGS)
def test_jwt_of_each_algorithm_is_accepted(
    alg: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    assert_accepted(jwks_gateway, sign(keys, alg, claims(sub=f"user-{alg}")), mock_log)


@pytest.mark.parametrize("alg", ("RS256", "RS384", "RS512"))
def test_jwt_verified_with_a_pem_public_key_is_accepted(
    alg: str, pem_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    # Without a JWKS the PEM key is the one key: no kid needed (and none is sent here).
    assert_accepted(pem_gateway, sign(keys, alg, claims(sub=f"pem-{alg}"), kid=None), mock_log)


@pytest.mark.parametrize(
    "skew", [pytest.param({"exp": -10}, id="expired-10s-ago"), pytest.param({"nbf": 10}, id="nbf-in-10s")]
)
def test_small_clock_skew_is_within_the_default_leeway(
    skew: dict[str, int], jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    # `[auth.jwt] leeway_secs` defaults to 30: a client whose clock is 10 s off still works.
    now = int(time.time())
    payload = claims(**{name: now + offset for name, offset in skew.items()})
    assert_accepted(jwks_gateway, sign(keys, "ES256", payload), mock_log)


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ("HS256", "RS256"))
def test_expired_jwt_is_refused(alg: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog) -> None:
    now = int(time.time())
    assert_accepted(jwks_gateway, sign(keys, alg, claims(exp=now + 300)), mock_log)
    # Five minutes past expiry: well beyond the 30 s leeway.
    assert_refused(jwks_gateway, sign(keys, alg, claims(iat=now - 900, exp=now - 300)), mock_log, "expired")


@pytest.mark.parametrize("alg", ("HS256", "ES384"))
def test_not_yet_valid_jwt_is_refused(alg: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog) -> None:
    now = int(time.time())
    assert_accepted(jwks_gateway, sign(keys, alg, claims(nbf=now - 60)), mock_log)
    assert_refused(jwks_gateway, sign(keys, alg, claims(nbf=now + 300)), mock_log, "not valid yet")


@pytest.mark.parametrize("alg", ("HS512", "EdDSA"))
def test_jwt_from_another_issuer_is_refused(
    alg: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    assert_accepted(jwks_gateway, sign(keys, alg, claims(iss=ISSUER)), mock_log)
    assert_refused(
        jwks_gateway, sign(keys, alg, claims(iss="https://evil.example.test/")), mock_log, "issuer"
    )


@pytest.mark.parametrize("alg", ("HS384", "RS512"))
def test_jwt_for_another_audience_is_refused(
    alg: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    assert_accepted(jwks_gateway, sign(keys, alg, claims(aud=AUDIENCE)), mock_log)
    assert_refused(jwks_gateway, sign(keys, alg, claims(aud="some-other-service")), mock_log, "audience")


@pytest.mark.parametrize(
    "claim, reason",
    [pytest.param("iss", "issuer", id="no-iss"), pytest.param("aud", "audience", id="no-aud")],
)
def test_jwt_without_the_configured_claim_is_refused(
    claim: str, reason: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    # With MEMGATE_JWT_ISSUER / MEMGATE_JWT_AUDIENCE set, a token that simply leaves the claim out
    # must not get around the check (a token minted for another service, or by another issuer
    # sharing the keys, often has no `aud` at all).
    assert_accepted(jwks_gateway, sign(keys, "RS256", claims()), mock_log)
    assert_refused(jwks_gateway, sign(keys, "RS256", claims(**{claim: None})), mock_log, reason)


@pytest.mark.parametrize("alg", ("HS256", "RS256", "ES256", "EdDSA"))
def test_tampered_jwt_is_refused(alg: str, jwks_gateway: Service, keys: Keys, mock_log: MockLog) -> None:
    payload = claims(sub="alice", team="support")
    genuine = sign(keys, alg, payload)
    assert_accepted(jwks_gateway, genuine, mock_log)
    header, _, signature = genuine.split(".")
    # The same token with its payload rewritten (another user, more scopes), signature kept.
    forged_payload = b64url_json({**payload, "sub": "admin", "scopes": ["role:admin"]})
    tampered = f"{header}.{forged_payload}.{signature}"
    assert_refused(jwks_gateway, tampered, mock_log, "signature")


def test_alg_none_jwt_is_refused(jwks_gateway: Service, keys: Keys, mock_log: MockLog) -> None:
    payload = claims(sub="mallory")
    assert_accepted(jwks_gateway, sign(keys, "HS256", payload), mock_log)
    for alg in ("none", "None", "NONE"):
        unsigned = f"{b64url_json({'alg': alg, 'typ': 'JWT'})}.{b64url_json(payload)}."
        assert_refused(jwks_gateway, unsigned, mock_log, "unsupported algorithm")


def test_hs256_keyed_with_the_rsa_public_key_is_refused_by_the_jwks_gateway(
    jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    # The classic confusion: the attacker knows the public key, and signs HS256 with its PEM as
    # the HMAC secret, naming the RSA key's kid.
    payload = claims(sub="mallory")
    assert_accepted(jwks_gateway, sign(keys, "RS256", payload), mock_log)
    # The hand-made HS256 is a sound token when keyed with the gateway's real secret.
    hs256_header = {"alg": "HS256", "typ": "JWT"}
    assert_accepted(jwks_gateway, hand_made_hs256(hs256_header, payload, HMAC_SECRET.encode()), mock_log)
    pem = public_pem(keys.by_kid[KID_RSA])
    for secret in (pem, pem.strip()):
        for header in ({**hs256_header, "kid": KID_RSA}, hs256_header):
            forged = hand_made_hs256(header, payload, secret)
            assert_refused(jwks_gateway, forged, mock_log, "signature")


def test_hs256_keyed_with_the_pem_public_key_is_refused_by_the_pem_gateway(
    pem_gateway: Service, pem_key_file: Path, keys: Keys, mock_log: MockLog
) -> None:
    # The same attack where it matters most: the gateway's only key is that public key, and the
    # forger uses the PEM file's exact bytes (and the usual variants) as the HMAC secret.
    payload = claims(sub="mallory")
    assert_accepted(pem_gateway, sign(keys, "RS256", payload, kid=None), mock_log)
    pem = pem_key_file.read_bytes()
    pkcs1 = keys.by_kid[KID_RSA].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.PKCS1
    )
    for secret in (pem, pem.strip(), pkcs1):
        forged = hand_made_hs256({"alg": "HS256", "typ": "JWT"}, payload, secret)
        assert_refused(pem_gateway, forged, mock_log, "not accepted")


def test_jwt_with_an_unknown_kid_is_refused(jwks_gateway: Service, keys: Keys, mock_log: MockLog) -> None:
    payload = claims()
    assert_accepted(jwks_gateway, sign(keys, "RS256", payload), mock_log)
    # Signed by a key the gateway has, but naming a kid it does not know.
    assert_refused(jwks_gateway, sign(keys, "RS256", payload, kid="no-such-key"), mock_log, "kid")


@pytest.mark.parametrize(
    "kid", [pytest.param(KID_RSA, id="claiming-a-known-kid"), pytest.param(None, id="without-kid")]
)
def test_jwt_signed_by_a_key_outside_the_jwks_is_refused(
    kid: str | None, jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    payload = claims()
    assert_accepted(jwks_gateway, sign(keys, "RS256", payload, kid=kid), mock_log)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    headers = {} if kid is None else {"kid": kid}
    forged = jwt.encode(payload, stranger, algorithm="RS256", headers=headers)
    assert_refused(jwks_gateway, forged, mock_log, "signature")


def test_jwt_signed_by_another_key_is_refused_by_the_pem_gateway(
    pem_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    payload = claims()
    assert_accepted(pem_gateway, sign(keys, "RS256", payload, kid=None), mock_log)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert_refused(pem_gateway, jwt.encode(payload, stranger, algorithm="RS256"), mock_log, "signature")


# --- claims mapping -------------------------------------------------------------------------


def test_memgate_permissions_claim_grants_assert_subject(
    jwks_gateway: Service, keys: Keys, mock_log: MockLog
) -> None:
    # X-Memory-Subject needs the `assert_subject` permission, which a JWT grants through its
    # `memgate_permissions` claim; without it the caller gets 403 `permission_error`.
    subject_header = {"extra_headers": {"X-Memory-Subject": "end-user-42"}}
    plain = sign(keys, "ES256", claims(sub="service-a"))
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        create(jwks_gateway, plain, **subject_header)
    assert caught.value.status_code == 403
    assert caught.value.type == "permission_error", caught.value.body

    privileged = sign(keys, "ES256", claims(sub="service-b", memgate_permissions=["assert_subject"]))
    mock_log.clear()
    message = create(jwks_gateway, privileged, **subject_header)
    assert message.type == "message"
    assert len(mock_log.requests()) == 1


# --- JWKS reload ----------------------------------------------------------------------------


def poll(gateway: Service, what: str, done: Any) -> None:
    """Call `done()` until it is true, at most RELOAD_DEADLINE_S; fail with the gateway's log."""
    deadline = time.monotonic() + RELOAD_DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(
                f"{what} within {RELOAD_DEADLINE_S:.0f}s\n"
                f"--- {gateway.name} stderr ---\n{gateway.stderr()[-4000:]}"
            )
        time.sleep(0.1)


def test_jwks_file_rewritten_with_a_new_key_is_picked_up(
    mock_upstream: Service, workdir: Path, keys: Keys, mock_log: MockLog
) -> None:
    jwks_file = workdir / "jwt-jwks-reload.json"
    old_key = keys.by_kid[KID_EC256]
    write_jwks(jwks_file, {"keys": [public_jwk(old_key, "before-rotation")]})
    gateway = start_managed_gateway(
        "memgate-serve-jwt-reload",
        mock_upstream,
        workdir,
        {
            "MEMGATE_JWKS_FILE": str(jwks_file),
            "MEMGATE_JWT_ISSUER": ISSUER,
            "MEMGATE_JWT_AUDIENCE": AUDIENCE,
            # The test reads memgate's warning about the broken file: make sure it is logged.
            "MEMGATE_LOG_LEVEL": "info",
        },
    )
    try:
        new_key = ec.generate_private_key(ec.SECP256R1())
        old_token = jwt.encode(
            claims(sub="rot-old"), old_key, algorithm="ES256", headers={"kid": "before-rotation"}
        )
        new_token = jwt.encode(
            claims(sub="rot-new"), new_key, algorithm="ES256", headers={"kid": "after-rotation"}
        )
        assert_accepted(gateway, old_token, mock_log)
        assert_refused(gateway, new_token, mock_log, "kid")

        # A half-written file (an editor or a copy caught mid-way) must not lock callers out: the
        # keys in force stay until the file parses again. Every call meanwhile must succeed.
        jwks_file.write_text('{"keys": [{"kty": "EC", "crv": "P-256", "kid": "after-rot')

        def old_token_works_and_broken_file_was_seen() -> bool:
            create(gateway, old_token)
            return "could not be loaded" in gateway.stderr()

        poll(
            gateway,
            "memgate did not report the unreadable JWKS file",
            old_token_works_and_broken_file_was_seen,
        )
        assert_accepted(gateway, old_token, mock_log)

        # Rotate: the file now holds only the new key.
        write_jwks(jwks_file, {"keys": [public_jwk(new_key, "after-rotation")]})

        def new_token_works() -> bool:
            try:
                create(gateway, new_token)
            except anthropic.AuthenticationError as err:
                assert "kid" in err.message, err.message  # refused only for not knowing the key yet
                return False
            return True

        poll(gateway, "a token with the new kid was still refused after the JWKS rewrite", new_token_works)
        assert_accepted(gateway, new_token, mock_log)
        # The rotated-out key is gone with its file entry.
        assert_refused(gateway, old_token, mock_log, "kid")
    finally:
        gateway.stop()


def test_a_deleted_jwks_file_withdraws_its_keys(
    mock_upstream: Service, workdir: Path, keys: Keys, mock_log: MockLog
) -> None:
    """Deleting the JWKS is how an operator withdraws every key in it: tokens signed with them are
    refused until a file is back. A half-written file still keeps the keys in force
    (above)."""
    jwks_file = workdir / "jwt-jwks-delete.json"
    key = keys.by_kid[KID_EC256]
    write_jwks(jwks_file, {"keys": [public_jwk(key, "to-withdraw")]})
    gateway = start_managed_gateway(
        "memgate-serve-jwt-delete",
        mock_upstream,
        workdir,
        {"MEMGATE_JWKS_FILE": str(jwks_file), "MEMGATE_JWT_ISSUER": ISSUER, "MEMGATE_JWT_AUDIENCE": AUDIENCE},
    )
    try:
        token = jwt.encode(claims(sub="withdrawn"), key, algorithm="ES256", headers={"kid": "to-withdraw"})
        assert_accepted(gateway, token, mock_log)
        jwks_file.unlink()

        def refused() -> bool:
            try:
                create(gateway, token)
            except anthropic.AuthenticationError:
                return True
            return False

        poll(gateway, "a token signed with a deleted JWKS's key was still accepted", refused)
        write_jwks(jwks_file, {"keys": [public_jwk(key, "to-withdraw")]})
        poll(gateway, "the key did not come back with its file", lambda: not refused())
    finally:
        gateway.stop()
