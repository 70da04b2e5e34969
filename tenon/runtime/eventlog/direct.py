"""Reading one stored message by sequence, from any replica when one serves it.

A direct get (``allow_direct`` streams) is answered by any replica, so reads spread over the cluster and
need no leader. But a replica subscribes to direct gets only once it is current: right after a stream is
created, or while a cluster elects, the request may find no responder at all (a fresh R3 stream on a
3-node cluster, seen in CI). The leader's API answers then, so :func:`get_message` falls back to it
instead of failing the caller's rebuild.
"""

from __future__ import annotations

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg


async def get_message(js: JetStreamContext, stream: str, sequence: int) -> RawStreamMsg:
    """The message stored at ``sequence`` (``NotFoundError`` when there is none)."""
    try:
        return await js.get_msg(stream, sequence, direct=True)
    except nats.errors.NoRespondersError:
        return await js.get_msg(stream, sequence)
