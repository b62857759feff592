#!/usr/bin/env bash
# vm.sh DIR COMMAND: boots Debian's stock kernel under qemu (TCG: this host's kernel has no
# RDMA support and its /dev/kvm cannot boot a stock kernel), brings up SoftRoCE (rdma_rxe
# on a dummy netdev), and runs COMMAND in a copy of DIR with RDMA_DEV, RDMA_GID_INDEX and
# RDMA_IP set. Exits with COMMAND's status; 124 on timeout, 125 if the VM itself failed.
# Downloads (the kernel, rdma-core's and libfabric's userland, ~77 MB, with apt-get
# download) are kept in $COLL_RDMA_CACHE (default /var/cache/libcollective-rdma, outside
# any clone).
# Learned from ../shared/rdma-vm (module list, PVH boot of the unpacked vmlinux, GID index).
set -euo pipefail
DIR=$(cd "$1" && pwd)
CMD=$2
TIMEOUT=${VM_TIMEOUT:-900}
CACHE=${COLL_RDMA_CACHE:-/var/cache/libcollective-rdma}
mkdir -p "$CACHE/debs" 2>/dev/null || { CACHE=${TMPDIR:-/tmp}/libcollective-rdma; mkdir -p "$CACHE/debs"; }
log() { echo "vm.sh: $*" >&2; }

USER_PKGS="busybox-static libibverbs1 ibverbs-providers ibverbs-utils perftest librdmacm1
libnl-3-200 libnl-route-3-200 iproute2 libmnl0 libpci3"
# libfabric (its verbs provider, for transports/ofi) and what libfabric1 links beyond the
# above (apt-cache depends libfabric1, and of those): 1 MB of .debs.
USER_PKGS="$USER_PKGS libfabric1 libfabric-bin libpsm2-2 libpsm-infinipath1 libnuma1 libatomic1"
KPKG=$(cd "$CACHE/debs" && ls linux-image-*-amd64_*.deb 2>/dev/null | sort -V | tail -1 | cut -d_ -f1 || true)
[ -n "$KPKG" ] || KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
                         awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$KPKG" ] || { apt-get update -qq; KPKG=$(apt-cache depends linux-image-amd64 |
                    awk '/Depends: linux-image-[0-9]/ {print $2; exit}'); }
KVER=${KPKG#linux-image-}
for p in $KPKG $USER_PKGS; do
  ls "$CACHE/debs/${p}"_*.deb >/dev/null 2>&1 && continue
  log "downloading $p"
  (cd "$CACHE/debs" && apt-get download -q "$p" >/dev/null 2>&1) ||
    (apt-get update -qq && cd "$CACHE/debs" && apt-get download -q "$p" >/dev/null)
done

# The kernel, unpacked once: an ELF vmlinux (qemu boots it through the PVH entry point,
# skipping real mode and the XZ decompression that takes seconds under TCG) and the
# modules rxe needs, in dependency order from each module's .modinfo.
# rdma_ucm: rdma_cm from user space (/dev/infiniband/rdma_cm), which libfabric's verbs
# provider connects with. The list is part of the directory's name, so a cache unpacked
# for another list is left as it is (a run of the older script may be reading it).
MODS="rdma_rxe rdma_ucm ib_uverbs crc32_generic dummy"
K=$CACHE/kernel-$KVER-$(echo "$MODS" | cksum | cut -d' ' -f1)
if [ ! -f "$K/done" ]; then
  log "unpacking $KPKG"
  rm -rf "$K" && mkdir -p "$K/mods" "$K/x"
  dpkg-deb -x "$CACHE/debs/${KPKG}"_*.deb "$K/x"
  off=$(LC_ALL=C grep -obUaP '\xFD7zXZ\x00' "$K/x/boot/vmlinuz-$KVER" | head -1 | cut -d: -f1)
  tail -c +$((off + 1)) "$K/x/boot/vmlinuz-$KVER" | xz -dc --single-stream > "$K/vmlinux" 2>/dev/null || true
  declare -A where=() seen=()
  while read -r f; do b=$(basename "$f" .ko); where[${b//-/_}]=$f; done \
    < <(find "$K/x/lib/modules" -name '*.ko')
  add() {
    local n=${1//-/_} d
    [ -n "${seen[$n]:-}" ] && return 0
    seen[$n]=1
    [ -n "${where[$n]:-}" ] || return 0 # built in
    for d in $(objcopy -O binary --only-section=.modinfo "${where[$n]}" /dev/stdout |
               tr '\0' '\n' | sed -n 's/^depends=//p' | tr , ' '); do add "$d"; done
    cp "${where[$n]}" "$K/mods/$n.ko"
    echo "$n" >> "$K/mods/order"
  }
  for m in $MODS; do add $m; done
  rm -rf "$K/x"
  touch "$K/done"
fi
# The package list is part of the name, as the kernel's module list is.
U=$CACHE/userland-$(echo $USER_PKGS | cksum | cut -d' ' -f1)
if [ ! -f "$U/done" ]; then
  rm -rf "$U" && mkdir -p "$U"
  for p in $USER_PKGS; do dpkg-deb -x "$CACHE/debs/${p}"_*.deb "$U"; done
  touch "$U/done"
fi

# The initramfs: busybox, the modules, rdma-core's tools and rxe provider, bash, DIR as
# /t, and every shared library those need (ldd, userland first, then the host: same
# Debian release).
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
R=$B/root
mkdir -p "$R"/{bin,sbin,usr/bin,proc,sys,dev,tmp,etc,mods,etc/libibverbs.d}
cp "$U/bin/busybox" "$R/bin/"
cp "$K"/mods/* "$R/mods/"
cp "$U"/etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
mkdir -p "$R/usr/lib/x86_64-linux-gnu/libibverbs"
cp "$U"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so "$R/usr/lib/x86_64-linux-gnu/libibverbs/"
cp -a "$DIR" "$R/t"
LIBPATH=$DIR:$U/usr/lib/x86_64-linux-gnu:$U/lib/x86_64-linux-gnu
libs_of() {
  { LD_LIBRARY_PATH=$LIBPATH ldd "$1" 2>/dev/null || true; } | sed -n 's/.*=> \(\/[^ ]*\).*/\1/p; s/^\s*\(\/[^ ]*\) (0x.*/\1/p' |
  while read -r l; do
    case $l in "$DIR"/*) continue;; esac
    d=${l#"$U"}
    [ -e "$R$d" ] || { mkdir -p "$R$(dirname "$d")"; cp -L "$l" "$R$d"; }
  done
}
put() { mkdir -p "$R$(dirname "$2")"; cp -L "$1" "$R$2"; libs_of "$1"; }
for f in "$U"/usr/bin/ibv_devinfo "$U"/usr/bin/ib_write_bw; do put "$f" "/usr/bin/$(basename "$f")"; done
put "$U/usr/bin/rdma" /usr/bin/rdma
for f in fi_info fi_pingpong; do put "$U/usr/bin/$f" "/usr/bin/$f"; done
put "$U/bin/ip" /sbin/ip
put /bin/bash /bin/bash
for f in "$R"/usr/lib/x86_64-linux-gnu/libibverbs/*.so; do libs_of "$f"; done
while read -r f; do libs_of "$f"; done < <(find "$DIR" -type f -perm -u+x)
for f in /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libnss_files.so.2; do
  mkdir -p "$R$(dirname "$f")" && cp -L "$f" "$R$f" # dlopen()ed by glibc: ldd misses them
done
printf 'hosts: files\n' > "$R/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n' > "$R/etc/hosts"
printf '%s\n' "$CMD" > "$R/cmd"
cat > "$R/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/t:/usr/bin:/sbin:/bin HOME=/tmp LD_LIBRARY_PATH=/t
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmpfs /tmp; mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
bye() { echo "VM_STATUS=$1" > /dev/ttyS1; sync; poweroff -f; }
for m in $(cat /mods/order); do
  a=; [ "$m" = dummy ] && a=numdummies=0
  insmod /mods/$m.ko $a || { echo "insmod $m failed"; bye 125; }
done
/sbin/ip link set lo up
/sbin/ip link add rdma0 type dummy && /sbin/ip addr add 10.99.0.1/24 dev rdma0 &&
  /sbin/ip link set rdma0 up || bye 125
/usr/bin/rdma link add rxe0 type rxe netdev rdma0 || bye 125
GID=
for try in 1 2 3 4 5 6 7 8 9 10; do # the RoCEv2 GID ::ffff:10.99.0.1
  for i in 0 1 2 3; do
    read -r g < /sys/class/infiniband/rxe0/ports/1/gids/$i 2>/dev/null || g=
    [ "$g" = 0000:0000:0000:0000:0000:ffff:0a63:0001 ] && GID=$i
  done
  [ -n "$GID" ] && break
  sleep 0.5
done
[ -n "$GID" ] || { echo "rxe0 has no IPv4 GID"; bye 125; }
ulimit -l unlimited
export RDMA_DEV=rxe0 RDMA_GID_INDEX=$GID RDMA_IP=10.99.0.1
echo "VM: rxe0 up (GID index $GID) at $(cut -d' ' -f1 /proc/uptime) s"
cd /t && /bin/bash /cmd < /dev/null
bye $?
EOF
chmod +x "$R/init"
(cd "$R" && find . -print0 | "$U/bin/busybox" cpio -o -0 -H newc -R 0:0 2>/dev/null) | gzip -1 > "$B/initrd"
KERNEL=$K/vmlinux
[ -s "$KERNEL" ] || KERNEL=$CACHE/debs/none
[ -s "$KERNEL" ] || { log "no vmlinux unpacked from $KPKG"; exit 125; }
log "booting $KVER with $(du -h "$B/initrd" | cut -f1) of initramfs"
: > "$B/status"
set +e
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -machine pc \
  -smp 2 -m 2048 -no-reboot -display none -monitor none -nodefaults -vga none \
  -serial stdio -serial "file:$B/status" -kernel "$KERNEL" -initrd "$B/initrd" \
  -append "console=ttyS0 panic=-1 oops=panic quiet loglevel=3 mitigations=off rdinit=/init" \
  < /dev/null 2>&1 | sed -u 's/\r$//'
q=${PIPESTATUS[0]}
set -e
[ "$q" = 124 ] && { log "timed out after $TIMEOUT s"; exit 124; }
rc=$(tr -d '\r' < "$B/status" | sed -n 's/^VM_STATUS=//p' | tail -1)
[ -n "$rc" ] || { log "the VM stopped without a status (qemu $q)"; exit 125; }
exit "$rc"
