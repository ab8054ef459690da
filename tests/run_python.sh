#!/bin/bash
# sh_test entry for Python tests: runs the test environment's interpreter (first argument) on the
# rest (sh_test cannot name an interpreter as its binary).
exec "$@"
