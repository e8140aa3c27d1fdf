#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `gdal-idem verify` on a ledger of N completed rows (default 10,000), without --checksum:
#   bench/verify.sh [BUILD_DIR] [ROWS]
# The ledger is produced by real IDEM runs: one Python process (osgeo.gdal) translating a tiny
# raster through the built plugin to N outputs under /vsiidem/. Writes its section of
# bench/RESULTS.md (between the verify markers), leaving the other sections alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
rows=${2:-10000}
cli="$build/src/gdal-idem"
[ -x "$cli" ] || { echo "verify.sh: $cli not built" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export GDAL_DRIVER_PATH="$build/gdalplugins"
export IDEM_LEDGER="sqlite:$scratch/ledger.sqlite"

start=$(date +%s.%N)
/usr/bin/python3 - "$scratch" "$rows" <<'PY'
import os, sys
from osgeo import gdal, osr
gdal.UseExceptions()
scratch, rows = sys.argv[1], int(sys.argv[2])
src = gdal.GetDriverByName("MEM").Create("", 16, 16, 1)
src.SetGeoTransform([500000, 10, 0, 4600000, 0, -10])
srs = osr.SpatialReference(); srs.ImportFromEPSG(32631)
src.SetProjection(srs.ExportToWkt())
src.GetRasterBand(1).Fill(7)
gdal.Translate(f"{scratch}/tiny.tif", src)
tiny = gdal.Open(f"{scratch}/tiny.tif")
for i in range(rows):
    directory = f"{scratch}/out/{i // 100}"
    os.makedirs(directory, exist_ok=True)
    gdal.Translate(f"/vsiidem/{directory}/{i}.tif", tiny, format="IDEM", width=16, height=16)
PY
built=$(date +%s.%N)
completed=$("$cli" --json status | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["completed"])')
best=""
for run in 1 2 3; do
  t0=$(date +%s.%N)
  "$cli" -q --json verify > "$scratch/verify.json"
  t1=$(date +%s.%N)
  secs=$(echo "$t1 - $t0" | bc -l)
  if [ -z "$best" ] || [ "$(echo "$secs < $best" | bc -l)" = 1 ]; then best=$secs; fi
done
ok=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ok"], d["failed"])' "$scratch/verify.json")
build_secs=$(printf '%.1f' "$(echo "$built - $start" | bc -l)")
best=$(printf '%.2f' "$best")
echo "verify: $completed completed rows (built in ${build_secs}s), best of 3: ${best}s (ok/failed: $ok)"

section=$(cat <<MD
<!-- verify:begin -->
## \`gdal-idem verify\` (bench/verify.sh)

$(date -u +%Y-%m-%d), $(nproc) cores, GDAL $(gdal-config --version), SQLite ledger.

| rows (completed) | ledger built by real IDEM runs | \`verify\` (no --checksum), best of 3 | ok / failed |
|---|---|---|---|
| $completed | ${build_secs} s | ${best} s | ${ok/ / \/ } |

Per row: stat + fingerprint comparison, parse of the canonical work JSON, GDALOpen with size
and band count checked. Target: under 10 s for 10,000 rows.
<!-- verify:end -->
MD
)
/usr/bin/python3 "$here/replace_section.py" verify "${IDEM_BENCH_RESULTS:-$root/bench/RESULTS.md}" "$section"
