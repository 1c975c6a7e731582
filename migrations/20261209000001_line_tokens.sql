-- A record's token count as the funnel's density layer counts it (`record::line_tokens`: cl100k
-- over the record's line). Fixed by the record's id, type and content, so it is written with
-- them and a replica's startup reads it instead of running the tokenizer over every record.
-- NULL for rows written before it was kept: those are counted when loaded.
ALTER TABLE memories ADD COLUMN line_tokens INTEGER;
