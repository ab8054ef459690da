#!/bin/sh
echo "coverage tools are not available offline (third_party/bazel/remote_coverage_tools)" >&2
exit 1
