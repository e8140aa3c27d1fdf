#!/bin/sh
# SPDX-License-Identifier: MIT
# Feature-load overhead: `gdal-idem load -- ogr2ogr ...` (staging copy, swap, completion in the
# same transaction) next to plain `ogr2ogr -overwrite` of the same point layer into the same
# PostGIS database, and the cost of a skipped rerun; writes the load section of bench/RESULTS.md.
# Usage: scripts/with-postgres bench/load.sh [BUILD_DIR] [FEATURES]
#        (default build-release, 1000000 features; RUNS=3 interleaved runs of each)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${1:-build-release}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
FEATURES=${2:-1000000}
RUNS=${RUNS:-3}
IDEM=$BUILD_DIR/src/gdal-idem
RESULTS=${IDEM_BENCH_RESULTS:-$ROOT/bench/RESULTS.md}
DSN=${IDEM_TEST_PG_DSN:?run under scripts/with-postgres}
WORK=$(mktemp -d /tmp/idem-load-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

[ -x "$IDEM" ] || { echo "load.sh: $IDEM not built" >&2; exit 1; }

# The layer: FEATURES points with an integer, a text and a real attribute, as a shapefile.
awk -v n="$FEATURES" 'BEGIN {print "id,name,val,x,y"; srand(1);
  for (i = 0; i < n; i++) printf "%d,road %d,%.3f,%.6f,%.6f\n", i, i, rand()*1000,
    rand()*360-180, rand()*170-85}' > "$WORK/points.csv"
ogr2ogr -f "ESRI Shapefile" "$WORK/points.shp" "$WORK/points.csv" -oo X_POSSIBLE_NAMES=x \
  -oo Y_POSSIBLE_NAMES=y -oo AUTODETECT_TYPE=YES -a_srs EPSG:4326 -nln points
BUNDLE_BYTES=$(cat "$WORK"/points.* | wc -c)
LEDGER="$DSN"  # the ledger in the target database: completion in the swap transaction

now() { date +%s.%N; }
: > "$WORK/plain"; : > "$WORK/idem"; : > "$WORK/skip"
i=0
while [ $i -lt "$RUNS" ]; do
  start=$(now)
  ogr2ogr -f PostgreSQL PG:"$DSN" "$WORK/points.shp" -nln plain_points -overwrite
  end=$(now); echo "$start $end" | awk '{printf "%.3f\n", $2-$1}' >> "$WORK/plain"
  # A fresh namespace per run: a full load every time (same key otherwise: a skip).
  start=$(now)
  "$IDEM" --ledger "$LEDGER" -q load --namespace "bench-$$-$i" -- ogr2ogr -f PostgreSQL \
    PG:"$DSN" "$WORK/points.shp" -nln idem_points
  end=$(now); echo "$start $end" | awk '{printf "%.3f\n", $2-$1}' >> "$WORK/idem"
  i=$((i + 1))
done
# Skipped reruns of the last load (the digest comes from the ledger's cache).
i=0
while [ $i -lt 7 ]; do
  start=$(now)
  "$IDEM" --ledger "$LEDGER" -q load --namespace "bench-$$-$((RUNS - 1))" -- ogr2ogr \
    -f PostgreSQL PG:"$DSN" "$WORK/points.shp" -nln idem_points
  end=$(now); echo "$start $end" | awk '{printf "%.3f\n", $2-$1}' >> "$WORK/skip"
  i=$((i + 1))
done
COUNT=$(psql "$DSN" -Atc "SELECT count(*) FROM idem_points")

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
range() { sort -g | awk '{v[NR]=$1} END {printf "%s-%s", v[1], v[NR]}'; }
PLAIN=$(median < "$WORK/plain"); IDEMT=$(median < "$WORK/idem"); SKIP=$(median < "$WORK/skip")
OVER=$(awk -v a="$IDEMT" -v b="$PLAIN" 'BEGIN {printf "%+.1f%%", 100*(a-b)/b}')
MET=$(awk -v a="$IDEMT" -v b="$PLAIN" 'BEGIN {print (a <= 1.10*b) ? "met" : "NOT met"}')

[ -f "$RESULTS" ] || printf '# Benchmark results\n\nRecorded by the scripts in bench/; newest sections last.\n' > "$RESULTS"
SECTION=$WORK/section
{
  echo "<!-- load:begin -->"
  echo "## Feature loads (bench/load.sh, $(date -u +%Y-%m-%d))"
  echo
  echo "- Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(uname -sr)"
  echo "- Versions: $(ogr2ogr --version); $(psql -At "$DSN" -c 'SHOW server_version'), PostGIS $(psql -At "$DSN" -c 'SELECT postgis_lib_version()'); gdal-idem $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') ($(basename "$BUILD_DIR"))"
  echo "- Server: the PostgreSQL of IDEM_TEST_PG_DSN (under scripts/with-postgres: its throwaway pg_virtualenv cluster, fsync=off) on the same machine"
  echo "- Layer: $FEATURES points (id, name, val), shapefile of $BUNDLE_BYTES bytes; $COUNT rows loaded"
  echo "- Commands ($RUNS interleaved runs each, median and min-max):"
  echo "  \`ogr2ogr -f PostgreSQL PG:... points.shp -nln plain_points -overwrite\` vs"
  echo "  \`gdal-idem --ledger PG:same-db load --namespace <fresh> -- ogr2ogr -f PostgreSQL PG:... points.shp -nln idem_points\`"
  echo "  (key with a full SHA-256 of the bundle, claim, staging copy, swap + completion in one transaction)"
  echo
  echo "| what | seconds |"
  echo "|---|---:|"
  echo "| plain ogr2ogr | $PLAIN ($(range < "$WORK/plain")) |"
  echo "| gdal-idem load (full) | $IDEMT ($(range < "$WORK/idem")) |"
  echo "| overhead | $OVER (target <= +10%: $MET) |"
  echo "| skipped rerun (key from the cached digest + one lookup), 7 runs | $SKIP ($(range < "$WORK/skip")) |"
  echo "<!-- load:end -->"
} > "$SECTION"
if grep -q '<!-- load:begin -->' "$RESULTS"; then
  awk -v section="$SECTION" '
    /<!-- load:begin -->/ {while ((getline line < section) > 0) print line; skip = 1; next}
    /<!-- load:end -->/ {skip = 0; next}
    !skip {print}' "$RESULTS" > "$RESULTS.tmp" && mv "$RESULTS.tmp" "$RESULTS"
else
  { echo; cat "$SECTION"; } >> "$RESULTS"
fi
echo "wrote the load section of $RESULTS:"
sed -n '/<!-- load:begin -->/,/<!-- load:end -->/p' "$RESULTS"
