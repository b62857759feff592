#!/bin/sh
# perf/torch_ext/build.sh OUT_DIR: builds coll_ext (coll_backend.cpp) against torch 2.6's
# headers in the Debian 13 root (packages libtorch-dev g++ python3-dev pybind11-dev:
# TORCH2_PKGS adds them, see tests/torch2/chroot.sh); run inside the root, from the
# repository at /src. A measurement prototype: not part of the build or the install.
set -eu
out=${1:-build-torch/torch_ext}
mkdir -p "$out"
py=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
# torch's own ABI flag (Debian's is the C++11 ABI) and pybind11's, so the store and the
# backend cross the module boundary as torch's own types.
abi=$(python3 -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")
g++ -O2 -std=c++17 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=$abi \
    -I"$py" -Iinclude -I/usr/include/torch/csrc/api/include \
    perf/torch_ext/coll_backend.cpp -o "$out/coll_ext$suffix" \
    -L"$out" -l:libcollective.so.0 -Wl,-rpath,'$ORIGIN' \
    -ltorch -ltorch_cpu -lc10 -ltorch_python
echo "$out/coll_ext$suffix"
