"""The one way YAML and JSON are read: bounded in size, depth and (YAML) aliases before they are parsed.

A file a user hands us (a config root's entry, a captured file's header, a validation data set) may be crafted: a
373-byte YAML "billion laughs" whose aliases expand into billions of nodes, a JSON array nested 100,000 deep that
Python's parser answers with a ``RecursionError``, a ``!!python/object`` tag. ``load_yaml`` and ``load_json`` look
at the text's shape first (YAML's parse events, which never expand an alias; JSON's brackets outside strings) and
refuse what is over the bounds with a ``ValueError`` naming the file, in milliseconds and without building
anything; only then is the text parsed.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# every config and data file of the project is far below these; a larger one is not ours
MAX_TEXT_BYTES = 16 * 2**20  # a JSON or CSV table of measurements
MAX_YAML_BYTES = 2**20  # the largest shipped YAML is 12 KB
MAX_DEPTH = 64  # nesting of maps and lists
MAX_YAML_NODES = 100_000  # scalars, maps and lists once every alias is expanded
# the tags a YAML file may carry: YAML's own types (the ones yaml.SafeLoader builds); a Python object's
# (``!!python/object/apply:os.system``) or an application's own is refused
_YAML_TAGS = {f"tag:yaml.org,2002:{kind}" for kind in
              ("null", "bool", "int", "float", "str", "binary", "timestamp", "seq", "map", "omap", "pairs", "set")}
_OPENING = np.frombuffer(b"[{", dtype=np.uint8)
_BRACKETS = np.frombuffer(b"[{]}", dtype=np.uint8)
_DEPTH_CHUNK = 2**18


def read_text(source: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The text of the regular file ``source``, refused when larger than ``max_bytes`` (checked before reading), not
    a regular file (a FIFO would block, ``/dev/zero`` never ends) or not UTF-8; a ``ValueError`` naming ``what``."""
    path = Path(source)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError(f"{what} {str(path)!r} is not a regular file; expected a text file")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise ValueError(f"{what} {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise ValueError(f"{what} {str(path)!r} is larger than {max_bytes:,} bytes; expected a small text file")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text") from None


def check_yaml(text: str, what: str) -> str:
    """``text`` itself, once its YAML is found within the bounds: at most ``MAX_DEPTH`` deep and ``MAX_YAML_NODES``
    nodes with every alias expanded (counted from the parse events: an alias adds its anchor's count, never a
    copy), and no tag but YAML's own. Else a ``ValueError`` naming ``what``."""
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, depth) of the node it names
    stack: list[list[Any]] = []  # per open map/list: [nodes so far, deepest child, its anchor]
    total = 0
    try:
        for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            tag = getattr(event, "tag", None)
            if tag not in (None, "!") and tag not in _YAML_TAGS:
                raise ValueError(f"{what}: the tag {tag!r} is not allowed; expected plain YAML values "
                                 "(maps, lists, text, numbers, booleans, null)")
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append([1, 0, event.anchor])
                if len(stack) > MAX_DEPTH:
                    raise ValueError(f"{what} nests maps and lists more than {MAX_DEPTH} deep; expected a config")
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                nodes, depth, anchor = stack.pop()
                depth += 1
            elif isinstance(event, yaml.AliasEvent):
                nodes, depth = sizes.get(event.anchor, (1, 1))
                anchor = None
            elif isinstance(event, yaml.ScalarEvent):
                nodes, depth, anchor = 1, 1, event.anchor
            else:
                continue
            if anchor is not None:
                sizes[anchor] = (nodes, depth)
            if stack:
                stack[-1][0] += nodes
                stack[-1][1] = max(stack[-1][1], depth)
                total = stack[0][0]
            else:
                total += nodes
            if total > MAX_YAML_NODES or len(stack) + depth > MAX_DEPTH + 1:
                raise ValueError(f"{what} expands to more than {MAX_YAML_NODES:,} values or {MAX_DEPTH} levels once "
                                 "its aliases (*name) are expanded; expected a config")
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} is not valid YAML: {' '.join(str(exc).split())}") from None
    return text


def load_yaml(source: str | Path, what: str) -> Any:
    """The YAML file ``source`` as plain values (``yaml.safe_load``), its size and shape checked first
    (``read_text``, ``check_yaml``)."""
    return load_yaml_text(read_text(source, what, MAX_YAML_BYTES), f"{what} {str(source)!r}")


def load_yaml_text(text: str, what: str) -> Any:
    """A YAML value given as text (a file's, or a ``--set key=value`` on a command line), checked as a file is;
    what the parser refuses after the checks (a list as a map's key, two documents) is a ``ValueError`` too."""
    if len(text.encode()) > MAX_YAML_BYTES:
        raise ValueError(f"{what} is longer than {MAX_YAML_BYTES:,} bytes")
    try:
        return yaml.safe_load(check_yaml(text, what))
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} is not valid YAML: {' '.join(str(exc).split())}") from None


def json_depth(data: bytes) -> int:
    """How deep ``data``'s JSON arrays and objects nest, counted without parsing: its brackets outside strings (a
    string runs between two quotes that are not escaped, i.e. not after an odd number of backslashes). Read in
    chunks of ``_DEPTH_CHUNK`` bytes, carrying the depth, whether a string is open and the backslashes before the
    chunk, so that the count costs a few times a chunk, not a few times the file."""
    deepest = depth = 0
    inside = False  # a string is open where the chunk begins
    backslashes = 0  # how many backslashes end the chunks before
    for start in range(0, len(data), _DEPTH_CHUNK):
        text = np.frombuffer(data, dtype=np.uint8, count=min(_DEPTH_CHUNK, len(data) - start), offset=start)
        index = np.arange(text.size, dtype=np.int32)
        # for each byte, the last byte at or before it in this chunk that is not a backslash (-1: none)
        last_other = np.maximum.accumulate(np.where(text == ord("\\"), -1, index))
        quotes = np.flatnonzero(text == ord('"'))
        before = last_other[np.maximum(quotes - 1, 0)]
        run = np.where(quotes > 0, quotes - 1 - before, 0) + np.where((quotes == 0) | (before < 0), backslashes, 0)
        quotes = quotes[run % 2 == 0]
        brackets = np.flatnonzero(np.isin(text, _BRACKETS))
        brackets = brackets[(np.searchsorted(quotes, brackets) + inside) % 2 == 0]  # outside a string
        steps = np.where(np.isin(text[brackets], _OPENING), 1, -1).astype(np.int32)
        levels = depth + np.cumsum(steps)
        deepest = max(deepest, int(levels.max(initial=0)))
        depth = int(levels[-1]) if levels.size else depth
        inside = (inside + quotes.size) % 2 == 1
        trailing = text.size - 1 - int(last_other[-1])
        backslashes = trailing + (backslashes if last_other[-1] < 0 else 0)
    return deepest


def load_json(data: bytes | str, what: str, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """``data`` parsed as JSON once it is at most ``max_bytes`` long and ``MAX_DEPTH`` deep; else a ``ValueError``
    naming ``what`` (Python's own parser answers deep nesting with a ``RecursionError``)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise ValueError(f"{what} is larger than {max_bytes:,} bytes of JSON")
    if (depth := json_depth(raw)) > MAX_DEPTH:
        raise ValueError(f"{what} nests JSON arrays and objects {depth:,} deep; expected at most {MAX_DEPTH}")
    try:
        return json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
