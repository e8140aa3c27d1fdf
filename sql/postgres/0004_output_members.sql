-- gdal-idem ledger, PostgreSQL, migration 0004: the files of a completed output besides the
-- primary one (sidecars: .aux.xml, .ovr, .msk, world files...), recorded at completion as
-- canonical JSON (an array of {"name", "size", "mtime_ns"} or, on object storage, {"name",
-- "size", "etag"}, sorted by name; "[]" when there are none). A skip, `pending` and `verify`
-- check every one of them, and that no other file has joined the output since. NULL on rows
-- completed before this migration: their sidecars were not recorded, so those rows check the
-- primary file only.

ALTER TABLE idem.ledger ADD COLUMN IF NOT EXISTS output_members text;
ALTER TABLE idem.ledger_history ADD COLUMN IF NOT EXISTS output_members text;
