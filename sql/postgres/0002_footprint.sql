-- gdal-idem ledger, PostgreSQL, migration 0002: tile/work footprints (EPSG:4326) with a GiST
-- index. Conditional: applied only when PostGIS is installed in the database (the runner checks
-- pg_extension and retries on later `gdal-idem init` runs until it applies). Without PostGIS
-- everything else works and footprints are not stored.
-- idem:requires-extension postgis

ALTER TABLE idem.ledger ADD COLUMN footprint geometry(MultiPolygon, 4326);
ALTER TABLE idem.ledger ADD CONSTRAINT ledger_footprint_valid
    CHECK (footprint IS NULL OR (ST_IsValid(footprint) AND NOT ST_IsEmpty(footprint)));
CREATE INDEX ledger_footprint_gist ON idem.ledger USING gist (footprint);

ALTER TABLE idem.ledger_history ADD COLUMN footprint geometry(MultiPolygon, 4326);
