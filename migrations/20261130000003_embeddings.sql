-- One embedding per record, computed at write time from its content and aliases, with the id of
-- the model that made it: a record whose model_id differs from the running model is re-embedded.
-- The vector is little-endian f32 bytes, base64-encoded: text is the one type both databases
-- share without a dialect.
CREATE TABLE memory_embeddings (
    tenant    TEXT   NOT NULL,
    memory_id TEXT   NOT NULL,
    model_id  TEXT   NOT NULL,
    vector    TEXT   NOT NULL,
    PRIMARY KEY (tenant, memory_id)
);
