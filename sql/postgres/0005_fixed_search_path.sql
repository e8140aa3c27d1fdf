-- gdal-idem ledger, PostgreSQL, migration 0005: the ledger's function runs with a fixed
-- search_path. `gdal-idem prune` calls idem.ensure_history_partitions() with the rights of the
-- role running it (SECURITY INVOKER, PostgreSQL's default, said here); its unqualified names
-- (format, to_char, date_trunc...) must resolve to PostgreSQL's own functions whatever
-- search_path that session has (a database's or role's default may name a schema another role
-- controls). Every ledger object belongs to the schema's owner: each open checks it
-- (docs/ledger.md, "Who owns the ledger"). Workers and read-only commands do not call that
-- function: they run on a ledger without this migration until the owner's init applies it.
-- idem:readers-need-not

ALTER FUNCTION idem.ensure_history_partitions(timestamptz) SECURITY INVOKER;
ALTER FUNCTION idem.ensure_history_partitions(timestamptz) SET search_path = pg_catalog, pg_temp;
