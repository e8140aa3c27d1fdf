#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The random attacks of the invariants run longer than CI runs them:
#   bench/invariants.sh [BUILD_DIR] [SEEDS] [ROUNDS]
# Each of SEEDS seeds (default 5, seeds 1..SEEDS) plays ROUNDS rounds (default 40) of workers on
# three keys writing one PNG, killed and stopped at pause points, with the checks after every
# step that CI makes on its 6 rounds (I3, autotest/test_invariants.py), and ROUNDS more cases of
# the race generator of autotest/test_handles.py (a directory on the output's path, the ledger's
# or CPL_TMPDIR swapped for another user's link at a pause point; handles, not names). Writes its
# section of bench/RESULTS.md (between the invariants markers), leaving the other sections alone.
# Exits non-zero if any seed fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
seeds=${2:-5}
rounds=${3:-40}
[ -x "$build/src/gdal-idem" ] || { echo "invariants.sh: $build/src/gdal-idem not built" >&2; exit 1; }
export GDAL_DRIVER_PATH="$build/gdalplugins" IDEM_BUILD_DIR="$build"
passed=0
failed=()
start=$(date +%s)
for seed in $(seq 1 "$seeds"); do
  if IDEM_TEST_SEED=$seed IDEM_TEST_ROUNDS=$rounds /usr/bin/python3 -m pytest -q -p no:cacheprovider \
      "$root/autotest/test_invariants.py" -k random_schedules >/dev/null 2>&1 &&
     IDEM_TEST_SEED=$seed IDEM_TEST_RACES=$rounds /usr/bin/python3 -m pytest -q -p no:cacheprovider \
      "$root/autotest/test_handles.py" -k swapped_for_a_link >/dev/null 2>&1; then
    passed=$((passed + 1))
  else
    failed+=("$seed")
  fi
done
secs=$(( $(date +%s) - start ))
echo "invariants: $passed of $seeds seeds passed ($rounds rounds each) in ${secs}s${failed:+; failed seeds: ${failed[*]}}"

section=$(cat <<MD
<!-- invariants:begin -->
## Invariant attacks, long run (bench/invariants.sh)

$(date -u +%Y-%m-%d), $(nproc) cores, GDAL $(gdal-config --version), SQLite ledger.

| seeds | rounds per seed | schedules passed | wall time | failed seeds (rerun with IDEM_TEST_SEED=N IDEM_TEST_ROUNDS=$rounds) |
|---|---|---|---|---|
| $seeds | $rounds | $passed | ${secs} s | ${failed[*]:-none} |

The same tests CI runs with seed 44 and 6 rounds (under a minute): workers on three keys and one
destination, killed or stopped at every pause point, sources replaced between steps, the
destination's files and the ledger's rows checked after each step (invariant I3); and the race
generator's every pause point with each component swapped, to which a seed adds as many random
cases as rounds, one or two components swapped at once (handles, not names).
<!-- invariants:end -->
MD
)
/usr/bin/python3 "$here/replace_section.py" invariants "${IDEM_BENCH_RESULTS:-$root/bench/RESULTS.md}" "$section"
[ ${#failed[@]} -eq 0 ]
