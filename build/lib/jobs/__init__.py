"""Runnable entry points; each module is one ``wavealign <command>`` (see ``jobs/cli.py``)."""
