#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The "pyramid" section of bench/RESULTS.md (bench/pyramid_bench.py) measured where GDAL has
# `gdal raster tile` (3.11 and later): in the Debian testing chroot of scripts/debian-chroot
# (GDAL 3.13 when this was written), with a Release build made there. The section the script
# writes inside the chroot is then put into this tree's bench/RESULTS.md.
#
#   bench/pyramid.sh            (bench/run's step pyramid; about 10 minutes with the build)
#
# IDEM_BENCH_PYRAMID_SUITE picks another suite; IDEM_BENCH_PYRAMID_TILES and
# IDEM_BENCH_PYRAMID_ROUNDS pass through. Needs root (the chroot), like the test matrix.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
suite=${IDEM_BENCH_PYRAMID_SUITE:-testing}
cache=${IDEM_CHROOT_CACHE:-/var/cache/gdal-idem/chroots}
results=/tmp/idem-pyramid-results.md
rm -f "$cache/$suite$results"
"$root/scripts/debian-chroot" "$suite" bash -c "
  make build BUILD_DIR=/build/idem-release BUILD_TYPE=Release >/tmp/idem-pyramid-build.log 2>&1 ||
    { tail -n 30 /tmp/idem-pyramid-build.log; exit 1; }
  rm -rf /tmp/idem-pyramid-work
  IDEM_BENCH_BUILD=/build/idem-release IDEM_BENCH_WORK=/tmp/idem-pyramid-work \
  IDEM_BENCH_RESULTS=$results IDEM_BENCH_SIZE=${IDEM_BENCH_SIZE:-8192} \
  IDEM_BENCH_PYRAMID_TILES=${IDEM_BENCH_PYRAMID_TILES:-484} \
  IDEM_BENCH_PYRAMID_ROUNDS=${IDEM_BENCH_PYRAMID_ROUNDS:-3} \
    /usr/bin/python3 bench/pyramid_bench.py >/dev/null
  rm -rf /tmp/idem-pyramid-work"
section=$(sed -n '/<!-- pyramid:begin -->/,/<!-- pyramid:end -->/p' "$cache/$suite$results")
if [ -z "$section" ]; then
  echo "bench/pyramid.sh: the chroot's run wrote no pyramid section" >&2
  exit 1
fi
/usr/bin/python3 "$here/replace_section.py" pyramid "${IDEM_BENCH_RESULTS:-$here/RESULTS.md}" "$section"
echo "$section"
