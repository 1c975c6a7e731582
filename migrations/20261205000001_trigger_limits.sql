-- What keeps triggers from being turned into a flood: cooldowns, the pace of each endpoint, and
-- the count of a tenant's waiting actions. Portable SQL (SQLite and PostgreSQL); times in ms.
--
-- A cooldown: record `record_id` fired for `cooled_for` (a hash of the subject, or of the
-- caller's key when there is no subject: no personal data is kept here) in the turn
-- `request_id`, and fires for it again only after `until_at`. Taken in the transaction that
-- writes the firing's actions, so replicas share it: of two firings at once, one waits for the
-- other's row and sees its cooldown.
CREATE TABLE trigger_cooldowns (
    tenant      TEXT   NOT NULL,
    record_id   TEXT   NOT NULL,
    cooled_for  TEXT   NOT NULL,
    request_id  TEXT   NOT NULL,
    until_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant, record_id, cooled_for)
);
-- Pruning the ones that ran out.
CREATE INDEX trigger_cooldowns_until ON trigger_cooldowns (until_at);
-- Erasure of a subject.
CREATE INDEX trigger_cooldowns_for ON trigger_cooldowns (tenant, cooled_for);

-- The pace of deliveries to an endpoint (by its configured name), shared by every replica: the
-- theoretical arrival time of a generic cell rate algorithm, a token bucket kept in one number.
CREATE TABLE trigger_endpoint_pace (
    endpoint    TEXT   NOT NULL PRIMARY KEY,
    tat         BIGINT NOT NULL
);

-- A tenant's waiting actions, counted before new ones are written.
CREATE INDEX trigger_outbox_waiting ON trigger_outbox (tenant, state);
