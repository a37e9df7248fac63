"""Deprecated alias of ``analysis`` (``wavealign._renamed``); to be removed in 0.2."""

from wavealign._renamed import alias

alias(__name__, "analysis")
