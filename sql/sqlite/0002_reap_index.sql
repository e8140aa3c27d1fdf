-- gdal-idem ledger, SQLite, migration 0002: the rows `gdal-idem reap` reads. A killed worker's
-- temporary directory lies beside the output of a row that is still in flight, or that a later
-- claim took over (attempt > 1); reap pages through these rows by key on this small partial
-- index instead of reading the whole ledger. SQLite uses a partial index only when the query
-- has the same term (filter_conditions in src/ledger/sqlite_ledger.cpp).

CREATE INDEX ledger_in_flight_or_retried_idx ON ledger (work_key)
    WHERE completed_at IS NULL OR attempt > 1;
