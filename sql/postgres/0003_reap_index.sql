-- gdal-idem ledger, PostgreSQL, migration 0003: the rows `gdal-idem reap` reads. A killed
-- worker's temporary directory lies beside the output of a row that is still in flight, or
-- that a later claim took over (attempt > 1); reap pages through these rows by key on this
-- small partial index instead of reading the whole ledger. The query must spell the predicate
-- the same way (filter_conditions in src/ledger/postgres_ledger.cpp).

CREATE INDEX ledger_in_flight_or_retried_idx ON idem.ledger (work_key)
    WHERE completed_at IS NULL OR attempt > 1;
