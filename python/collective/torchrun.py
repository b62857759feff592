"""python3 -m collective.torchrun ARGS: torchrun (torch.distributed.run, same arguments)
with the mends of collective._torchcompat, so it starts workers on Debian 12's torch 1.13
(no --redirects needed) and on Debian 13's torch 2.6 (a torch without libuv). The workers
get the store mend when they import collective.torch, as a script using the "collective"
backend does before init_process_group."""
from collective import _torchcompat

_torchcompat.store_without_libuv()
_torchcompat.std_parse()

from torch.distributed.run import main  # noqa: E402  after the mends: it binds TCPStore

if __name__ == "__main__":
    main()
