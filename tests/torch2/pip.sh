#!/bin/sh
# meson test torch2-pip: tests/python/pip.sh (pip install of the tree into a venv, then a
# 2-rank all-reduce and collective.torch from the wheel) in the Debian 13 root of root.sh:
# its Python 3.13, meson-python and torch 2.6. The build tools join the root once, with
# libibverbs-dev as on Debian 12 (.ci/deps). Skips (77) as root.sh says.
# Usage: pip.sh SOURCE_ROOT
set -eu
src=$1
here=$(cd "$(dirname "$0")" && pwd)
export TORCH2_PKGS="${TORCH2_PKGS:-} gcc libc6-dev meson ninja-build pkg-config libuv1-dev libssl-dev libibverbs-dev python3-venv python3-pip python3-mesonpy"
. "$here/root.sh"

# What the root sees at /src: the source tree without build folders.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$stage" -xf -
cd "$stage"
sh "$here/chroot.sh" "$root" sh tests/python/pip.sh /src
