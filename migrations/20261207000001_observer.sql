-- Observation (docs/observation.md): finished exchanges waiting for extraction, what the gates
-- decided about each candidate, and each tenant's daily extraction usage. Portable SQL (SQLite
-- and PostgreSQL); times in milliseconds since the epoch.
--
-- `observer_exchanges` is an outbox like `trigger_outbox`: `id` is the idempotency id
-- (`obs_` + a hash of tenant, subject and request id), a second insert of the same exchange does
-- nothing; a worker claims due rows by setting `locked_until` (a lease) and `lease_owner`, and
-- only the owner may then finish or reschedule the row. A processed exchange is deleted: the
-- person's words and the answer are kept only while they wait.
CREATE TABLE observer_exchanges (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    release_name    TEXT    NOT NULL,
    mode            TEXT    NOT NULL,
    min_confidence  TEXT    NOT NULL,
    schema_version  TEXT    NOT NULL,
    request_id      TEXT    NOT NULL,
    person_text     TEXT    NOT NULL,
    answer_text     TEXT    NOT NULL,
    system_text     TEXT    NOT NULL,
    injected_json   TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    attempts        BIGINT  NOT NULL,
    next_at         BIGINT  NOT NULL,
    locked_until    BIGINT,
    lease_owner     TEXT,
    last_error      TEXT,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL
);
CREATE INDEX observer_exchanges_due ON observer_exchanges (state, next_at);
CREATE INDEX observer_exchanges_by_subject ON observer_exchanges (tenant, subject);
CREATE INDEX observer_exchanges_by_time ON observer_exchanges (created_at);

-- One row per candidate an extraction returned: the gate that decided it and why, in words that
-- never quote a secret. No record text is kept here.
CREATE TABLE observer_outcomes (
    exchange_id     TEXT    NOT NULL,
    position        BIGINT  NOT NULL,
    tenant          TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    request_id      TEXT    NOT NULL,
    record_type     TEXT    NOT NULL,
    verdict         TEXT    NOT NULL,
    gate            TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    record_id       TEXT,
    at              BIGINT  NOT NULL,
    PRIMARY KEY (exchange_id, position)
);
CREATE INDEX observer_outcomes_by_subject ON observer_outcomes (tenant, subject);
CREATE INDEX observer_outcomes_by_time ON observer_outcomes (tenant, at);

-- Extraction calls and tokens per tenant and UTC day: the budget, and the cost shown per tenant.
CREATE TABLE observer_usage (
    tenant          TEXT    NOT NULL,
    day             TEXT    NOT NULL,
    calls           BIGINT  NOT NULL,
    input_tokens    BIGINT  NOT NULL,
    output_tokens   BIGINT  NOT NULL,
    PRIMARY KEY (tenant, day)
);
