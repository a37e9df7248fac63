"""Deprecated alias of ``orchestrator`` (``wavealign._renamed``); to be removed in 0.2."""

from wavealign._renamed import alias

alias(__name__, "orchestrator")
