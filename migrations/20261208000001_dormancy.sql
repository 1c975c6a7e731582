-- Dormancy (`[records.dormancy]`) looks for the active records of one type that nobody used for
-- a while; this keeps its periodic sweep from reading every record of every tenant.
CREATE INDEX memories_by_type_status ON memories (record_type, status);
