"""YAML for the files users write (recipes, tool schemas, fleet files, profiles, prices, the lock):
plain data only.

Anchors and aliases are refused: none of these files needs them, and an alias bomb (a few lines
that expand to billions of nodes) would otherwise make a walk over the document run for minutes
and grow memory. Documents are also capped in size and nesting depth. Errors are
:class:`yaml.YAMLError` subclasses, so callers report them the way they report bad YAML.
"""

from __future__ import annotations

from typing import Any

MAX_YAML_BYTES = 16 * 2**20
MAX_YAML_DEPTH = 64


def _loader(text: str) -> Any:
    import yaml

    class PlainLoader(yaml.SafeLoader):
        """A SafeLoader that refuses aliases and deep nesting."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"YAML aliases (*{event.anchor}) are not accepted in prefixplan files; write the value out",
                    event.start_mark,
                )
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    if len(text) > MAX_YAML_BYTES:
        raise yaml.YAMLError(f"document larger than {MAX_YAML_BYTES // 2**20} MiB")
    return PlainLoader(text)


def _c_loader(text: str) -> Any:
    """libyaml's loader for ``text`` after one pass over its events in C refused aliases and deep
    nesting (the pure-Python composer is ~30x slower: a lock with 17,000 parts took 13 s);
    ``None`` when PyYAML was built without libyaml."""
    import yaml

    if not getattr(yaml, "__with_libyaml__", False):
        return None
    if len(text) > MAX_YAML_BYTES:
        raise yaml.YAMLError(f"document larger than {MAX_YAML_BYTES // 2**20} MiB")
    events = yaml.CSafeLoader(text)
    depth = 0
    try:
        while events.check_event():
            event = events.get_event()
            if isinstance(event, yaml.AliasEvent):
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"YAML aliases (*{event.anchor}) are not accepted in prefixplan files; write the value out",
                    event.start_mark,
                )
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    finally:
        events.dispose()
    return yaml.CSafeLoader(text)


def load(text: str | bytes) -> Any:
    """``yaml.safe_load`` without aliases (module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    loader = _c_loader(text) or _loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def compose(text: str) -> Any:
    """``yaml.compose`` (the node tree, with line numbers) without aliases."""
    loader = _c_loader(text) or _loader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()
