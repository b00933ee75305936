"""Every benchmark, one table: `make bench` (or `python bench/run.py [NAME...]`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_auth
import bench_culler
import bench_driver
import bench_first_task
import bench_gpu_use
import bench_import
import bench_incluster
import bench_jobs
import bench_joined_node
import bench_kuberay_up
import bench_load
import bench_queue
import bench_ray_client_connect
import bench_ready_latency
import bench_serve
import bench_server
import bench_sidebar
import bench_startup
import bench_up
import bench_workdir
from report import emit

BENCHES = {
    "import": bench_import.run,
    "up": bench_up.run,
    "first_task": bench_first_task.run,
    "auth": bench_auth.run,
    "startup": bench_startup.run,
    "ready_latency": bench_ready_latency.run,
    "kuberay_up": bench_kuberay_up.run,
    "server": bench_server.run,
    "load": bench_load.run,
    "sidebar": bench_sidebar.run,
    "workdir": bench_workdir.run,
    "culler": bench_culler.run,
    "driver": bench_driver.run,
    "joined_node": bench_joined_node.run,
    "jobs": bench_jobs.run,
    "incluster": bench_incluster.run,
    "queue": bench_queue.run,
    "gpu_use": bench_gpu_use.run,
    "serve": bench_serve.run,
    "ray_client_connect": bench_ray_client_connect.run,
}


def main(names: list[str]) -> None:
    figures = []
    for name in names or list(BENCHES):
        figures.extend(BENCHES[name]())
    emit("raylab benchmarks", figures, "latest")


if __name__ == "__main__":
    main(sys.argv[1:])
