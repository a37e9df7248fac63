"""Runnable entry points: each module is one ``wavealign <command>`` (see ``jobs/cli.py``), but ``cli`` itself and
``arguments`` (the argument convention the commands and the ``lab/`` studies share)."""
