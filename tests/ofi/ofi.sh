#!/bin/sh
# The libfabric plugin (transports/ofi/) under a provider.
#   ofi.sh run PROVIDER PLUGIN CMD...   runs CMD with COLL_OFI_PROVIDER=PROVIDER and the
#       plugin loaded as COLL_NET_PLUGIN; 77 (skip) where libfabric lacks the provider.
#   ofi.sh bad-provider PLUGIN COLL_PERF   a provider libfabric does not have fails
#       coll_init on every rank, with a sentence naming it and fi_getinfo's answer.
set -u
mode=$1
shift
case $mode in
run)
    prov=$1 plugin=$2
    shift 2
    if ! fi_info -p "$prov" -t FI_EP_RDM >/dev/null 2>&1; then
        echo "libfabric has no provider '$prov' here (fi_info -p '$prov')"
        exit 77
    fi
    COLL_OFI_PROVIDER=$prov COLL_NET_PLUGIN=$plugin exec "$@"
    ;;
bad-provider)
    out=$(COLL_OFI_PROVIDER=nosuch COLL_NET_PLUGIN=$1 COLL_TRANSPORT=ofi \
        timeout 60 "$2" --np 2 -b 8 -e 8 -n 1 -w 0 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: coll_perf exited $rc"; exit 1; }
    for want in "no libfabric provider 'nosuch' (COLL_OFI_PROVIDER)" \
        "fi_getinfo: No data available" "transport plugin 'ofi'" "init failed"; do
        echo "$out" | grep -qF "$want" || { echo "FAIL: no '$want' in the output"; exit 1; }
    done
    echo "PASS"
    ;;
*)
    echo "usage: ofi.sh run PROVIDER PLUGIN CMD... | bad-provider PLUGIN COLL_PERF" >&2
    exit 2
    ;;
esac
