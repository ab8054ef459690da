"""CUDA C++ compiled by the machine's nvcc: Bazel 4.2.3 has no CUDA rules, so one genrule per .cu."""

_NVCC = "/usr/local/cuda/bin/nvcc"

# Hopper only (H100/H200): sm_90a code, no PTX, so another GPU gets cudaErrorNoKernelImageForDevice.
# -fPIC: the build links every object as PIC (.bazelrc's --force_pic).
_NVCC_FLAGS = "-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC"

def titan_cuda_library(name, srcs, hdrs = [], cu_hdrs = [], deps = []):
    """A cc_library `name` of `srcs` (.cu) compiled by nvcc, linked against the CUDA runtime.

    Args:
      name: the cc_library.
      srcs: .cu files; keep LibTorch out of them (a .cc wrapper launches them).
      hdrs: the host-side API the .cu files define, for the library's users.
      cu_hdrs: the other headers the .cu files include (nvcc sees only what is listed).
      deps: cc_library targets that provide `hdrs`' own includes.
    """
    objects = []
    for src in srcs:
        obj = "_%s/%s.pic.o" % (name, src[:-len(".cu")])
        native.genrule(
            name = "_%s_%s" % (name, src[:-len(".cu")].replace("/", "_")),
            srcs = [src] + hdrs + cu_hdrs,
            outs = [obj],
            # nvcc names its temporaries in $TMPDIR after its pid, which the sandbox's pid
            # namespace makes the same for every genrule: each gets a directory of its own.
            cmd = ("tmp=$$(mktemp -d) && TMPDIR=$$tmp %s %s -I. -I$(GENDIR) -c $(location %s) " +
                   "-o $@; status=$$?; rm -rf $$tmp; exit $$status") % (_NVCC, _NVCC_FLAGS, src),
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
    )
