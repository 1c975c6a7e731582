-- The trigger outbox: every action a firing record decided, until it is delivered or dead.
-- Portable SQL (SQLite and PostgreSQL); times in milliseconds since the epoch.
--
-- `id` is the idempotency id (`evt_` + a hash of tenant, request, record and action index): a
-- second insert of the same decision does nothing, and receivers see it as `webhook-id`.
-- States: `pending` (not tried yet), `retrying` (failed, `next_at` says when to try again),
-- `delivered`, `dead` (the schedule ran out, or the endpoint refused for good; replayable).
-- A worker claims due rows by setting `locked_until` (a lease) and `lease_owner`; only the owner
-- may then mark the row, and a lease that runs out (the replica died) makes the row due again.
CREATE TABLE trigger_outbox (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    request_id      TEXT    NOT NULL,
    record_id       TEXT    NOT NULL,
    record_revision BIGINT  NOT NULL,
    action_index    BIGINT  NOT NULL,
    endpoint        TEXT    NOT NULL,
    method          TEXT    NOT NULL,
    subject         TEXT,
    matched_json    TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    attempts        BIGINT  NOT NULL,
    next_at         BIGINT  NOT NULL,
    locked_until    BIGINT,
    lease_owner     TEXT,
    last_status     BIGINT,
    last_error      TEXT,
    last_response   TEXT,
    replays         BIGINT  NOT NULL,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    delivered_at    BIGINT
);
-- What the workers look for: due rows in a waiting state.
CREATE INDEX trigger_outbox_due ON trigger_outbox (state, next_at);
-- The admin list: a tenant's actions, newest first.
CREATE INDEX trigger_outbox_by_tenant ON trigger_outbox (tenant, created_at);
-- Pruning and the all-tenant list.
CREATE INDEX trigger_outbox_by_time ON trigger_outbox (created_at);
