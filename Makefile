# gdal-idem: the README's commands. Works on a fresh Debian 12 machine as root.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc)
PLUGIN_DIR = $(abspath $(BUILD_DIR))/gdalplugins

.PHONY: all deps build test unit-test py-test format format-check tidy test-matrix matrix-prepare test-matrix-ci package-test deb demo install bench clean

all: build

deps:
	@scripts/install-deps

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS)

# Every test, against a throwaway PostgreSQL + PostGIS cluster (pg_virtualenv) and real SQLite
# files: the C++ unit and conformance tests through ctest, then the pytest suite through the
# real gdalwarp, gdal_translate, osgeo.gdal and rasterio with the freshly built plugin.
test: build
	scripts/with-postgres $(MAKE) --no-print-directory unit-test py-test

unit-test:
	GDAL_DRIVER_PATH=$(PLUGIN_DIR) ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

# The 30 slowest tests are listed at the end: CI's time budget is spent by them.
PYTEST_FILES ?= autotest
py-test:
	GDAL_DRIVER_PATH=$(PLUGIN_DIR) IDEM_BUILD_DIR=$(abspath $(BUILD_DIR)) \
	  $(PYTHON) -m pytest $(PYTEST_FILES) -q -p no:cacheprovider --durations=30

# The C++ sources in the style of .clang-format (Debian 12's clang-format 14): `format` rewrites
# them, `format-check` lists what differs and fails (CI runs it).
CXX_SOURCES = $(shell git ls-files '*.cpp' '*.hpp')
format: deps
	clang-format -i $(CXX_SOURCES)

format-check: deps
	clang-format --dry-run --Werror $(CXX_SOURCES)
	scripts/spdx
	scripts/file-sizes
	scripts/code-rules

# clang-tidy (.clang-tidy) on the C++ outside the tests: every file, or with TIDY_BASE=REV the
# files changed since REV (scripts/tidy). CI runs it on every file.
tidy: build
	TIDY_BASE=$(TIDY_BASE) scripts/tidy $(BUILD_DIR)

# The Debian package of this build, installed, smoke-tested and driver-tested with no
# GDAL_DRIVER_PATH, then removed (scripts/package-test; as root).
package-test: build
	scripts/package-test $(BUILD_DIR)

# The suite and the package test again on the other Debian releases, each with its own GDAL
# (trixie: 3.10, testing: 3.13), in debootstrap chroots kept in /var/cache/gdal-idem/chroots
# (scripts/test-matrix, scripts/debian-chroot): the chroots and builds first, one after another,
# then every release's tests at once, each in a network namespace of its own (MATRIX_JOBS=1: one
# after another). Every C++ test runs there, and the pytest suite's matrix share
# (IDEM_TEST_SHARE=smoke, autotest/conftest.py): every test but the slow ones marked whole_only,
# which run in Debian 12's `make test` only (of the orchestrator tests, Prefect's retry and Dask's
# rescheduling stay, with the package's Prefect and Dagster tests; of the many-hosts tests, the
# baseline and the cut-off worker; of the tests taking every ledger kind, SQLite and PostgreSQL).
# The package test there installs the package, runs its smoke test and the Python package's tests
# (the driver's tests against the installed plugin run on Debian 12).
MATRIX_SUITES ?= trixie testing
test-matrix:
	scripts/test-matrix $(MATRIX_SUITES)

# The chroots of test-matrix made and the build done in each, nothing tested: `test-matrix` then
# starts at its tests. CI (.ci/run) runs it in the background, at the lowest CPU priority, while
# Debian 12's tests run.
matrix-prepare:
	@for suite in $(MATRIX_SUITES); do \
	  echo "matrix-prepare: Debian $$suite"; \
	  scripts/debian-chroot $$suite make build BUILD_DIR=/build/idem || exit 1; \
	done

# CI's share of the matrix (.ci/run): on each newer GDAL, the build (warnings are errors), every
# C++ test, and the pytest files that exercise what differs between GDAL releases: keys, the
# warp, /vsiidem/, the driver's entry points, the `gdal` command and the safety rules.
MATRIX_CI_TESTS = autotest/test_key_golden.py autotest/test_warp_engine.py \
  autotest/test_vsiidem.py autotest/test_idem_driver.py autotest/test_gdal_cli.py \
  autotest/test_safety.py
test-matrix-ci:
	@for suite in $(MATRIX_SUITES); do \
	  echo "test-matrix-ci: Debian $$suite"; \
	  scripts/debian-chroot $$suite bash -c \
	    'make build BUILD_DIR=/build/idem && scripts/with-postgres make --no-print-directory \
	       unit-test py-test BUILD_DIR=/build/idem PYTEST_FILES="$(MATRIX_CI_TESTS)"' || exit 1; \
	done

demo: build
	GDAL_DRIVER_PATH=$(PLUGIN_DIR) IDEM_BUILD_DIR=$(abspath $(BUILD_DIR)) scripts/demo

# A Debian package of this build for this machine's release: $(BUILD_DIR)/gdal-idem_*.deb.
deb: build
	cd $(BUILD_DIR) && cpack -G DEB >/dev/null
	@ls $(BUILD_DIR)/gdal-idem_*.deb

install: build
	cmake --install $(BUILD_DIR)

bench:
	$(MAKE) build BUILD_DIR=build-release BUILD_TYPE=Release
	IDEM_PG_FSYNC=on scripts/with-postgres bench/run build-release

clean:
	rm -rf $(BUILD_DIR) build-release
