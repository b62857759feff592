#!/bin/sh
# env:// under a real launcher: Open MPI's mpirun sets OMPI_COMM_WORLD_RANK/SIZE.
# Skips (77) where mpirun is not installed.
set -u
rank_prog=$1
# Open MPI's own name first: with MPICH installed too, plain mpirun may be MPICH's.
mpirun=$(command -v mpirun.openmpi || command -v mpirun) ||
    { echo "mpirun not installed: skipped"; exit 77; }
# Below the ephemeral range, so no outgoing connection takes it meanwhile.
port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
for np in 2 3 4; do
    "$mpirun" --allow-run-as-root --oversubscribe -np "$np" --mca btl self,tcp \
        -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x COLL_TIMEOUT_MS=20000 "$rank_prog" || exit 1
    port=$((port + 1))
done
