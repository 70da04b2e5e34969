"""Reading fields strictly: integers, strings, prices, requirements and selectors as Kubernetes (and, for
NodePool and NodeClaim requirements, Karpenter) accept them; and the ladder soft constraints go down."""

from __future__ import annotations

import math

import pytest

from tenon.core import InputError
from tenon.core.catalog import price_value
from tenon.core.fields import Ctx, requirement, shown
from tenon.core.model import Pod, PodAffinityTerm, TopologySpread
from tenon.core.relax import relax
from tenon.core.requirements import KARPENTER_OPERATORS, NODE_OPERATORS, LabelSelector, Requirement, integer

CTX = Ctx("f.yaml", 2, "Pod", "default/p")


@pytest.mark.parametrize(("text", "expected"), [("42", 42), ("-7", -7), ("+3", 3), ("9" * 19, None)])
def test_integers_are_ascii_digits_within_int64(text, expected):
    assert integer(text) == expected  # 19 nines are past int64


@pytest.mark.parametrize("text", ["１", "٣", "1_000", "1.0", " 1", "", "0x10", "1e3"])
def test_anything_else_is_not_an_integer(text):
    assert integer(text) is None


@pytest.mark.parametrize("value", ["１", "1.5", [1], {"a": 1}, True, 2**63, "NaN"])
def test_an_integer_field_names_itself_and_never_prints_a_structure(value):
    with pytest.raises(InputError) as caught:
        CTX.integer(value, "spec.replicas", 0)
    message = str(caught.value)
    assert message.startswith("f.yaml document 2 (Pod default/p): spec.replicas: must be an integer")
    assert "\n" not in message and len(message) < 200


def test_a_string_field_refuses_a_map_and_takes_a_number_as_its_text():
    assert CTX.text(3, "metadata.labels.v") == "3"
    with pytest.raises(InputError, match=r"metadata\.labels\.v: must be a string, got a map"):
        CTX.text({"deep": {"er": 1}}, "metadata.labels.v")
    assert shown([1] * 1000) == "a list"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(0.5, 0.5), ("0.096", 0.096), ("1e2", 100.0), (3, 3.0)],
)
def test_prices_are_finite_non_negative_numbers(raw, expected):
    assert math.isclose(price_value(raw), expected)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (float("inf"), "not finite"),
        ("1e999", "not finite"),
        (float("nan"), "NaN"),
        ("nan", "NaN"),
        ("-0.1", "negative"),
        ("１", "not a number"),
        ("cheap", "not a number"),
        (True, "not a number"),
    ],
)
def test_a_price_that_is_not_one_says_what_it_is(raw, words):
    with pytest.raises(ValueError, match=words):
        price_value(raw)


def test_gte_and_lte_belong_to_karpenters_requirements_only():
    raw = {"key": "k", "operator": "Gte", "values": ["3"]}
    assert requirement(CTX, raw, "r", KARPENTER_OPERATORS) == Requirement("k", "Gte", ("3",))
    with pytest.raises(InputError, match=r"r\.operator"):
        requirement(CTX, raw, "r", NODE_OPERATORS)
    gte, lte = Requirement("k", "Gte", ("3",)), Requirement("k", "Lte", ("3",))
    assert [gte.allows(v) for v in ("2", "3", "4", "x", None)] == [False, True, True, False, False]
    assert [lte.allows(v) for v in ("2", "3", "4", "３")] == [True, True, False, False]


def test_a_selector_left_out_selects_no_pod():
    assert LabelSelector().matches({"app": "x"})
    assert not LabelSelector(nothing=True).matches({})


def test_soft_constraints_are_relaxed_in_karpenters_order_lightest_preference_first():
    term = PodAffinityTerm(LabelSelector(), "topology.kubernetes.io/zone")
    pod = Pod(
        "default",
        "p",
        preferred_pod_affinity=((80, term), (10, term)),
        preferred_pod_anti_affinity=((5, term),),
        preferred_node_affinity=((1, (Requirement("k", "In", ("v",)),)),),
        topology_spread=(
            TopologySpread(1, "topology.kubernetes.io/zone", "ScheduleAnyway", LabelSelector()),
            TopologySpread(1, "kubernetes.io/hostname", "DoNotSchedule", LabelSelector()),
        ),
    )
    steps = []
    while (pod := relax(pod)) is not None:
        steps.append(pod)
    assert [w for w, _ in steps[0].preferred_pod_affinity] == [80]  # the lighter term went first
    assert steps[1].preferred_pod_affinity == () and steps[2].preferred_pod_anti_affinity == ()
    assert steps[3].preferred_node_affinity == ()
    assert [t.when_unsatisfiable for t in steps[4].topology_spread] == ["DoNotSchedule"]  # never relaxed
    assert len(steps) == 5
