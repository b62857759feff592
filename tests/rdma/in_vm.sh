#!/bin/bash
# Runs inside the VM (vm.sh), with rxe0 up: the ibverbs transport on real verbs. Prints a
# line per check and closes with "N passed, N failed".
export COLL_IB_HCA=$RDMA_DEV COLL_IB_GID_INDEX=$RDMA_GID_INDEX COLL_TIMEOUT_MS=60000
pass=0 fail=0
check() { # check NAME COMMAND...
  local t0=$(date +%s)
  if "${@:2}" > /tmp/out.log 2>&1; then
    pass=$((pass + 1)); echo "ok   $1 ($(( $(date +%s) - t0 )) s)"
  else
    fail=$((fail + 1)); echo "FAIL $1 ($(( $(date +%s) - t0 )) s)"; tail -30 /tmp/out.log
  fi
}
ibv_devinfo -d "$RDMA_DEV" | grep -E "state|link_layer|active_mtu"
check conformance-ibverbs ./test_conformance ibverbs
check matrix-ibverbs-2-and-4-ranks env MATRIX_TRANSPORT=ibverbs ./test_matrix
check coll_perf-allreduce-2-ranks env COLL_TRANSPORT=ibverbs ./coll_perf --np 2 -b 8 -e 4M -f 8 -n 5 -w 1 -c 1
cat /tmp/out.log
check coll_perf-allreduce-4-ranks env COLL_TRANSPORT=ibverbs ./coll_perf --np 4 -b 1M -e 1M -n 3 -w 1 -c 1
cat /tmp/out.log
check coll_perf-sendrecv-2-ranks env COLL_TRANSPORT=ibverbs ./coll_perf --np 2 -C sendrecv -b 1M -e 8M -f 8 -n 5 -w 1 -c 1
cat /tmp/out.log
# The default transport (auto) between two "hosts" (rank 1 in its own UTS namespace with
# another hostname, so the host keys differ) with RDMA at both ends: ibverbs, not tcp.
auto_picks_ibverbs() ( # a subshell: its variables stay inside
  export RANK WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29411 COLL_DEBUG=info
  RANK=0 ./coll_perf -b 1M -e 1M -n 2 -w 1 -c 1 > /tmp/auto0.log 2>&1 &
  RANK=1 unshare -u sh -c 'hostname another-host && exec ./coll_perf -b 1M -e 1M -n 2 -w 1 -c 1' \
    > /tmp/auto1.log 2>&1
  local rc1=$? rc0=0
  wait $! || rc0=$?
  cat /tmp/auto0.log /tmp/auto1.log | grep -E "ring|Out of bounds"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q "to 1 via ibverbs" /tmp/auto0.log &&
    grep -q "to 0 via ibverbs" /tmp/auto1.log
)
check auto-picks-ibverbs-across-hosts auto_picks_ibverbs
cat /tmp/out.log
# One direction: a broadcast from rank 0 to rank 1 (busbw = algbw).
check coll_perf-broadcast-2-ranks env COLL_TRANSPORT=ibverbs ./coll_perf --np 2 -C broadcast -b 1M -e 8M -f 8 -n 5 -w 1 -c 1
cat /tmp/out.log
check coll_perf-broadcast-2-ranks-reg-cache env COLL_IB_REG_CACHE=1 COLL_TRANSPORT=ibverbs ./coll_perf --np 2 -C broadcast -b 1M -e 8M -f 8 -n 5 -w 1 -c 1
cat /tmp/out.log
# The reference: perftest's RDMA write bandwidth over the same device, one way (-b: both
# ways at once, as sendrecv on 2 ranks), 1 MiB and 8 MiB.
for dir in "" -b; do
  for s in 1048576 8388608; do
    # Bounded: perftest itself once hung here (-b, 8 MiB); it is a reference, not a test.
    timeout 120 ib_write_bw -d "$RDMA_DEV" -x "$RDMA_GID_INDEX" $dir -s $s -n 50 > /tmp/srv.log 2>&1 &
    sleep 2
    timeout 110 ib_write_bw -d "$RDMA_DEV" -x "$RDMA_GID_INDEX" $dir -s $s -n 50 127.0.0.1 > /tmp/cli.log 2>&1
    wait
    echo "ib_write_bw $dir $s bytes (#bytes #iters peak average MB/s):"
    grep -A1 "#bytes" /tmp/cli.log | tail -1 | grep . || echo "(no result: perftest did not finish)"
  done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
