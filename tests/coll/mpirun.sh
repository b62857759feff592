#!/bin/sh
# env:// under a real launcher: Open MPI's mpirun sets OMPI_COMM_WORLD_RANK/SIZE.
# Skips (77) where mpirun is not installed.
set -u
rank_prog=$1
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not installed: skipped"; exit 77; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + $$ % 20000)))
for np in 2 3 4; do
    mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl self,tcp \
        -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x COLL_TIMEOUT_MS=20000 "$rank_prog" || exit 1
    port=$((port + 1))
done
