#!/bin/bash
# sh_test entry for Python tests: runs the test environment's interpreter (first argument) on the
# rest (sh_test cannot name an interpreter as its binary). `bazel test --test_filter=NAME` runs
# only the unittest tests whose names contain NAME.
exec "$@" ${TESTBRIDGE_TEST_ONLY:+-k "$TESTBRIDGE_TEST_ONLY"}
