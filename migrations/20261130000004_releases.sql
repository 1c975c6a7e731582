-- Rollout state of each release (which is active, canary share, allow-lists, guard, shadow), and
-- the history of every change to it, manual or by the guard. `rollout_version` increases with
-- every change so replicas notice one with a single cheap query.
CREATE TABLE release_rollout (
    name       TEXT   NOT NULL,
    state_json TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (name)
);

CREATE TABLE release_history (
    id          TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    action      TEXT   NOT NULL,
    actor       TEXT   NOT NULL,
    reason      TEXT   NOT NULL,
    at          BIGINT NOT NULL,
    before_json TEXT,
    after_json  TEXT,
    PRIMARY KEY (id)
);
CREATE INDEX release_history_by_name ON release_history (name, at);
