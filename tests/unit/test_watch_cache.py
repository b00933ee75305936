"""backends.kuberay.watch.Cache across namespaces: an admin's watch sees alice's and bob's clusters,
which may share a name, and one namespace's relist must not drop the other's."""

from __future__ import annotations

from typing import Any

from raylab.backends.kuberay.watch import Cache, Changed, Synced


def cluster(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}}


def pod(namespace: str, cluster_name: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {"ray.io/cluster": cluster_name},
        }
    }


def warning(namespace: str, cluster_name: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "involvedObject": {"kind": "RayCluster", "namespace": namespace, "name": cluster_name},
        "type": "Warning",
        "reason": "InvalidRayClusterSpec",
        "message": "bad spec",
    }


def test_the_same_name_in_two_namespaces_is_two_clusters() -> None:
    cache = Cache()
    touched = cache.apply(
        Synced("rayclusters", [cluster("ray-alice", "exp"), cluster("ray-bob", "exp")])
    )
    assert touched == {("ray-alice", "exp"), ("ray-bob", "exp")}
    cache.apply(
        Synced("pods", [pod("ray-alice", "exp", "exp-head"), pod("ray-bob", "exp", "exp-head"),
                        pod("ray-bob", "exp", "exp-worker")])
    )  # fmt: skip
    assert [p["metadata"]["name"] for p in cache.pods_of(("ray-alice", "exp"))] == ["exp-head"]
    assert len(cache.pods_of(("ray-bob", "exp"))) == 2

    # bob's cluster goes; alice's, of the same name, stays with its pod.
    assert cache.apply(Changed("rayclusters", "DELETED", cluster("ray-bob", "exp"))) == {
        ("ray-bob", "exp")
    }
    assert list(cache.clusters) == [("ray-alice", "exp")]
    assert len(cache.pods_of(("ray-alice", "exp"))) == 1


def test_a_warning_belongs_to_the_cluster_in_its_namespace() -> None:
    cache = Cache()
    cache.apply(Changed("events", "ADDED", warning("ray-bob", "exp", "w1")))
    assert cache.warnings_of(("ray-alice", "exp")) == []
    assert len(cache.warnings_of(("ray-bob", "exp"))) == 1


def test_one_namespaces_relist_keeps_the_others() -> None:
    cache = Cache()
    cache.apply(Synced("rayclusters", [cluster("ray-alice", "a")], "ray-alice"))
    cache.apply(Synced("rayclusters", [cluster("ray-bob", "b")], "ray-bob"))
    cache.apply(Synced("pods", [pod("ray-alice", "a", "a-head")], "ray-alice"))
    cache.apply(Synced("pods", [pod("ray-bob", "b", "b-head")], "ray-bob"))

    # alice's watch lists again (after a 410) and finds her cluster gone.
    touched = cache.apply(Synced("rayclusters", [], "ray-alice"))
    assert touched == {("ray-alice", "a")}
    assert list(cache.clusters) == [("ray-bob", "b")]
    touched = cache.apply(Synced("pods", [], "ray-alice"))
    assert touched == {("ray-alice", "a")}
    assert len(cache.pods_of(("ray-bob", "b"))) == 1

    # A cluster-wide list (namespace None) replaces everything.
    cache.apply(Synced("rayclusters", [cluster("ray-carol", "c")]))
    assert list(cache.clusters) == [("ray-carol", "c")]
