"""Reconnects back off with jitter: the wait before the next attempt grows with the chosen server's failures
in a row up to a cap, is drawn between half and all of its ceiling, and goes to a server that failed least
(one of a cluster's live nodes rather than the one that just died)."""

from __future__ import annotations

from dataclasses import dataclass

from tenon.runtime.eventlog.connection import ConnectionSettings, ReconnectBackoff


@dataclass(eq=False)
class Server:
    name: str
    reconnects: int = 0


def test_the_wait_doubles_with_each_failure_up_to_the_cap() -> None:
    backoff = ReconnectBackoff()
    ceilings = [backoff.ceiling(failures) for failures in range(10)]
    assert ceilings == [0.1, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert backoff.ceiling(10_000) == 5.0  # no overflow however long the outage


def test_each_wait_is_drawn_between_half_and_all_of_its_ceiling() -> None:
    backoff = ReconnectBackoff()
    for failures in range(12):
        ceiling = backoff.ceiling(failures)
        assert backoff.delay(failures, draw=lambda: 0.0) == ceiling / 2
        assert backoff.delay(failures, draw=lambda: 0.999999) <= ceiling
    waits = {round(backoff.delay(6), 6) for _ in range(50)}
    assert len(waits) > 40 and all(1.6 <= wait <= 3.2 for wait in waits)  # clients do not retry in step


def test_the_next_server_is_one_that_failed_least_chosen_at_random() -> None:
    backoff = ReconnectBackoff()
    dead, live_a, live_b = Server("n1", reconnects=3), Server("n2"), Server("n3")
    chosen = {backoff.choose([dead, live_a, live_b], draw=lambda d=d: d)[0] for d in (0.0, 0.49, 0.5, 0.99)}
    assert chosen == {live_a, live_b}
    server, wait = backoff.choose([dead, live_a], draw=lambda: 0.0)
    assert server is live_a and wait == 0.05  # a live node is tried almost at once
    server, wait = backoff.choose([dead], draw=lambda: 1.0)
    assert server is dead and wait == backoff.ceiling(3)


def test_services_and_tools_hand_the_policy_to_the_client() -> None:
    service = ConnectionSettings().connect_options()
    tool = ConnectionSettings(max_reconnect_attempts=0).connect_options()
    assert callable(service["reconnect_to_server_handler"])
    assert service["max_reconnect_attempts"] == -1 and service["reconnect_time_wait"] == 1.0
    assert tool["max_reconnect_attempts"] == 1 and tool["reconnect_time_wait"] == 0.25
