#!/bin/sh
# SPDX-License-Identifier: MIT
# Content-digest throughput of gdal-idem (bench/digest_bench.cpp) next to `openssl dgst -sha256` on the
# same 1 GiB file, and a digest-cache hit; writes a section into bench/RESULTS.md.
# Usage: bench/digest.sh [BUILD_DIR] (default build-release; build it with
#        cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release && cmake --build build-release)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${1:-build-release}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
BENCH=$BUILD_DIR/bench/digest_bench
FILE=${IDEM_BENCH_FILE:-/tmp/idem-digest-bench.bin}
RUNS=${RUNS:-5}
RESULTS=${IDEM_BENCH_RESULTS:-$ROOT/bench/RESULTS.md}
export IDEM_BENCH_FILE=$FILE

[ -x "$BENCH" ] || { echo "digest.sh: $BENCH not built" >&2; exit 1; }
if [ ! -f "$FILE" ]; then
  head -c 1073741824 /dev/urandom > "$FILE"
fi
SIZE=$(stat -c %s "$FILE")
cat "$FILE" > /dev/null  # page cache warm for both tools: this measures hashing, not the disk

# median and min-max of a list of numbers, one per line
stats() { sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2;
  printf "%.0f MB/s (min %.0f, max %.0f, n=%d)", m, v[1], v[NR], NR}'; }

# Interleave the two tools so drifts in machine load hit both alike.
: > /tmp/idem-digest-openssl.$$
: > /tmp/idem-digest-idem.$$
i=0
while [ $i -lt "$RUNS" ]; do
  start=$(date +%s.%N); openssl dgst -sha256 "$FILE" > /dev/null; end=$(date +%s.%N)
  echo "$SIZE $start $end" | awk '{printf "%.1f\n", $1/($3-$2)/1e6}' >> /tmp/idem-digest-openssl.$$
  "$BENCH" --benchmark_filter=bm_sha256_file --benchmark_repetitions=1 \
    --benchmark_format=csv 2>/dev/null | awk -F, '/bm_sha256_file/ && !/_(mean|median|stddev|cv)/ {printf "%.1f\n", $(NF-4)/1e6}' \
    >> /tmp/idem-digest-idem.$$
  i=$((i + 1))
done
OPENSSL=$(stats < /tmp/idem-digest-openssl.$$)
IDEM=$(stats < /tmp/idem-digest-idem.$$)
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
RATIO=$(awk -v a="$(median < /tmp/idem-digest-idem.$$)" -v b="$(median < /tmp/idem-digest-openssl.$$)" \
  'BEGIN {printf "%.1f%%", 100*a/b}')
HIT=$("$BENCH" --benchmark_filter=bm_digest_cache_hit --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null |
  awk -F, '/_median/ {printf "%.1f us median", $3} /_stddev/ {printf " (stddev %.1f us)", $3}')
rm -f /tmp/idem-digest-openssl.$$ /tmp/idem-digest-idem.$$

[ -f "$RESULTS" ] || printf '# Benchmark results\n\nRecorded by the scripts in bench/; newest sections last.\n' > "$RESULTS"
SECTION=/tmp/idem-digest-section.$$
{
  echo "<!-- digest:begin -->"
  echo "## Source digest (bench/digest.sh, $(date -u +%Y-%m-%d))"
  echo
  echo "- Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(grep -o -m1 sha_ni /proc/cpuinfo || echo 'no sha_ni'); $(uname -sr)"
  echo "- Versions: $(openssl version); gdal-idem $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') ($(basename "$BUILD_DIR"))"
  echo "- File: $FILE, $SIZE bytes, in the page cache"
  echo "- Commands: \`openssl dgst -sha256 $FILE\` vs \`bench/digest_bench --benchmark_filter=bm_sha256_file\` ($RUNS interleaved runs each)"
  echo
  echo "| what | result |"
  echo "|---|---|"
  echo "| openssl dgst -sha256 | $OPENSSL |"
  echo "| gdal-idem content_digest_of_file (SHA-256 of 1 MiB pieces, one thread per core, then of their digests) | $IDEM |"
  echo "| gdal-idem / openssl (medians; one SHA-256 stream is one core's work) | $RATIO (target >= 90%) |"
  echo "| digest cache hit on the same file (stat + lookup) | $HIT (target < 1 ms) |"
  echo "<!-- digest:end -->"
} > "$SECTION"
# Replace this script's previous section (between its markers), or append one.
if grep -q '<!-- digest:begin -->' "$RESULTS"; then
  awk -v section="$SECTION" '
    /<!-- digest:begin -->/ {while ((getline line < section) > 0) print line; skip = 1; next}
    /<!-- digest:end -->/ {skip = 0; next}
    !skip {print}' "$RESULTS" > "$RESULTS.tmp" && mv "$RESULTS.tmp" "$RESULTS"
else
  { echo; cat "$SECTION"; } >> "$RESULTS"
fi
rm -f "$SECTION"
echo "wrote the digest section of $RESULTS:"
sed -n '/<!-- digest:begin -->/,/<!-- digest:end -->/p' "$RESULTS"
