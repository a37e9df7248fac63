"""The run root's layout moved to ``wavealign.orchestrator.run_root`` (``RunRoot``), its one owner; ``analysis/load.py``
imports these names from here until its rewrite imports them from there, and then this module goes."""

from wavealign.orchestrator.run_root import DEFAULT_RUN_ROOT as DEFAULT_RUN_ROOT
from wavealign.orchestrator.run_root import is_run_root as is_run_root
from wavealign.orchestrator.run_root import run_root_state as run_root_state
