-- Which records went away and when (delete, forget, undone import), so other replicas can drop
-- them from their in-memory index. Ids only: nothing of the erased content.
CREATE TABLE memory_tombstones (
    tenant    TEXT   NOT NULL,
    memory_id TEXT   NOT NULL,
    at        BIGINT NOT NULL
);
CREATE INDEX memory_tombstones_by_time ON memory_tombstones (at);
CREATE INDEX memories_by_update ON memories (updated_at);
