-- gdal-idem ledger, SQLite, migration 0003: the files of a completed output besides the primary
-- one (sidecars: .aux.xml, .ovr, .msk, world files...), recorded at completion as canonical JSON
-- (an array of {"name", "size", "mtime_ns"} or, on object storage, {"name", "size", "etag"},
-- sorted by name; "[]" when there are none). A skip, `pending` and `verify` check every one of
-- them, and that no other file has joined the output since. NULL on rows completed before this
-- migration: their sidecars were not recorded, so those rows check the primary file only.

ALTER TABLE ledger ADD COLUMN output_members TEXT;
ALTER TABLE ledger_history ADD COLUMN output_members TEXT;
