"""A throwaway two-node Ray cluster for tests: a head (with the job server Dagster's Ray
executor submits to) and a worker node, both real processes on this machine, bound to
loopback and protected by a token that lives in the environment, stopped afterwards.

`ray start` cannot put two nodes on loopback on one machine (it checks the node's
address), so the nodes are started the way Ray's own tests start them:
`ray.cluster_utils.Cluster`, a head and then a worker node joining it.

The nodes inherit this process's environment as it is when they start (PATH with this
virtualenv's `dagster`, PYTHONPATH with the code under test), as nodes started by
`ray start` inherit their shell's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gradetrail_lib.backends.ray_backend import (
    AUTH_MODE_ENV,
    AUTH_TOKEN_ENV,
    SINGLE_MACHINE_ENV,
    prepare_local_cluster,
)
from tests.support.optional import missing

# CI sets GRADETRAIL_REQUIRE_RAY=1: there a cluster that cannot start fails the tests
# instead of skipping them.
REQUIRED = os.environ.get("GRADETRAIL_REQUIRE_RAY") == "1"

# What the cluster's processes read from the environment when they start.
CLUSTER_ENV = (SINGLE_MACHINE_ENV, AUTH_MODE_ENV, AUTH_TOKEN_ENV, "PATH", "RAY_TMPDIR")


def ray_cluster_problem() -> str | None:
    """Why the two-node cluster (and Dagster's Ray executor on it) cannot run here, or None."""
    try:
        dashboard = importlib.util.find_spec("ray.dashboard")
    except ModuleNotFoundError:
        dashboard = None
    if dashboard is None:
        return "ray's dashboard not installed: pip install 'ray[default]'"
    return missing("dagster_ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class RayCluster:
    address: str  # the GCS address, as RAY_ADDRESS takes it
    dashboard_url: str  # the job server, as RAY_API_SERVER_ADDRESS takes it
    env: dict[str, str]  # what a process needs to reach the cluster (token, addresses)


@contextmanager
def two_node_cluster(cpus_per_node: int = 1) -> Iterator[RayCluster]:
    """A head and a worker node with `cpus_per_node` CPUs each, this process not connected."""
    saved = {name: os.environ.get(name) for name in CLUSTER_ENV}
    # Token auth and loopback, as gradetrail's own local clusters (ray_backend.py).
    prepare_local_cluster()
    from ray.cluster_utils import Cluster

    # A job's entrypoint is `dagster api execute_step ...`: the nodes need `dagster` on PATH.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    # A short private folder for the sessions, sockets and the `ray_current_cluster` file
    # Ray writes for `ray.init("auto")` (none of it in the shared /tmp/ray): Ray's socket
    # paths must fit in 107 characters.
    root = tempfile.mkdtemp(prefix="gt-ray-")
    os.environ["RAY_TMPDIR"] = root
    temp_dir = os.path.join(root, "ray")
    os.mkdir(temp_dir)
    dashboard_port = _free_port()
    common = {
        "num_cpus": cpus_per_node,
        "node_ip_address": "127.0.0.1",
        "temp_dir": temp_dir,
        "object_store_memory": 80 * 1024 * 1024,
    }
    # The head (with the job server), then a worker node; whatever started is stopped and
    # the folder removed, even when a node fails to start.
    cluster = Cluster()
    try:
        cluster.add_node(
            **common,
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            dashboard_port=dashboard_port,
        )
        cluster.add_node(**common)
        cluster.wait_for_nodes()
        env = {name: os.environ[name] for name in CLUSTER_ENV if name in os.environ}
        yield RayCluster(
            address=cluster.address,
            dashboard_url=f"http://127.0.0.1:{dashboard_port}",
            env=env,
        )
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
