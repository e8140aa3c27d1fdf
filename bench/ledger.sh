#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Ledger benchmarks; run inside scripts/with-postgres (needs IDEM_TEST_PG_DSN):
#   scripts/with-postgres bench/ledger.sh [BUILD_DIR] [LOOKUP_ROWS]
# claim+complete pairs/s through our client with 1, 8 and 32 worker processes beside pgbench
# running the same SQL on the same server; SQLite pairs/s from 2 processes; lookup latency of a
# completed key among LOOKUP_ROWS rows (default 10,000,000, generated with generate_series).
# Writes its section of bench/RESULTS.md (between the ledger markers).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build-release}
rows=${2:-10000000}
runs=${IDEM_BENCH_RUNS:-3}
seconds=${IDEM_BENCH_SECONDS:-5}
bench="$build/bench/ledger_bench"
[ -x "$bench" ] || { echo "ledger.sh: $bench not built" >&2; exit 1; }
[ -n "${IDEM_TEST_PG_DSN:-}" ] || { echo "ledger.sh: run inside scripts/with-postgres" >&2; exit 1; }

db=idem_ledger_bench
psql -q -X -d "$IDEM_TEST_PG_DSN" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
dsn="$IDEM_TEST_PG_DSN dbname=$db"
"$bench" init "$dsn" >/dev/null
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

stats() {  # median min max of the numbers on stdin
  sort -g | awk '{v[NR]=$1} END {printf "%.0f %.0f %.0f", v[int((NR+1)/2)], v[1], v[NR]}'
}
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

declare -A ours theirs
for workers in 1 8 32; do
  : >"$scratch/ours" ; : >"$scratch/theirs"
  threads=$(( workers < $(nproc) ? workers : $(nproc) ))
  for _ in $(seq "$runs"); do
    "$bench" pairs "$dsn" "$workers" "$seconds" | field pairs_per_second >>"$scratch/ours"
    pgbench -n -M prepared -c "$workers" -j "$threads" -T "$seconds" -f "$here/ledger_pgbench.sql" \
      "$dsn" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\) .*/\1/p' >>"$scratch/theirs"
  done
  ours[$workers]=$(stats <"$scratch/ours")
  theirs[$workers]=$(stats <"$scratch/theirs")
done

: >"$scratch/sqlite"
for _ in $(seq "$runs"); do
  rm -f "$scratch"/ledger.sqlite*
  "$bench" pairs "sqlite:$scratch/ledger.sqlite" 2 "$seconds" | field pairs_per_second >>"$scratch/sqlite"
done
sqlite_stats=$(stats <"$scratch/sqlite")

# Lookup at scale: ROWS completed rows, then the latency of lookup() through our client.
psql -q -X -d "$dsn" -v ON_ERROR_STOP=1 >/dev/null <<SQL
TRUNCATE idem.ledger;
INSERT INTO idem.ledger (work_key, namespace, layer, claimed_at, lease_expires_at, completed_at,
  attempt, claim_token, worker_host, worker_pid, output_uri, output_size, output_mtime_ns, work_json)
SELECT 'gen-' || g, 'bench', 'tiles', now(), now(), now(), 1, 'tok-' || g, 'bench', 1,
       '/bench/gen-' || g || '.tif', 1048576, 1700000000000000000, '{"bench":true}'
FROM generate_series(1, $rows) AS g;
VACUUM ANALYZE idem.ledger;
SQL
lookup=$("$bench" lookup "$dsn" "$rows" 20000)

pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", 100 * a / b}'; }
met() { if [ "$1" = 1 ]; then echo "met"; else echo "NOT met"; fi; }
section="$scratch/section.md"
{
  echo "<!-- ledger:begin -->"
  echo "## Ledger (bench/ledger.sh)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)),"
  echo "$(uname -sr), $(psql -X -At -d "$dsn" -c 'SHOW server_version'), SQLite $(sqlite3 --version | cut -d' ' -f1),"
  echo "pgbench $(pgbench --version | awk '{print $3}'); build: \`$build\`. The PostgreSQL server is the"
  echo "throwaway pg_virtualenv cluster of scripts/with-postgres (fsync=off) on the same machine."
  echo "Each figure: median (min-max) of $runs runs of ${seconds} s. Commands:"
  echo "\`ledger_bench pairs DSN N $seconds\` (N processes, claim()+complete() of fresh keys through"
  echo "idem::Ledger) and \`pgbench -n -M prepared -c N -j min(N,cores) -T $seconds -f bench/ledger_pgbench.sql\`"
  echo "(the same two statements)."
  echo
  echo "| workers | ours pairs/s | pgbench pairs/s | ours / pgbench | target >= 80% |"
  echo "|---:|---:|---:|---:|:--|"
  for workers in 1 8 32; do
    read -r om omin omax <<<"${ours[$workers]}"
    read -r tm tmin tmax <<<"${theirs[$workers]}"
    ratio=$(pct "$om" "$tm")
    echo "| $workers | $om ($omin-$omax) | $tm ($tmin-$tmax) | ${ratio}% | $(met $(( ratio >= 80 ))) |"
  done
  read -r sm smin smax <<<"$sqlite_stats"
  echo
  echo "SQLite (WAL, synchronous=NORMAL, busy timeout), 2 processes: **$sm pairs/s** ($smin-$smax);"
  echo "target 5,000: $(met $(( sm >= 5000 )))."
  echo
  median=$(echo "$lookup" | field median_ms)
  echo "lookup() of a completed key among $rows rows (generate_series, then VACUUM ANALYZE), 20,000"
  echo "random keys through our client: median $median ms, p99 $(echo "$lookup" | field p99_ms) ms,"
  echo "min $(echo "$lookup" | field min_ms) ms, max $(echo "$lookup" | field max_ms) ms;"
  echo "target < 1 ms: $(met $(awk -v m="$median" 'BEGIN {print (m < 1) ? 1 : 0}'))."
  echo "<!-- ledger:end -->"
} >"$section"

results="${IDEM_BENCH_RESULTS:-$here/RESULTS.md}"
touch "$results"
if grep -q '<!-- ledger:begin -->' "$results"; then
  awk -v file="$section" '
    /<!-- ledger:begin -->/ {while ((getline line < file) > 0) print line; skip = 1; next}
    /<!-- ledger:end -->/ {skip = 0; next}
    !skip {print}' "$results" >"$scratch/results" && cp "$scratch/results" "$results"
else
  { [ -s "$results" ] && echo; cat "$section"; } >>"$results"
fi
cat "$section"
# bench/run keeps the 10M-row ledger (IDEM_BENCH_KEEP_DB=1) for its scale benchmark, and drops it.
if [ "${IDEM_BENCH_KEEP_DB:-0}" != 1 ]; then
  psql -q -X -d "$IDEM_TEST_PG_DSN" -c "DROP DATABASE IF EXISTS $db" >/dev/null
fi
