#!/bin/sh
# meson test rdma-vm: the ibverbs transport, and the ofi plugin over libfabric's verbs
# provider, on real verbs (SoftRoCE) in one qemu boot. RDMA_VM_SPEED=1 adds the speed
# references (perftest's ib_write_bw, about a minute, and ofi_speed.sh, 5 minutes more); RDMA_VM_ONLY=ofi runs the ofi plugin's
# checks alone (in_vm.sh).
# Skips (77) where qemu is not installed; .ci/deps installs it.
# Usage: run.sh TEST_CONFORMANCE TEST_MATRIX COLL_PERF LIBCOLLECTIVE [COLL_NET_CHECK OFI_PLUGIN]
# (the last two where libfabric-dev was found: in_vm.sh runs the ofi plugin on verbs too)
set -eu
command -v qemu-system-x86_64 >/dev/null || { echo "no qemu-system-x86_64: skipped"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$1" "$2" "$3" "$here/in_vm.sh" "$here/ofi_speed.sh" "$stage/"
cp -L "$4" "$stage/libcollective.so.0"
[ $# -lt 6 ] || cp "$5" "$6" "$stage/"
# Under meson's 1200 s: the ofi checks added 2-5 minutes to a run that took 9.5 under load.
VM_TIMEOUT=${VM_TIMEOUT:-1150} bash "$here/vm.sh" "$stage" \
  "RDMA_VM_SPEED=${RDMA_VM_SPEED:-0} RDMA_VM_ONLY=${RDMA_VM_ONLY:-} ./in_vm.sh"
