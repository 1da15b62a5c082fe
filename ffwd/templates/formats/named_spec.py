"""What a `Named` format is: the markup around a call's name and how its arguments are written.

`Named` lists the markers (see `ffwd.templates.formats.named`); `Kv` writes the
arguments as key/value pairs, `Dialect` as one object in a syntax of the
format's own (Gemma 4's), read by an `ObjectScan` and laid out for the row
compiler by an `ArgsLayout`; neither: one JSON object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ffwd.templates.formats.base import ArgLayout
from ffwd.templates.formats.markers import Marker, first_word


@dataclass(frozen=True)
class Kv:
    """Arguments as key/value pairs; `is_string` reads a `TYPE` slot's text (DSML's
    ``string="true"``) as whether the value is raw text."""

    key_open: Marker
    key_close: Marker
    value_close: Marker
    is_string: Callable[[str], bool] | None = None


class ObjectScan(Protocol):
    """An arguments object read a character at a time (`JsonScan`'s interface):
    ``chars`` is the JSON it is read as so far."""

    chars: list[str]
    key: str | None

    @property
    def text(self) -> str: ...
    @property
    def used(self) -> tuple[str, ...]: ...
    @property
    def where(self) -> tuple[object, ...]: ...
    def feed(self, c: str) -> bool | None: ...
    def value(self) -> object: ...


ArgsLayout = Callable[[str, int, Mapping[str, Any]], "tuple[tuple[ArgLayout, ...], int] | None"]


@dataclass(frozen=True)
class Dialect:
    """Arguments as one object in a format's own syntax (Gemma 4's): its name (the
    format's `arguments`), its reader and its layout (`json_arguments`' contract)."""

    name: str
    scan: Callable[[], ObjectScan]
    layout: ArgsLayout


@dataclass(frozen=True)
class Named:
    call_open: Marker
    name_close: Marker
    call_close: Marker = ""
    section_open: Marker = ""
    section_close: Marker = ""
    kv: Kv | None = None  # None: the arguments are one JSON object
    dialect: Dialect | None = None  # the object's syntax where it is not JSON
    marker: str = ""  # what starts the calls, where it is less than the first word

    @property
    def open_marker(self) -> str:
        return self.marker or first_word(self.section_open or self.call_open)
