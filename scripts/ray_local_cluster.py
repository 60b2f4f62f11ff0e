"""A Ray cluster of several nodes on this host, on loopback only: for the tests, and for
trying ``EXECUTOR=ray`` on one machine.

    python scripts/ray_local_cluster.py [--nodes 2] [--slots 4] [--gpus] [--address-file F]

Prints the cluster's address (and writes it to ``--address-file``), runs until SIGTERM or
SIGINT, then stops every node. Each node is a raylet process of its own (the head also runs
the control store), started through ``ray.cluster_utils.Cluster``. Without ``--gpus`` a node
offers ``--slots`` units of the ``kes_slot`` resource (CPU mode); with ``--gpus`` node *i*
gets GPU *i* alone (not yet run on a GPU host).

Why not ``ray start`` twice: a second node started with ``ray start --address`` on the same
host cannot stay on 127.0.0.1 (Ray replaces a loopback address by the host's outward one).
Here every Ray process stays on 127.0.0.1 because ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``;
a server joining this cluster needs that variable too (it makes Ray keep loopback addresses).
On real hosts use ``ray start`` as docs/SCALE_OUT.md shows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="nodes, the head included")
    parser.add_argument("--slots", type=int, default=2, help="kes_slot units per node (CPU)")
    parser.add_argument("--gpus", action="store_true", help="node i gets GPU i instead")
    parser.add_argument("--address-file", type=Path, help="write the address here when up")
    args = parser.parse_args(argv)

    os.environ.update(LOOPBACK_ENV)
    # Ray's sockets live under its temp dir: keep the path short (a Unix socket path is
    # limited to 107 bytes), and apart from any other Ray on this host.
    temp = Path(tempfile.mkdtemp(prefix="kes-ray-", dir="/tmp"))
    os.environ["RAY_TMPDIR"] = str(temp)
    (temp / "ray").mkdir()
    from ray.cluster_utils import Cluster

    def node_args(index: int) -> dict[str, Any]:
        common: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 100 * 2**20,
                                     "include_dashboard": False}
        if args.gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(index)  # what the node's GPU ids come from
            return {**common, "num_gpus": 1, "env_vars": {"CUDA_VISIBLE_DEVICES": str(index)}}
        return {**common, "num_gpus": 0, "resources": {"kes_slot": args.slots}}

    cluster = Cluster(initialize_head=True, head_node_args=node_args(0))
    for index in range(1, args.nodes):
        cluster.add_node(**node_args(index))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(cluster.address, flush=True)
    if args.address_file is not None:
        tmp = args.address_file.with_name(args.address_file.name + ".tmp")
        tmp.write_text(cluster.address)
        tmp.replace(args.address_file)
    try:
        stop.wait()
    finally:
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
