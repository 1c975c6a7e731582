-- Replica sync by a sequence the database assigns, not by writers' clocks.
--
-- Every write of a record (create, update, status change, delete, forget, import, undo) first
-- advances `sync_sequence` ('memories') inside its transaction and stamps the rows it writes
-- (records, tombstones) with the new value. The row lock on the counter is held to commit, so
-- values are handed out in commit order: once a value is visible, so is every smaller one, and a
-- replica that has taken in everything up to N only ever needs rows stamped above N.
-- 'tombstones_pruned' holds the highest stamp of the tombstones deleted so far: a replica whose
-- cursor is below it may have missed a removal and reloads instead.
CREATE TABLE sync_sequence (
    name  TEXT   NOT NULL PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO sync_sequence (name, value) VALUES ('memories', 0);
INSERT INTO sync_sequence (name, value) VALUES ('tombstones_pruned', 0);

ALTER TABLE memories ADD COLUMN change_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE memory_tombstones ADD COLUMN change_seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX memories_by_change ON memories (change_seq);
CREATE INDEX memory_tombstones_by_change ON memory_tombstones (change_seq);
