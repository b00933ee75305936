"""`ClusterService`'s rules over an in-memory backend: quotas, ownership, names, hints.

The backends themselves run for real in tests/local and tests/kubernetes; here the
rules alone, which every door (magic, CLI, REST) applies the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from raylab.config import Settings
from raylab.errors import Conflict, NotFound, QuotaExceeded, SpecError
from raylab.model import ClusterEnvironment, ClusterInfo, IdleState, Phase
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

SETTINGS = Settings.from_config(
    max_gpus_per_user=4, max_clusters_per_user=2, max_workers_per_cluster=3
)


class FakeInMemoryBackend:
    """A Backend that only remembers what it was told (no processes, no pods): Ready at
    once, so that the service's rules are what is tested."""

    name = "fake"
    restarts_nodes = False
    driver_joins = False
    autoscales = False
    may_queue = False
    workers_read_owner_files = False
    state_dir = None

    def __init__(self) -> None:
        self.store: dict[str, ClusterInfo] = {}
        self.created: list[str] = []
        self.create_seconds = 0.0  # how long a create takes (a race needs a window)
        self._quota_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    @contextlib.contextmanager
    def quota_lock(self, owner: str, *, namespace: str | None = None) -> Iterator[None]:
        with self._locks_lock:
            lock = self._quota_locks.setdefault(owner, threading.Lock())
        with lock:
            yield

    def create(
        self, spec: ClusterSpec, owner: str, environment: ClusterEnvironment | None = None
    ) -> ClusterInfo:
        if spec.name in self.store:
            raise Conflict(f"{spec.name!r} exists")
        time.sleep(self.create_seconds)
        info = ClusterInfo(spec.name, owner, self.name, Phase.READY, spec, head_ready=True,
                           workers_ready=spec.workers, workers_desired=spec.workers,
                           environment=environment)  # fmt: skip
        self.store[spec.name] = info
        self.created.append(spec.name)
        return info

    def get(self, name: str, *, namespace: str | None = None) -> ClusterInfo | None:
        return self.store.get(name)

    def clusters(self, owner: str | None = None) -> list[ClusterInfo]:
        return [c for c in self.store.values() if owner in (None, c.owner)]

    def delete(self, name: str, *, namespace: str | None = None) -> None:
        del self.store[name]

    def scale(self, name: str, workers: int, *, namespace: str | None = None) -> ClusterInfo:
        old = self.store[name]
        info = ClusterInfo(old.name, old.owner, self.name, Phase.READY,
                           old.spec.with_workers(workers), workers_desired=workers)  # fmt: skip
        self.store[name] = info
        return info

    def set_environment(
        self, name: str, environment: ClusterEnvironment, *, namespace: str | None = None
    ) -> ClusterInfo:
        raise NotImplementedError

    def set_suspended(
        self, name: str, suspended: bool, *, namespace: str | None = None
    ) -> ClusterInfo:
        raise NotImplementedError

    def update_idle(
        self,
        name: str,
        idle: IdleState,
        *,
        expected: IdleState | None = None,
        suspend: bool = False,
        namespace: str | None = None,
    ) -> bool:
        raise NotImplementedError

    def logs(self, name: str, tail: int = 200, *, namespace: str | None = None) -> str:
        return ""

    def auth_token(self, name: str) -> str | None:
        return None

    def watch(
        self, stop: threading.Event, on_health: Callable[[str | None], None] | None = None
    ) -> Iterator[object]:
        return iter(())

    def driver_address(self, info: ClusterInfo) -> str | None:
        return None

    def client_address(self, info: ClusterInfo) -> str | None:
        return None

    def dashboard_address(self, info: ClusterInfo) -> str | None:
        return None


@pytest.fixture
def backend() -> FakeInMemoryBackend:
    return FakeInMemoryBackend()


def service(backend: FakeInMemoryBackend, user: str = "alice", **kw: object) -> ClusterService:
    return ClusterService(backend, SETTINGS, user, **kw)  # type: ignore[arg-type]


def test_the_cluster_count_quota_refuses_the_next_and_creates_nothing(
    backend: FakeInMemoryBackend,
) -> None:
    alice = service(backend)
    alice.create({"name": "a1", "workers": 1})
    alice.create({"name": "a2", "workers": 1})
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "a3", "workers": 1})
    assert err.value.message == "you have 2 clusters, the limit is 2"
    assert err.value.detail == "delete one with `raylab down NAME`"
    assert backend.created == ["a1", "a2"]
    # Another user's quota is their own.
    service(backend, "bob").create({"name": "b1", "workers": 1})
    assert backend.created == ["a1", "a2", "b1"]


def test_gpus_count_across_the_users_clusters(backend: FakeInMemoryBackend) -> None:
    alice = service(backend)
    alice.create({"name": "g1", "gpus": 2, "gpu_type": "a100", "workers": 1})
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "g2", "gpus": 4, "gpu_type": "a100", "workers": 2})
    assert err.value.message == "4 GPUs requested, quota is 4 and 2 are in use"
    assert err.value.field == "gpus"
    alice.create({"name": "g2", "gpus": 2, "gpu_type": "a100", "workers": 1})
    assert backend.created == ["g1", "g2"]


def test_workers_per_cluster_and_scaling_within_the_quota(backend: FakeInMemoryBackend) -> None:
    alice = service(backend)
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "w", "workers": 4})
    assert err.value.field == "workers"
    assert backend.created == []
    alice.create({"name": "w", "gpus": 2, "gpu_type": "a100", "workers": 1})
    # Scaling replaces the cluster's own count: 2 GPUs per worker, 2 workers = 4 GPUs.
    assert alice.scale("w", 2).workers_desired == 2
    with pytest.raises(QuotaExceeded):
        alice.scale("w", 3)  # 6 GPUs
    with pytest.raises(SpecError):
        alice.scale("w", 0)  # a GPU cluster needs a worker
    assert backend.store["w"].workers_desired == 2


def test_concurrent_creates_cannot_pass_the_quota_together(backend: FakeInMemoryBackend) -> None:
    """Eight requests at once (tabs, CLIs, kernels) against a quota of 2 clusters."""
    backend.create_seconds = 0.05  # each check would see none of the others' clusters
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def up(i: int) -> None:
        start.wait()
        try:
            service(backend).create({"name": f"c{i}", "workers": 1})
            outcomes.append("created")
        except QuotaExceeded as err:
            outcomes.append(err.message)

    threads = [threading.Thread(target=up, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("created") == 2
    assert outcomes.count("you have 2 clusters, the limit is 2") == 6
    assert len(backend.created) == 2


def test_autoscaling_counts_at_its_most_workers(backend: FakeInMemoryBackend) -> None:
    backend.autoscales = True
    alice = service(backend)
    scaling = {"gpus": 1, "gpu_type": "a100", "workers": 1, "min_workers": 0}
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "big", **scaling, "max_workers": 5})
    assert err.value.message == "up to 5 workers requested, the limit is 3 per cluster"
    assert err.value.field == "max_workers"
    alice.create({"name": "a", **scaling, "max_workers": 3})  # 1 GPU now, up to 3
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "b", "gpus": 2, "gpu_type": "a100", "workers": 1})
    assert err.value.message == "2 GPUs requested, quota is 4 and 3 are in use"
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "b", **scaling, "max_workers": 2})
    assert err.value.message == (
        "up to 2 GPUs (at --max-workers) requested, quota is 4 and 3 are in use"
    )
    # Scaled to zero by its autoscaler, it still holds its most: nothing more fits.
    backend.store["a"] = dataclasses.replace(backend.store["a"], workers_desired=0)
    with pytest.raises(QuotaExceeded):
        alice.create({"name": "b", "gpus": 2, "gpu_type": "a100", "workers": 1})
    assert backend.created == ["a"]


def test_what_a_cluster_holds_comes_from_the_backend_not_its_record(
    backend: FakeInMemoryBackend,
) -> None:
    """A backend that reads what will be scheduled (KubeRay's pod templates) has the last
    word over the spec the cluster carries, which its owner could edit."""
    alice = service(backend)
    alice.create({"name": "edited", "workers": 1})  # a CPU cluster, as recorded
    backend.store["edited"] = dataclasses.replace(backend.store["edited"], max_gpus=4)
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "more", "gpus": 1, "gpu_type": "a100", "workers": 1})
    assert err.value.message == "1 GPUs requested, quota is 4 and 4 are in use"


def test_names_others_clusters_are_not_found_and_an_admin_sees_them(
    backend: FakeInMemoryBackend,
) -> None:
    service(backend, "bob").create({"name": "shared", "workers": 1})
    alice = service(backend, program="%raycluster")
    with pytest.raises(NotFound) as err:
        alice.get("shared")
    assert err.value.detail == "`%raycluster list` shows your clusters"
    with pytest.raises(Conflict):
        alice.create({"name": "shared", "workers": 1})
    admin = service(backend, "root", admin=True)
    assert admin.get("shared").owner == "bob"
    assert [c.name for c in admin.list(everyone=True)] == ["shared"]
    assert alice.list(everyone=True) == []  # not an admin: their own only


def test_up_with_an_existing_name_of_yours_reuses_it(backend: FakeInMemoryBackend) -> None:
    alice = service(backend)
    first, created = alice.create({"name": "again", "workers": 1})
    again, created_again = alice.create({"name": "again", "workers": 2})
    assert (created, created_again, again) == (True, False, first)
    assert backend.created == ["again"]
