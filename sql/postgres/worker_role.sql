-- gdal-idem ledger, PostgreSQL: a least-privilege group role for workers (not a migration).
-- Run once as the owner of the idem schema, after `gdal-idem init`:
--     psql "$OWNER_DSN" -v ON_ERROR_STOP=1 -f worker_role.sql
-- then give each worker login its membership:
--     CREATE ROLE etl_worker LOGIN PASSWORD '...' IN ROLE idem_worker;
-- Workers can claim, heartbeat, complete, release, invalidate and forget rows, and read and write
-- the source-digest cache. They cannot change the schema, read or write the history, or run
-- retention: `gdal-idem init` and `gdal-idem prune` run as the owner. Idempotent.

DO $role$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'idem_worker') THEN
        CREATE ROLE idem_worker NOLOGIN;
    END IF;
END
$role$;

GRANT USAGE ON SCHEMA idem TO idem_worker;
GRANT SELECT ON idem.schema_version TO idem_worker;
-- DELETE: forget_key and forget_rows (gdal-idem forget, feature loads' replaced rows).
GRANT SELECT, INSERT, UPDATE, DELETE ON idem.ledger TO idem_worker;
GRANT SELECT, INSERT, UPDATE ON idem.source_digest TO idem_worker;
REVOKE ALL ON idem.ledger_history FROM idem_worker;
REVOKE ALL ON FUNCTION idem.ensure_history_partitions(timestamptz) FROM PUBLIC;
