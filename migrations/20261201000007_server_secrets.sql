-- Secrets the replicas of one deployment share without configuration, made by the first replica
-- that needs one (INSERT … ON CONFLICT DO NOTHING, then read back): every replica on this
-- database reads the same value. `query_cache`: the HMAC key of the query embeddings shared
-- through Redis, so that Redis holds no readable question and one tenant cannot probe another's.
CREATE TABLE server_secrets (
    name       TEXT   NOT NULL PRIMARY KEY,
    value      TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
