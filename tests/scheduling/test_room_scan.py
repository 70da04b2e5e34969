"""The room scan skips blocks of rooms but finds the very room a plain first fit over every room finds."""

from __future__ import annotations

import random

from tenon.core.room_scan import BLOCK, RoomScan
from tenon.core.rooms import Room


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
