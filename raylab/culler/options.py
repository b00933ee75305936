"""`raylab culler`'s options (kept apart so that the parser need not import the culler)."""

from __future__ import annotations

import argparse


def add_culler_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval", type=float, default=None, metavar="SECONDS",
        help="seconds between sweeps (default: c.Raylab.cull_interval_seconds, 60)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-port", dest="metrics_port", type=int, default=None, metavar="PORT",
        help="serve Prometheus /metrics on this port (default: none)",
    )  # fmt: skip
    # /metrics has no authentication and names every user's clusters: this machine only,
    # unless the operator chooses otherwise (0.0.0.0 in a pod that Prometheus scrapes).
    # --metrics-address is its earlier name.
    parser.add_argument(
        "--metrics-host", "--metrics-address", dest="metrics_host", default="127.0.0.1",
        metavar="HOST",
        help="address /metrics listens on (default 127.0.0.1: this machine only; 0.0.0.0: "
        "every interface, e.g. in a pod that Prometheus scrapes)",
    )  # fmt: skip
    parser.add_argument(
        "--namespace", dest="namespaces", action="append", default=None, metavar="NAMESPACE",
        help="KubeRay: a namespace to cull (repeat for several; default: the configured one)",
    )  # fmt: skip
    parser.add_argument(
        "-A", "--all-namespaces", dest="all_namespaces", action="store_true",
        help="KubeRay: cull every namespace, those made later too (one watch; each "
        "cluster's token, GPU-hours and idle state stay in its own namespace)",
    )  # fmt: skip
    parser.add_argument(
        "--once", action="store_true", help="one sweep, then exit (a CronJob, a test)"
    )
