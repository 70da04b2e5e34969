"""Properties of the pure pieces: patches and selectors, over generated data (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.sandbox.patching import merge_patch, strategic_merge_patch
from devtools.sandbox.selectors import from_label_selector_dict, parse_label_selector

keys = st.sampled_from(["a", "b", "c", "spec", "labels"])
scalars = st.one_of(st.integers(-5, 5), st.text("xyz", max_size=3), st.booleans())
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)
documents = st.dictionaries(keys, json_values, max_size=4)
patches = st.dictionaries(keys, st.one_of(st.none(), json_values), max_size=4)


@settings(max_examples=150, deadline=None)
@given(documents, patches)
def test_merge_patch_is_idempotent_and_does_not_mutate(target: dict[str, Any], patch: dict[str, Any]) -> None:
    snapshot = repr(target), repr(patch)
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once
    assert (repr(target), repr(patch)) == snapshot
    for key, value in patch.items():
        if value is None:
            assert key not in once


@settings(max_examples=150, deadline=None)
@given(documents, patches)
def test_strategic_patch_without_keyed_lists_equals_merge_patch(
    target: dict[str, Any], patch: dict[str, Any]
) -> None:
    # none of the generated keys has a merge strategy, so both flavours must agree (lists replaced whole)
    assert strategic_merge_patch(target, patch) == merge_patch(target, patch)


label_values = st.text("abc", min_size=1, max_size=2)
label_sets = st.dictionaries(st.sampled_from(["app", "tier", "zone"]), label_values, max_size=3)
expressions = st.lists(
    st.one_of(
        st.builds(
            lambda k, vs: {"key": k, "operator": "In", "values": vs},
            st.sampled_from(["app", "zone"]),
            st.lists(label_values, min_size=1, max_size=2),
        ),
        st.builds(
            lambda k, vs: {"key": k, "operator": "NotIn", "values": vs},
            st.sampled_from(["app", "zone"]),
            st.lists(label_values, min_size=1, max_size=2),
        ),
        st.builds(lambda k: {"key": k, "operator": "Exists"}, st.sampled_from(["tier", "zone"])),
        st.builds(lambda k: {"key": k, "operator": "DoesNotExist"}, st.sampled_from(["tier", "zone"])),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(label_sets, expressions, label_sets)
def test_structured_selector_and_its_string_form_select_the_same(
    match_labels: dict[str, str], match_expressions: list[dict[str, Any]], labels: dict[str, str]
) -> None:
    structured = from_label_selector_dict(
        {"matchLabels": match_labels, "matchExpressions": match_expressions}
    )
    reparsed = parse_label_selector(structured.render())
    assert structured.matches(labels) == reparsed.matches(labels)


def test_nil_and_empty_structured_selectors() -> None:
    assert not from_label_selector_dict(None).matches({"app": "x"})  # nil selects nothing (PDB semantics)
    assert from_label_selector_dict({}).matches({"app": "x"})  # empty selects everything


def test_set_element_order_with_unorderable_elements_is_no_crash() -> None:
    # lists or maps where a merge key belongs name no element: they keep their place after the listed ones
    target = {"containers": [[], {"name": "b"}, {"name": "a"}], "finalizers": [["x"], "y"]}
    patch = {
        "$setElementOrder/containers": [{"name": "a"}, {"name": []}],
        "$setElementOrder/finalizers": [{"k": 1}, "y"],
    }
    patched = strategic_merge_patch(target, patch)
    assert patched["containers"] == [{"name": "a"}, [], {"name": "b"}]
    assert patched["finalizers"] == ["y", ["x"]]
