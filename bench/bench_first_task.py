"""From `up` to the first GPU task's result, then the first 200 small tasks, against Ray
by hand: what a notebook's first cells wait for.

raylab: `%raycluster up --gpus 2 --workers 2` in a fresh IPython process (a head and two
1-GPU workers, connected), then one GPU task and its result, then 200 small tasks. By hand:
`ray start --head`, two `ray start --address=… --num-gpus=1`, `ray.init`, then the same
tasks. Each clock starts before `up` (or the first `ray start`); the 200 tasks are timed
on their own, submitted at once as soon as the GPU task answered. Rounds alternate which
side goes first, each in a fresh process, so machine noise hits both alike.

Targets (the first-task issue): cold `up` to the GPU result ≤ 0.7× by hand; the 200 tasks
≤ 1.0× by hand, with no round over 3× the median.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench_up import BY_HAND, figures
from report import Figure, emit, median, reported

TASKS = """
import ray as _ray

@_ray.remote(num_gpus=1)
def on_gpu():
    import os
    return os.environ.get("CUDA_VISIBLE_DEVICES")

@_ray.remote
def small(i):
    return i

assert _ray.get(on_gpu.remote()) in ("0", "1")
first = time.perf_counter() - t0
t1 = time.perf_counter()
assert _ray.get([small.remote(i) for i in range(200)]) == list(range(200))
burst = time.perf_counter() - t1
"""

RAYLAB = (
    """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "raylab")
t0 = time.perf_counter()
ip.run_line_magic("raycluster", "up --name bench-first --gpus 2 --workers 2")
"""
    + TASKS
    + """
ip.run_line_magic("raycluster", "down bench-first")
print("ELAPSED", first)
print("BURST", burst)
"""
)

# The same `up`, claiming a standby of its shape made (and Ready) before the clock starts,
# as a user's server makes one when it starts; then what the standby cost while it waited:
# the memory of all its processes (its reaper's and every child's too: RSS summed, and
# PSS) and their CPU over 5 s.
CLAIMED = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})  # processes.py\n"
    """
import time
from raylab.config import Settings
from raylab.backends.local.backend import LocalBackend
from raylab.identity import current_user
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

settings = Settings.load()
service = ClusterService(LocalBackend(settings.local_state_dir()), settings, current_user())
spec = ClusterSpec.from_mapping({"gpus": 2, "workers": 2}, settings.profiles)
standby = service.create_standby(spec, time.time() + 600)
while (info := service.get(standby.name)).phase != "Ready":
    assert info.phase == "Starting", info.reason
    time.sleep(0.2)

from processes import marked, waiting_cost

time.sleep(5)  # settled, as a standby waits
reaper = "raylab.backends.local.standby_reaper"
procs = marked("RAYLAB_CLUSTER", standby.name, lambda cmd: standby.name in cmd and reaper in cmd)
for key, value in waiting_cost(procs).items():
    print(key.upper(), value)

from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "raylab")
t0 = time.perf_counter()
ip.run_line_magic("raycluster", "up --gpus 2 --workers 2")
print("UP", time.perf_counter() - t0)
"""
    + TASKS
    + """
ip.run_line_magic("raycluster", f"down {standby.name}")
print("ELAPSED", first)
print("BURST", burst)
"""
)

RAW = (
    BY_HAND
    + """
quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
             start_new_session=True)
t0 = time.perf_counter()
# Three nodes on one machine: each its own agent and metrics ports (Ray's are fixed) and
# its own temp dir (nodes starting at once race for socket names in a shared one).
def ports():
    return [f"--dashboard-agent-listen-port={free()}", f"--dashboard-agent-grpc-port={free()}",
            f"--metrics-export-port={free()}", f"--runtime-env-agent-port={free()}",
            f"--temp-dir=/tmp/rb{os.urandom(3).hex()}"]

starters = [subprocess.Popen([ray_bin, "start", "--head", f"--port={gcs}", *ports(),
                              f"--dashboard-port={free()}", "--dashboard-host=127.0.0.1",
                              "--disable-usage-stats"], **quiet)]
starters[0].wait()
for _ in range(2):
    starters.append(subprocess.Popen([ray_bin, "start", f"--address=127.0.0.1:{gcs}", *ports(),
                                      "--num-gpus=1", "--disable-usage-stats"], **quiet))
for s in starters[1:]:
    s.wait()
import ray
ray.init(f"127.0.0.1:{gcs}")
deadline = time.monotonic() + 300
while ray.cluster_resources().get("GPU", 0) < 2:
    assert time.monotonic() < deadline, "the two GPU nodes did not join"
    time.sleep(0.05)
"""
    + TASKS
    + """
ray.shutdown()
stop_sessions([NodeProcess("node", 0, s.pid, 1.0, "") for s in starters], "bench-raw")
print("ELAPSED", first)
print("BURST", burst)
"""
)


def run(rounds: int = 3) -> list[Figure]:
    ours: list[dict[str, float]] = []
    raw: list[dict[str, float]] = []
    claimed: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="raylab-bench-") as state:
        for i in range(rounds):
            trio = [(ours, RAYLAB), (raw, RAW), (claimed, CLAIMED)]
            for samples, code in trio if i % 2 == 0 else reversed(trio):
                samples.append(figures(code, state))
    first, first_raw = [s["ELAPSED"] for s in ours], [s["ELAPSED"] for s in raw]
    first_claimed = [s["ELAPSED"] for s in claimed]
    rss, cpu = [s["RSS_MIB"] for s in claimed], [s["CPU_PCT"] for s in claimed]
    pss = [s["PSS_MIB"] for s in claimed]
    burst, burst_raw = [s["BURST"] for s in ours], [s["BURST"] for s in raw]
    spread = max(burst) / median(burst)
    return [
        Figure(
            name="up --gpus 2 --workers 2 → first GPU task's result (cold, median)",
            value=median(first),
            unit="s",
            target="≤ 0.7× by hand",
            anchor=median(first_raw),
            anchor_name="ray start ×3 + ray.init",
            samples=first,
            anchor_samples=first_raw,
            met=median(first) <= 0.7 * median(first_raw),
        ),
        Figure(
            name="up --gpus 2 --workers 2 → first GPU task's result (standby claimed, median)",
            value=median(first_claimed),
            unit="s",
            target="≤ 3 s",
            anchor=median(first_raw),
            anchor_name="ray start ×3 + ray.init",
            samples=first_claimed,
            anchor_samples=first_raw,
            met=median(first_claimed) <= 3.0,
        ),
        reported(
            "a waiting standby (head + 2 workers + reaper): resident memory (median)", rss, "MiB"
        ),
        reported("a waiting standby: its proportional share of memory, PSS (median)", pss, "MiB"),
        reported("a waiting standby: CPU of its processes over 5 s (median)", cpu, "% of a core"),
        Figure(
            name="the first 200 small tasks (median)",
            value=median(burst),
            unit="s",
            target="≤ 1.0× by hand",
            anchor=median(burst_raw),
            anchor_name="the same tasks by hand",
            samples=burst,
            anchor_samples=burst_raw,
            met=median(burst) <= median(burst_raw),
        ),
        Figure(
            name="the first 200 small tasks: worst round / median",
            value=spread,
            unit="×",
            target="≤ 3×",
            met=spread <= 3,
        ),
    ]


if __name__ == "__main__":
    figures = run(int(os.environ.get("ROUNDS", "3")))
    emit("The first cell: up to the first GPU task, then 200 tasks", figures, "first_task")
