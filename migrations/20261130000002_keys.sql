-- Gateway keys. The secret is never stored: only its SHA-256 (the secret carries 256 random bits,
-- so a fast hash is enough; there is nothing to brute-force).

CREATE TABLE gateway_keys (
    tenant                TEXT   NOT NULL,
    id                    TEXT   NOT NULL,  -- public part of the key, unique across tenants
    name                  TEXT   NOT NULL,
    secret_sha256         TEXT   NOT NULL,
    scopes_json           TEXT   NOT NULL,
    permissions_json      TEXT   NOT NULL,
    rate_limit_per_minute BIGINT,
    created_at            BIGINT NOT NULL,
    revoked_at            BIGINT,
    PRIMARY KEY (id)
);
CREATE INDEX gateway_keys_by_tenant ON gateway_keys (tenant, created_at);
