"""Offline stand-in for @rules_proto: Bazel 4.2.3's own tools load it."""

proto_lang_toolchain = native.proto_lang_toolchain
proto_library = native.proto_library
