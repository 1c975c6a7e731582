-- Who wrote a record's live version (`admin:<actor>`, `agent:<key id>`, …): what memgate's write
-- tools check before an agent changes or deletes a record. NULL for records written before it
-- was kept, and for imports.
ALTER TABLE memories ADD COLUMN author TEXT;
