-- gdal-idem ledger, SQLite, migration 0001: the live ledger, the source-digest cache and the
-- history table. Applied by `gdal-idem init` (or lazily on first use) inside one BEGIN IMMEDIATE
-- transaction; the runner records the version in schema_version.
-- Times are REAL seconds since the Unix epoch (UTC), taken from SQLite's clock in the statement
-- that writes them, never passed by the client.

CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    applied_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    CONSTRAINT schema_version_pk PRIMARY KEY (version),
    CONSTRAINT schema_version_positive CHECK (version > 0)
);

-- One row per idempotency key. In flight while completed_at IS NULL.
CREATE TABLE ledger (
    work_key          TEXT    NOT NULL,
    namespace         TEXT    NOT NULL,
    layer             TEXT,
    tile_z            INTEGER,
    tile_x            INTEGER,
    tile_y            INTEGER,
    claimed_at        REAL    NOT NULL,
    lease_expires_at  REAL    NOT NULL,
    completed_at      REAL,
    superseded_at     REAL,
    released_at       REAL,
    attempt           INTEGER NOT NULL,
    claim_token       TEXT    NOT NULL,
    worker_host       TEXT    NOT NULL,
    worker_pid        INTEGER NOT NULL,
    output_uri        TEXT    NOT NULL,
    output_size       INTEGER,
    output_mtime_ns   INTEGER,
    output_sha256     TEXT,
    output_etag       TEXT,
    feature_count     INTEGER,
    work_json         TEXT    NOT NULL,
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
    CONSTRAINT ledger_sha256_hex
        CHECK (output_sha256 IS NULL
            OR (length(output_sha256) = 64 AND NOT output_sha256 GLOB '*[^0-9a-f]*')),
    CONSTRAINT ledger_feature_count_not_negative CHECK (feature_count IS NULL OR feature_count >= 0)
) WITHOUT ROWID;

-- The reaper finds abandoned work in one scan of this small index.
CREATE INDEX ledger_in_flight_idx ON ledger (lease_expires_at) WHERE completed_at IS NULL;
-- Supersession on completion and forget_output look rows up by output.
CREATE INDEX ledger_output_uri_idx ON ledger (output_uri);
CREATE INDEX ledger_namespace_layer_idx ON ledger (namespace, layer);

-- Digests of source files, keyed like git's index (path + device, inode, size, mtime, ctime).
-- device/inode are unsigned in the kernel and stored bit for bit in INTEGER.
CREATE TABLE source_digest (
    path         TEXT    NOT NULL,
    device       INTEGER NOT NULL,
    inode        INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    ctime_ns     INTEGER NOT NULL,
    digest       TEXT    NOT NULL,
    recorded_at  REAL    NOT NULL,
    CONSTRAINT source_digest_pk PRIMARY KEY (path),
    CONSTRAINT source_digest_path_not_empty CHECK (length(path) > 0),
    CONSTRAINT source_digest_size_not_negative CHECK (size >= 0),
    CONSTRAINT source_digest_digest_not_empty CHECK (length(digest) > 0)
) WITHOUT ROWID;

-- Completed rows moved out of the live table by retention (archive_completed / `gdal-idem prune`).
CREATE TABLE ledger_history (
    work_key          TEXT    NOT NULL,
    namespace         TEXT    NOT NULL,
    layer             TEXT,
    tile_z            INTEGER,
    tile_x            INTEGER,
    tile_y            INTEGER,
    claimed_at        REAL    NOT NULL,
    lease_expires_at  REAL    NOT NULL,
    completed_at      REAL    NOT NULL,
    superseded_at     REAL,
    released_at       REAL,
    attempt           INTEGER NOT NULL,
    claim_token       TEXT    NOT NULL,
    worker_host       TEXT    NOT NULL,
    worker_pid        INTEGER NOT NULL,
    output_uri        TEXT    NOT NULL,
    output_size       INTEGER,
    output_mtime_ns   INTEGER,
    output_sha256     TEXT,
    output_etag       TEXT,
    feature_count     INTEGER,
    work_json         TEXT    NOT NULL,
    archived_at       REAL    NOT NULL,
    CONSTRAINT ledger_history_pk PRIMARY KEY (work_key, completed_at)
);

CREATE INDEX ledger_history_completed_at_idx ON ledger_history (completed_at);
CREATE INDEX ledger_history_output_uri_idx ON ledger_history (output_uri);
