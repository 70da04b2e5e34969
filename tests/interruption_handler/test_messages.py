"""Reading EventBridge messages (pure): what each kind says, and what is refused with which reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tenon.services.interruption_handler.messages import Interruption, Malformed, NotHandled, read_message
from tests.interruption_handler.support import health_change, spot_warning, state_change


def test_a_spot_warning_names_its_instance_and_a_deadline_two_minutes_after_it() -> None:
    reading = read_message(json.dumps(spot_warning("i-0abc")))
    assert isinstance(reading, Interruption)
    assert (reading.kind, reading.instance_ids) == ("spot-interruption", ("i-0abc",))
    assert reading.deadline == datetime(2026, 11, 29, 10, 2, tzinfo=UTC)


def test_state_changes_to_stopping_states_interrupt_and_others_do_nothing() -> None:
    for state in ("stopping", "stopped", "shutting-down", "terminated"):
        reading = read_message(json.dumps(state_change("i-0abc", state)))
        assert isinstance(reading, Interruption) and reading.kind == "state-change"
    assert isinstance(read_message(json.dumps(state_change("i-0abc", "running"))), NotHandled)


def test_a_health_scheduled_change_names_every_affected_instance() -> None:
    reading = read_message(json.dumps(health_change("i-1", "i-2")))
    assert isinstance(reading, Interruption)
    assert reading.instance_ids == ("i-1", "i-2") and reading.kind == "scheduled-change"
    assert reading.deadline == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def test_malformed_messages_say_why() -> None:
    no_entities = {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": []}
    cases = {
        "": "not JSON",
        "[1]": "not a JSON object but a list",
        '{"source": "aws.ec2"}': "source or detail-type is missing",
        json.dumps({**spot_warning("i-0abc"), "detail": {"instance-id": 7}}): "detail.instance-id",
        json.dumps({**health_change("i-1"), "detail": no_entities}): "no instance id",
        json.dumps({"source": "aws.x", "detail-type": "Y", "detail": {}}): "unknown message",
    }
    for body, reason in cases.items():
        reading = read_message(body)
        assert isinstance(reading, Malformed) and reason in reading.reason, (body, reading)
