# Sourced by in_vm.sh (its check() and ofi()): reference numbers for docs/transports.md,
# not tests (only a run that fails counts). One-way p2p bandwidth over verbs;ofi_rxm:
# coll_perf pingpong through the ofi plugin (half the round trip) against fi_pingpong on
# the same provider; all-reduce busbw over the plugin against the in-tree ibverbs
# transport. 1-64 MiB, 2 ranks.
check coll_perf-pingpong-ofi-verbs ofi env COLL_TRANSPORT=ofi ./coll_perf --np 2 -C pingpong -b 1M -e 64M -f 4 -n 3 -w 1 -c 1
grep -v "^# [A-Z]" /tmp/out.log | tail -6
for s in 1048576 4194304 16777216 67108864; do
  # tagged messages, rxm's rendezvous over verbs as the plugin gets it; no warm-up in it
  # (FI_UNIVERSE_SIZE: in_vm.sh says why)
  FI_UNIVERSE_SIZE=64 timeout 120 fi_pingpong -p "verbs;ofi_rxm" -e rdm -m tagged -I 5 -S $s > /tmp/srv.log 2>&1 &
  sleep 1
  FI_UNIVERSE_SIZE=64 timeout 110 fi_pingpong -p "verbs;ofi_rxm" -e rdm -m tagged -I 5 -S $s "$RDMA_IP" > /tmp/cli.log 2>&1
  wait
  echo "fi_pingpong verbs;ofi_rxm $s bytes (bytes #sent #ack total time MB/s):"
  grep -A1 "^bytes" /tmp/cli.log | tail -1 | grep . || { echo "(no result)"; tail -3 /tmp/cli.log /tmp/srv.log; }
done
for t in "ofi ofi" "ibverbs env"; do
  set -- $t
  check coll_perf-allreduce-busbw-$1 $2 env COLL_TRANSPORT=$1 ./coll_perf --np 2 -b 1M -e 64M -f 4 -n 3 -w 1 -c 1
  grep -v "^# [A-Z]" /tmp/out.log | tail -6
done
