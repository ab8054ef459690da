"""C++ from a .proto with Debian's protoc: proto_library would need the downloaded protobuf repo."""

def titan_cc_proto_library(name, src, deps = []):
    """Generates <src>.pb.{h,cc} and a cc_library `name` holding them."""
    base = src[:-len(".proto")]
    native.genrule(
        name = name + "_cc",
        srcs = [src],
        outs = [base + ".pb.cc", base + ".pb.h"],
        # -I/usr/include: descriptor.proto for custom options.
        cmd = "protoc -I. -I/usr/include --cpp_out=$(GENDIR) $(location %s)" % src,
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        deps = ["//third_party:protobuf"] + deps,
    )
