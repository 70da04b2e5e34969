"""The room scan skips blocks of rooms but finds the very room a plain first fit over every room finds."""

from __future__ import annotations

import random

from tenon.core.objects import parse_pod
from tenon.core.room_scan import BLOCK, RoomScan
from tenon.core.rooms import FOR_GOOD, FOR_NOW, Room
from tenon.core.topology import HostnameRules
from tests.scheduling.builders import affinity, pod


def rooms(rng: random.Random, count: int) -> list[Room]:
    return [
        Room(
            name=f"r{i}",
            kind="node",
            labels={},
            taints=(),
            free=[rng.randint(0, 4000), rng.randint(0, 16), 10],
        )
        for i in range(count)
    ]


def test_the_scan_finds_what_a_first_fit_over_every_room_finds_as_rooms_fill_and_go() -> None:
    rng = random.Random(5)
    every = rooms(rng, 5 * BLOCK + 7)
    scan = RoomScan(every, 3)
    dropped: set[str] = set()
    placed = 0
    for _ in range(2000):
        wanted = [rng.choice((100, 500, 1000, 2000)), rng.choice((1, 2, 4)), 1]
        # some rooms refuse for reasons other than room (a taint, an affinity): the scan must try them too
        refused = {f"r{rng.randrange(len(every))}" for _ in range(20)}

        def takes(room: Room, wanted: list[int] = wanted, refused: set[str] = refused) -> bool:
            return room.name not in refused and all(w <= f for w, f in zip(wanted, room.free, strict=True))

        expected = next((r for r in every if r.name not in dropped and takes(r)), None)
        found = scan.first(wanted, takes)
        assert found is expected
        if found is None:
            continue
        placed += 1
        found.free = [f - w for f, w in zip(found.free, wanted, strict=True)]
        if found.free[0] < 100 or found.free[2] == 0:
            dropped.add(found.name)
            scan.drop(found)
        else:
            scan.shrunk(found)
    assert placed > 300  # rooms filled up and went along the way
    assert [r.name for r in scan.rooms()] == [r.name for r in every if r.name not in dropped]


def test_a_room_refuses_for_good_what_a_fuller_room_would_refuse_too_and_for_now_a_missing_partner() -> None:
    """What the solve may remember of a refusal: a room short of room (or of a label, or past a hostname
    limit) stays so while the solve fills rooms; a hostname pod affinity may be met by a pod placed later."""
    follower = parse_pod(
        "test.yaml",
        0,
        pod("follower", "1", affinity=affinity({"app": "db"}, "kubernetes.io/hostname")),
    )
    rules = HostnameRules()
    rules.register([follower])
    small = Room(name="small", kind="node", labels={}, taints=(), free=[500, 2**40, 10])
    roomy = Room(name="roomy", kind="node", labels={}, taints=(), free=[4000, 2**40, 10])
    vec = [1000, follower.requests.get("memory", 0), 1]
    assert small.refusal(follower, vec, rules) == FOR_GOOD
    assert roomy.refusal(follower, vec, rules) == FOR_NOW  # no db there yet
    roomy.pods.append(parse_pod("test.yaml", 1, pod("db", "1", labels={"app": "db"})))
    assert roomy.refusal(follower, vec, rules) is None
