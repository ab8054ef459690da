"""Finds LibTorch ($LIBTORCH, else the torch package in tools/setup.sh's environment)."""

_SETUP_HINT = "run tools/setup.sh first (or set LIBTORCH to an unzipped libtorch or a torch package dir)"

def _venv_dir(rctx):
    env = rctx.os.environ
    if env.get("TITAN_VENV"):
        return env["TITAN_VENV"]
    cache = env.get("XDG_CACHE_HOME") or (env.get("HOME", "") + "/.cache")
    return cache + "/titan/venv"

def _titan_env_impl(rctx):
    venv = _venv_dir(rctx)
    torch_dir = rctx.os.environ.get("LIBTORCH", "")
    if not torch_dir:
        found = rctx.execute(["sh", "-c", "ls -d " + venv + "/lib/python3*/site-packages/torch 2>/dev/null | head -n 1"])
        torch_dir = found.stdout.strip()
    if not torch_dir or not rctx.path(torch_dir + "/include/torch").exists:
        fail("LibTorch not found: " + _SETUP_HINT)
    # Every include entry but google/: LibTorch's bundled protobuf headers would shadow Debian's.
    for entry in rctx.path(torch_dir + "/include").readdir():
        if entry.basename != "google":
            rctx.symlink(entry, "include/" + entry.basename)
    rctx.symlink(torch_dir + "/lib", "lib")
    # The NCCL headers LibTorch was built against (ProcessGroupNCCL.hpp's layout depends on them).
    nccl_include = torch_dir + "/../nvidia/nccl/include"
    if rctx.path(nccl_include).exists:
        rctx.symlink(nccl_include, "nccl/include")
    # The CUDA runtime headers of the wheel's CUDA packages (c10/cuda's headers include them).
    for cuda_package in ["cu13", "cuda_runtime"]:
        cuda_include = torch_dir + "/../nvidia/" + cuda_package + "/include"
        if rctx.path(cuda_include + "/cuda_runtime_api.h").exists:
            rctx.symlink(cuda_include, "cuda/include")
            break
    # A wrapper, not a symlink: Python finds its venv (pyvenv.cfg) only from the path it started as.
    python = venv + "/bin/python3"
    if rctx.path(python).exists:
        rctx.file("python3", "#!/bin/sh\nexec '" + python + "' \"$@\"\n", executable = True)
    else:
        rctx.file("python3", "#!/bin/sh\necho 'no Python test environment: " + _SETUP_HINT + "' >&2\nexit 1\n", executable = True)
    rctx.file("BUILD", rctx.read(rctx.attr._build_template).replace("%{torch_lib}", torch_dir + "/lib"))

titan_env = repository_rule(
    implementation = _titan_env_impl,
    environ = ["LIBTORCH", "TITAN_VENV", "XDG_CACHE_HOME", "HOME"],
    local = True,
    attrs = {"_build_template": attr.label(default = "//third_party:titan_env.BUILD.tpl")},
)
