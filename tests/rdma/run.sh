#!/bin/sh
# meson test rdma-vm: the ibverbs transport on real verbs (SoftRoCE) in one qemu boot.
# Skips (77) where qemu is not installed; .ci/deps installs it.
# Usage: run.sh TEST_CONFORMANCE TEST_MATRIX COLL_PERF LIBCOLLECTIVE
set -eu
command -v qemu-system-x86_64 >/dev/null || { echo "no qemu-system-x86_64: skipped"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$1" "$2" "$3" "$here/in_vm.sh" "$stage/"
cp -L "$4" "$stage/libcollective.so.0"
bash "$here/vm.sh" "$stage" './in_vm.sh'
