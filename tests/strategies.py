"""Hypothesis strategies shared by the suite."""

from __future__ import annotations

from hypothesis import strategies as st

NS_PER_S = 1_000_000_000

#: Any ns timestamp a 64-bit-seconds filesystem might hold around our era, pre-1970 included.
timestamps_ns = st.integers(min_value=-(2**31) * NS_PER_S, max_value=2**34 * NS_PER_S)

#: Timestamps near today's epoch, where float seconds lose 100-250 ns.
recent_ns = st.integers(min_value=1_000_000_000 * NS_PER_S, max_value=2_500_000_000 * NS_PER_S)

modes = st.integers(min_value=0, max_value=0o7777)

#: Recent timestamps whose sub-second part is not a whole microsecond: every truncation loses something.
fractional_recent_ns = st.builds(
    lambda sec, nsec: sec * NS_PER_S + nsec,
    st.integers(min_value=1_000_000_000, max_value=2_500_000_000),
    st.integers(min_value=1, max_value=NS_PER_S - 1).filter(lambda n: n % 1000 != 0),
)
