"""A run that joined a remote cluster and lost Ray Client gets the run's own error, naming the cluster, where
ray.get_actor would auto-start a node of its own and fail an assertion (seen in the whole test set, 2026-11-28)."""

from collections.abc import Iterator

import pytest

from backends.local import ray_cluster


@pytest.fixture
def joined_then_dropped() -> Iterator[None]:
    import ray

    ray_cluster.connect("local")
    ray.shutdown()  # what a dropped Ray Client leaves: this process no longer connected
    before = dict(ray_cluster._joined)
    ray_cluster._joined["address"] = "ray://10.0.0.9:10001"
    yield
    ray_cluster._joined.clear()
    ray_cluster._joined.update(before)


def test_an_actor_asked_for_after_the_cluster_dropped_names_the_cluster(joined_then_dropped: None) -> None:
    import ray

    with pytest.raises(ray_cluster.ClusterLost, match=r"the Ray cluster at ray://10\.0\.0\.9:10001 stopped answering"):
        ray_cluster.get_actor("rft-anything")
    assert not ray.is_initialized()  # no node of its own was started
