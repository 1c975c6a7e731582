-- The console (issue 16; src/console/, docs/console.md): its sessions and memgate's own metrics
-- history. Portable SQL: the same file runs on SQLite and PostgreSQL. Times are milliseconds since
-- the epoch.

-- A console login. The cookie value is never stored: only its SHA-256 (it carries 256 random bits,
-- so a fast hash is enough). Every replica reads the same rows, so a session works behind a load
-- balancer and a logout is seen everywhere at once. A session ends at `expires_at` or after its
-- idle timeout past `last_seen_at`, whichever comes first; logins delete ended rows.
CREATE TABLE console_sessions (
    token_hash   TEXT   NOT NULL PRIMARY KEY,
    role         TEXT   NOT NULL,  -- admin | viewer
    actor        TEXT   NOT NULL,  -- console or console:<name>
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);

-- Counts of answered Messages requests per tenant, release and time bucket, never per request.
-- bucket_secs 60: one row per replica and minute (`replica` = the replica's name); the 1 h view
-- sums the replicas. bucket_secs 300: one row per 5 minutes that every replica adds into
-- (`replica` = ''); the 24 h view reads it. Counters are added by each flush, never replaced.
-- lat_00..lat_39: the added-latency histogram, 40 log-spaced bins from 0.05 ms to 10 s.
CREATE TABLE metric_buckets (
    tenant           TEXT   NOT NULL,
    bucket_secs      BIGINT NOT NULL,
    bucket_start     BIGINT NOT NULL,
    release          TEXT   NOT NULL,  -- '' for calls refused before a release was chosen
    replica          TEXT   NOT NULL,
    calls            BIGINT NOT NULL DEFAULT 0,
    err_upstream     BIGINT NOT NULL DEFAULT 0,
    err_memory       BIGINT NOT NULL DEFAULT 0,
    err_rate_limited BIGINT NOT NULL DEFAULT 0,
    err_client       BIGINT NOT NULL DEFAULT 0,
    err_internal     BIGINT NOT NULL DEFAULT 0,
    mem_ok           BIGINT NOT NULL DEFAULT 0,
    mem_skipped      BIGINT NOT NULL DEFAULT 0,
    mem_degraded     BIGINT NOT NULL DEFAULT 0,
    injected_records BIGINT NOT NULL DEFAULT 0,
    injected_tokens  BIGINT NOT NULL DEFAULT 0,
    visible_tokens   BIGINT NOT NULL DEFAULT 0,
    lat_00           BIGINT NOT NULL DEFAULT 0,
    lat_01           BIGINT NOT NULL DEFAULT 0,
    lat_02           BIGINT NOT NULL DEFAULT 0,
    lat_03           BIGINT NOT NULL DEFAULT 0,
    lat_04           BIGINT NOT NULL DEFAULT 0,
    lat_05           BIGINT NOT NULL DEFAULT 0,
    lat_06           BIGINT NOT NULL DEFAULT 0,
    lat_07           BIGINT NOT NULL DEFAULT 0,
    lat_08           BIGINT NOT NULL DEFAULT 0,
    lat_09           BIGINT NOT NULL DEFAULT 0,
    lat_10           BIGINT NOT NULL DEFAULT 0,
    lat_11           BIGINT NOT NULL DEFAULT 0,
    lat_12           BIGINT NOT NULL DEFAULT 0,
    lat_13           BIGINT NOT NULL DEFAULT 0,
    lat_14           BIGINT NOT NULL DEFAULT 0,
    lat_15           BIGINT NOT NULL DEFAULT 0,
    lat_16           BIGINT NOT NULL DEFAULT 0,
    lat_17           BIGINT NOT NULL DEFAULT 0,
    lat_18           BIGINT NOT NULL DEFAULT 0,
    lat_19           BIGINT NOT NULL DEFAULT 0,
    lat_20           BIGINT NOT NULL DEFAULT 0,
    lat_21           BIGINT NOT NULL DEFAULT 0,
    lat_22           BIGINT NOT NULL DEFAULT 0,
    lat_23           BIGINT NOT NULL DEFAULT 0,
    lat_24           BIGINT NOT NULL DEFAULT 0,
    lat_25           BIGINT NOT NULL DEFAULT 0,
    lat_26           BIGINT NOT NULL DEFAULT 0,
    lat_27           BIGINT NOT NULL DEFAULT 0,
    lat_28           BIGINT NOT NULL DEFAULT 0,
    lat_29           BIGINT NOT NULL DEFAULT 0,
    lat_30           BIGINT NOT NULL DEFAULT 0,
    lat_31           BIGINT NOT NULL DEFAULT 0,
    lat_32           BIGINT NOT NULL DEFAULT 0,
    lat_33           BIGINT NOT NULL DEFAULT 0,
    lat_34           BIGINT NOT NULL DEFAULT 0,
    lat_35           BIGINT NOT NULL DEFAULT 0,
    lat_36           BIGINT NOT NULL DEFAULT 0,
    lat_37           BIGINT NOT NULL DEFAULT 0,
    lat_38           BIGINT NOT NULL DEFAULT 0,
    lat_39           BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, bucket_secs, bucket_start, release, replica)
);
-- Retention deletes by age across tenants.
CREATE INDEX metric_buckets_by_age ON metric_buckets (bucket_secs, bucket_start);
