-- Memory records, their scopes and their changelog. Portable SQL: the same file runs on SQLite
-- and PostgreSQL. Times are milliseconds since the epoch (BIGINT), JSON is stored as text.

CREATE TABLE memories (
    tenant           TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    record_type      TEXT    NOT NULL,
    schema_version   TEXT    NOT NULL,
    scope_json       TEXT    NOT NULL,  -- sorted JSON array of scopes
    valid_from       BIGINT  NOT NULL,
    valid_until      BIGINT  NOT NULL,
    priority         BIGINT  NOT NULL,
    topic_key        TEXT,
    aliases_json     TEXT    NOT NULL,
    content_json     TEXT    NOT NULL,
    metadata_json    TEXT    NOT NULL,
    content_hash     TEXT    NOT NULL,
    revision         BIGINT  NOT NULL,
    status           TEXT    NOT NULL,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    last_accessed_at BIGINT,
    access_count     BIGINT  NOT NULL,
    import_id        TEXT,
    search_text      TEXT    NOT NULL,  -- lower-cased key, aliases and content, for `q`
    PRIMARY KEY (tenant, id)
);

-- One live record per tenant, key and scope: writing the same topic again supersedes it.
CREATE UNIQUE INDEX memories_topic ON memories (tenant, topic_key, scope_json) WHERE topic_key IS NOT NULL;
CREATE INDEX memories_hash ON memories (tenant, content_hash);
CREATE INDEX memories_import ON memories (tenant, import_id);

CREATE TABLE memory_scopes (
    tenant    TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    scope     TEXT NOT NULL,
    PRIMARY KEY (tenant, memory_id, scope)
);
CREATE INDEX memory_scopes_by_scope ON memory_scopes (tenant, scope);

CREATE TABLE memory_changes (
    tenant      TEXT   NOT NULL,
    change_id   TEXT   NOT NULL,
    memory_id   TEXT   NOT NULL,
    revision    BIGINT NOT NULL,
    action      TEXT   NOT NULL,
    actor       TEXT   NOT NULL,
    at          BIGINT NOT NULL,
    seq         BIGINT NOT NULL,  -- order within one record's history
    before_json TEXT,
    after_json  TEXT,
    PRIMARY KEY (tenant, change_id)
);
CREATE INDEX memory_changes_by_memory ON memory_changes (tenant, memory_id, seq);

-- Every scope a change's before or after named: what `forget` erases by.
CREATE TABLE memory_change_scopes (
    tenant    TEXT NOT NULL,
    change_id TEXT NOT NULL,
    scope     TEXT NOT NULL,
    PRIMARY KEY (tenant, change_id, scope)
);
CREATE INDEX memory_change_scopes_by_scope ON memory_change_scopes (tenant, scope);

CREATE TABLE memory_imports (
    tenant     TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    actor      TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    added      BIGINT NOT NULL,
    undone_at  BIGINT,
    PRIMARY KEY (tenant, id)
);
