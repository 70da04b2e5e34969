"""The local 3-node cluster the chaos tests run on: a node that cannot start leaves no node running."""

from __future__ import annotations

import pytest

from devtools.broker import BrokerError, LocalNatsCluster


def test_a_node_that_cannot_start_stops_the_nodes_already_started() -> None:
    cluster = LocalNatsCluster(3)
    cluster.nodes[0].extra_args = (*cluster.nodes[0].extra_args, "--no-such-flag")  # n1 exits at once
    try:
        with pytest.raises(BrokerError, match="exited"):
            cluster.start(timeout=10)
        assert [node.server_name for node in cluster.nodes if node.running] == []
    finally:
        cluster.cleanup()
