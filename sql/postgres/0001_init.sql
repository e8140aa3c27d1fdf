-- gdal-idem ledger, PostgreSQL, migration 0001: the schema, the live ledger, the source-digest
-- cache and the month-partitioned history. Applied by `gdal-idem init` (or lazily on first use)
-- inside one transaction; the runner records the version in idem.schema_version.
-- Every time in these tables comes from the database clock (now()), never from a worker.

CREATE SCHEMA IF NOT EXISTS idem;

CREATE TABLE IF NOT EXISTS idem.schema_version (
    version     integer     NOT NULL,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schema_version_pk PRIMARY KEY (version),
    CONSTRAINT schema_version_positive CHECK (version > 0)
);

-- One row per idempotency key. In flight while completed_at IS NULL.
CREATE TABLE idem.ledger (
    work_key          text        NOT NULL,
    namespace         text        NOT NULL,
    layer             text,
    tile_z            integer,
    tile_x            integer,
    tile_y            integer,
    claimed_at        timestamptz NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    completed_at      timestamptz,
    superseded_at     timestamptz,
    released_at       timestamptz,
    attempt           integer     NOT NULL,
    claim_token       text        NOT NULL,
    worker_host       text        NOT NULL,
    worker_pid        bigint      NOT NULL,
    output_uri        text        NOT NULL,
    output_size       bigint,
    output_mtime_ns   bigint,
    output_sha256     text,
    output_etag       text,
    feature_count     bigint,
    work_json         text        NOT NULL,
    CONSTRAINT ledger_pk PRIMARY KEY (work_key),
    CONSTRAINT ledger_work_key_not_empty CHECK (length(work_key) > 0),
    CONSTRAINT ledger_claim_token_not_empty CHECK (length(claim_token) > 0),
    CONSTRAINT ledger_output_uri_not_empty CHECK (length(output_uri) > 0),
    CONSTRAINT ledger_attempt_positive CHECK (attempt >= 1),
    CONSTRAINT ledger_tile_all_or_none
        CHECK ((tile_z IS NULL AND tile_x IS NULL AND tile_y IS NULL)
            OR (tile_z IS NOT NULL AND tile_x IS NOT NULL AND tile_y IS NOT NULL)),
    CONSTRAINT ledger_tile_range
        CHECK (tile_z IS NULL OR (tile_z >= 0 AND tile_x >= 0 AND tile_y >= 0)),
    CONSTRAINT ledger_lease_after_claim CHECK (lease_expires_at >= claimed_at),
    CONSTRAINT ledger_completed_has_fingerprint
        CHECK (completed_at IS NULL OR (output_size IS NOT NULL AND output_size >= 0)),
    CONSTRAINT ledger_superseded_only_completed
        CHECK (superseded_at IS NULL OR completed_at IS NOT NULL),
    CONSTRAINT ledger_released_only_in_flight
        CHECK (released_at IS NULL OR completed_at IS NULL),
    CONSTRAINT ledger_sha256_hex CHECK (output_sha256 IS NULL OR output_sha256 ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ledger_feature_count_not_negative CHECK (feature_count IS NULL OR feature_count >= 0)
);

-- The reaper finds abandoned work in one scan of this small index.
CREATE INDEX ledger_in_flight_idx ON idem.ledger (lease_expires_at) WHERE completed_at IS NULL;
-- Supersession on completion and forget_output look rows up by output.
CREATE INDEX ledger_output_uri_idx ON idem.ledger (output_uri);
CREATE INDEX ledger_namespace_layer_idx ON idem.ledger (namespace, layer);

-- Digests of source files, keyed like git's index: a hit needs the same path and the same
-- device, inode, size, mtime and ctime (nanoseconds). device/inode are unsigned in the kernel
-- and stored bit for bit in bigint.
CREATE TABLE idem.source_digest (
    path         text        NOT NULL,
    device       bigint      NOT NULL,
    inode        bigint      NOT NULL,
    size         bigint      NOT NULL,
    mtime_ns     bigint      NOT NULL,
    ctime_ns     bigint      NOT NULL,
    digest       text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT source_digest_pk PRIMARY KEY (path),
    CONSTRAINT source_digest_path_not_empty CHECK (length(path) > 0),
    CONSTRAINT source_digest_size_not_negative CHECK (size >= 0),
    CONSTRAINT source_digest_digest_not_empty CHECK (length(digest) > 0)
);

-- Completed rows moved out of the live table by retention (archive_completed / `gdal-idem
-- prune`). Partitioned by month of completion: dropping an old month is a DROP TABLE.
CREATE TABLE idem.ledger_history (
    work_key          text        NOT NULL,
    namespace         text        NOT NULL,
    layer             text,
    tile_z            integer,
    tile_x            integer,
    tile_y            integer,
    claimed_at        timestamptz NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    completed_at      timestamptz NOT NULL,
    superseded_at     timestamptz,
    released_at       timestamptz,
    attempt           integer     NOT NULL,
    claim_token       text        NOT NULL,
    worker_host       text        NOT NULL,
    worker_pid        bigint      NOT NULL,
    output_uri        text        NOT NULL,
    output_size       bigint,
    output_mtime_ns   bigint,
    output_sha256     text,
    output_etag       text,
    feature_count     bigint,
    work_json         text        NOT NULL,
    archived_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_history_pk PRIMARY KEY (work_key, completed_at)
) PARTITION BY RANGE (completed_at);

CREATE INDEX ledger_history_output_uri_idx ON idem.ledger_history (output_uri);

-- Create the monthly partitions (UTC months) that rows completed before `cutoff` need.
-- Called by archive_completed in the same transaction as the move.
CREATE FUNCTION idem.ensure_history_partitions(cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    month_start date;
    last_month  date;
    part_name   text;
    created     integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('idem.ensure_history_partitions'));
    SELECT date_trunc('month', min(completed_at) AT TIME ZONE 'UTC')::date INTO month_start
      FROM idem.ledger WHERE completed_at < cutoff;
    IF month_start IS NULL THEN
        RETURN 0;
    END IF;
    last_month := date_trunc('month', cutoff AT TIME ZONE 'UTC')::date;
    WHILE month_start <= last_month LOOP
        part_name := format('ledger_history_%s', to_char(month_start, 'YYYY_MM'));
        IF to_regclass(format('idem.%I', part_name)) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE idem.%I PARTITION OF idem.ledger_history FOR VALUES FROM (%L) TO (%L)',
                part_name,
                month_start::timestamp AT TIME ZONE 'UTC',
                (month_start + interval '1 month')::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
        month_start := (month_start + interval '1 month')::date;
    END LOOP;
    RETURN created;
END
$fn$;
