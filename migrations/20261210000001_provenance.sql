-- Who wrote a record's live version and through what (`record::Provenance` as JSON: writer kind,
-- credential, request id, the subject named, the observer's evidence). Set by memgate, never by
-- a writer. NULL for rows written before it was kept: their kind is read from `author`.
ALTER TABLE memories ADD COLUMN provenance_json TEXT;
