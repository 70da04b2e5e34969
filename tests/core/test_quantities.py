"""The one quantity parser: the API server's grammar and rounding, tenon's bounds, and errors that say what.

Properties (hypothesis): any input either parses or raises :class:`QuantityError` (never another exception);
parsing never allocates more than a small, fixed amount of memory whatever the exponent, which is how a
bounded amount of work shows without a clock; the value agrees with an exact reference computed with
fractions; canonical forms parse back to the same value and are their own canonical form.
"""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenon.core import quantities as quantities_module
from tenon.core.quantities import (
    BINARY_SI,
    CPU,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    MAX_MAGNITUDE,
    MEMORY,
    NANO,
    Quantity,
    QuantityError,
    format_quantity,
    parse,
    parse_quantity,
    to_canonical,
)

BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Parsing any input peaks near 2.5 KiB; building 10^5000 exactly (a Fraction or a Decimal) takes over 8 KiB,
# 10^100000 over 180 KiB, and 10^999999999 would take 400 MiB and minutes.
PEAK_BYTES = 4 * 1024


def peak_memory_of(call: object) -> int:
    """Peak bytes allocated by ``call``: the parse itself, not the growth of the parse cache (an empty cache
    takes one entry in a few hundred bytes; a full one's dict resize is what a later test would measure)."""
    quantities_module._parse_text.cache_clear()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            call()  # type: ignore[operator]
        except QuantityError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------------------- examples
@pytest.mark.parametrize(
    ("text", "nanos", "canonical"),
    [
        ("100m", 10**8, "100m"),
        ("1.5", 15 * 10**8, "1500m"),
        ("1.5Gi", 3 * 2**29 * NANO, "1536Mi"),
        ("0.5Ki", 512 * NANO, "512"),
        ("2e3", 2000 * NANO, "2e3"),
        ("1E3", 1000 * NANO, "1e3"),
        ("1E", 10**18 * NANO, "1E"),
        ("1.", NANO, "1"),
        (".5", 5 * 10**8, "500m"),
        ("+2", 2 * NANO, "2"),
        ("-1", -NANO, "-1"),
        ("-1000m", -NANO, "-1"),
        ("0.1n", 1, "1n"),  # finer than a nano: rounded away from zero
        ("-0.1n", -1, "-1n"),
        ("1e-99999", 1, "1e-9"),
        ("0e999999999", 0, "0"),
        (" 4G ", 4 * 10**9 * NANO, "4G"),  # the API server's JSON decoding trims spaces
        ("7Ei", 7 * 2**60 * NANO, "7Ei"),
        ("9223372036854775807", MAX_MAGNITUDE * NANO, "9223372036854775807"),
        (3, 3 * NANO, "3"),
        (0.25, 25 * 10**7, "250m"),
        (1e16, 10**16 * NANO, "10e15"),  # repr 1e+16 is DecimalExponent; exponents are multiples of 3
    ],
)
def test_examples_parse_to_the_api_servers_value_and_canonical_form(text, nanos, canonical):
    quantity = parse(text)
    assert (quantity.nanos, quantity.canonical()) == (nanos, canonical)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("lots", "not a number with an optional suffix"),
        ("１", "not a number"),  # full-width digit: \d would take it, the API server does not
        ("1１", "not a number"),
        ("NaN", "not a number"),
        ("inf", "not a number"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        ("", "not a number"),
        (".", "not a number"),
        ("+", "not a number"),
        ("1e", "not a number"),
        ("1.5.2", "not a number"),
        ("5Xi", "not a number"),
        ("1K", "not a number"),
        ("1e3Ki", "not a number"),
        ("1e1.5", "not a number"),
        ("8Ei", "too large"),
        ("9223372036854775808", "too large"),
        ("1e19", "too large"),
        ("1e5000", "too large"),
        ("1e1000000", "too large"),
        ("1e999999999", "too large"),
        ("1e99999999999999999999", "exponent is out of range"),  # past int64, as the API server
        ("1" * 200, "longer than 100 characters"),
        (2**64, "too large"),
        (True, "got a boolean"),
        (None, "got NoneType"),
        ({"cpu": 1}, "got dict"),
    ],
)
def test_what_the_api_server_refuses_is_one_line_naming_the_value(bad, says):
    with pytest.raises(QuantityError) as caught:
        parse(bad)
    message = str(caught.value)
    assert says in message
    assert "\n" not in message
    assert message.startswith("quantity ")
    assert caught.value.shown in message


def test_messages_stay_one_line_and_short_for_hostile_text():
    with pytest.raises(QuantityError) as caught:
        parse("1\n" + "x" * 10_000)
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 200
    with pytest.raises(QuantityError) as huge:
        parse(10**5000)  # str() of this int alone raises ValueError on 3.11
    assert "10^5000" in str(huge.value)


def test_negative_is_valid_syntax_but_never_a_request_or_capacity():
    assert parse("-1").nanos == -NANO
    for reader in (parse_quantity, lambda v: to_canonical(CPU, v)):
        with pytest.raises(QuantityError, match=r'quantity "-1": must be greater than or equal to 0'):
            reader("-1")


def test_core_units_round_up():
    assert to_canonical(CPU, "0.1m") == 1
    assert to_canonical(MEMORY, "0.5") == 1
    assert to_canonical(CPU, "1.5") == 1500
    assert to_canonical("nvidia.com/gpu", 2) == 2
    assert parse_quantity("1.5Ki") == Fraction(1536)


# ---------------------------------------------------------------------------------------- properties
signs = st.sampled_from(["", "+", "-"])
digit_runs = st.text(alphabet="0123456789", max_size=25)
suffixes = st.one_of(
    st.sampled_from([*BINARY, *DECIMAL]),
    st.builds(lambda e, s: f"{e}{s}", st.sampled_from(["e", "E"]), st.integers(-40, 40)),
)


@st.composite
def grammar_texts(draw: st.DrawFn) -> str:
    whole, fraction = draw(digit_runs), draw(digit_runs)
    point = "." if draw(st.booleans()) else ""
    return f"{draw(signs)}{whole}{point}{fraction if point else ''}{draw(suffixes)}"


def reference_nanos(text: str) -> int | None:
    """Exact value with fractions, rounded away from zero to a nano; None when the text has no digits."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    for index, char in enumerate(body):
        if char not in "0123456789.":
            number, suffix = body[:index], body[index:]
            break
    else:
        number, suffix = body, ""
    if not number.strip("."):
        return None
    value = Fraction(number if not number.endswith(".") else number[:-1] or "0")
    if suffix in BINARY:
        value *= 2 ** BINARY[suffix]
    elif suffix in DECIMAL:
        value *= Fraction(10) ** DECIMAL[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    return sign * math.ceil(value * NANO)


@given(grammar_texts())
def test_grammar_texts_parse_to_the_exact_value_or_are_too_large(text):
    expected = reference_nanos(text)
    if expected is None:
        with pytest.raises(QuantityError, match="not a number"):
            parse(text)
    elif abs(expected) > MAX_MAGNITUDE * NANO:
        with pytest.raises(QuantityError, match="too large"):
            parse(text)
    else:
        assert parse(text).nanos == expected


anything = st.one_of(
    st.text(max_size=120),
    grammar_texts(),
    st.text(alphabet="0123456789.+-eEKMGTPinumk１٣ \t", max_size=60),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
)


@given(anything)
def test_any_input_parses_or_raises_quantity_error_and_nothing_else(value):
    try:
        quantity = parse(value)
    except QuantityError as err:
        assert "\n" not in str(err)
    else:
        assert abs(quantity.nanos) <= MAX_MAGNITUDE * NANO


@given(
    st.one_of(
        anything,
        st.builds(lambda d, e: f"{d}e{e}", st.integers(0, 99), st.integers(-(10**12), 10**12)),
        st.builds(lambda e: f"0.{'0' * 90}1e{e}", st.integers(-(10**15), 10**15)),
    )
)
def test_parsing_never_costs_more_than_a_small_fixed_amount_of_memory(value):
    assert peak_memory_of(lambda: parse(value)) < PEAK_BYTES


@pytest.mark.parametrize("text", ["1e5000", "1e1000000", "1e999999999", "9" * 99, "1e-999999999"])
def test_huge_exponents_cost_no_more_than_small_ones(text):
    assert peak_memory_of(lambda: parse(text)) < PEAK_BYTES


quantities = st.builds(
    Quantity,
    st.integers(-MAX_MAGNITUDE * NANO, MAX_MAGNITUDE * NANO),
    st.sampled_from([DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT]),
)


@given(st.one_of(quantities, grammar_texts().filter(lambda t: _parses(t)).map(parse)))
def test_canonical_forms_round_trip(quantity):
    canonical = quantity.canonical()
    again = parse(canonical)
    assert again.nanos == quantity.nanos
    assert again.canonical() == canonical


def _parses(text: str) -> bool:
    try:
        parse(text)
    except QuantityError:
        return False
    return True


@given(st.integers(0, 10**15))
def test_cpu_and_counts_format_back_to_the_same_amount(amount):
    assert to_canonical(CPU, format_quantity(CPU, amount)) == amount
    assert to_canonical("pods", format_quantity("pods", amount)) == amount


@given(st.integers(0, 2**20 - 1) | st.integers(0, 2**40).map(lambda n: n * 1024))
def test_exact_memory_amounts_format_back_to_the_same_amount(amount):
    assert to_canonical(MEMORY, format_quantity(MEMORY, amount)) == amount
