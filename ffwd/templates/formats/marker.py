"""Content handling shared by the incremental tool-call parsers.

`MarkerParser` returns text outside calls as content at once, except a
trailing piece that may begin the opening marker (``held_back``), and hands
the text after the marker to the subclass's ``_markup``. Markup that does not
parse goes back to the client as content (`_fail`).
"""

from __future__ import annotations

from ffwd.templates.formats.base import ContentDelta, Delta, ToolCall


class MarkerParser:
    """Content handling shared by the incremental parsers.

    Text outside calls is content and comes back at once, except a trailing
    piece that may begin the opening marker (`held_back`) and whitespace right
    after a call (kept aside: dropped when more markup follows or the message
    ends, returned with the next content otherwise). A subclass parses what
    follows the marker in `_markup` and calls `_fail` on text it cannot parse,
    which hands that raw text back as content.
    """

    open_marker = ""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.failures = 0  # markup that did not parse (handed back as content)
        self._out: list[Delta] = []
        self._mode = "content"
        self._held = ""  # content that may start the marker
        self._ws = ""  # whitespace after a call
        self._after_call = False
        self._at_start = True  # nothing but whitespace so far
        self._reset_call()

    def feed(self, text: str) -> list[Delta]:
        self._out = []
        rest: str | None = text
        while rest:
            rest = self._content(rest) if self._mode == "content" else self._markup(rest)
        self._flush()
        return self._out

    def finish(self, cut: bool = False) -> list[Delta]:
        """The deltas at the end of the message. `cut`: the message was cut off
        before the model ended it (a token limit, a stop string): an unfinished
        call stays as its deltas sent it, and neither its markup nor a partial
        marker is returned as content."""
        self._out = []
        if self._mode != "content" and cut:
            if self._call_complete():
                self._close_wrapper()  # a partial closing tag is no content either
            else:
                self._reset_call()
                self._mode = "content"
        elif self._mode != "content":
            self._finish_markup()
        if not cut:
            self._emit(self._held)
        self._held = ""
        return self._out

    @property
    def held_back(self) -> str:
        return self._held if self._mode == "content" else ""

    # --- content ------------------------------------------------------------
    def _content(self, text: str) -> str | None:
        """Emit content up to the marker; return the text after it, if found."""
        s = self._held + text
        self._held = ""
        i = s.find(self.open_marker)
        if i < 0:
            keep = held_suffix(s, self.open_marker)
            self._emit(s[: len(s) - keep])
            self._held = s[len(s) - keep :]
            return None
        self._emit(s[:i])
        self._begin(self.open_marker, "open")
        return s[i + len(self.open_marker) :]

    def _emit(self, text: str) -> None:
        if not text:
            return
        if self._after_call:
            if not text.strip():
                self._ws += text
                return
            text, self._ws, self._after_call = self._ws + text, "", False
        if text.strip():
            self._at_start = False
        self._out.append(ContentDelta(text))

    def _begin(self, raw: str, mode: str) -> None:
        self._ws, self._after_call, self._at_start = "", False, False
        self._reset_call()
        self._raw.append(raw)
        self._mode = mode

    def _fail(self, c: str = "") -> None:
        """Markup that does not parse: hand its raw text back as content."""
        self.failures += 1
        raw = "".join(self._raw) + c
        self._reset_call()
        self._mode = "content"
        self._after_call = False
        self._emit(raw)

    def _close_wrapper(self) -> None:
        self._reset_call()
        self._mode = "content"
        self._after_call = True

    # --- what a format supplies -------------------------------------------------
    def _reset_call(self) -> None:
        self._raw: list[str] = []  # the markup read so far, for `_fail`

    def _markup(self, text: str) -> str | None:
        """Consume markup; return text to read on as content once a call ends."""
        raise NotImplementedError

    def _finish_markup(self) -> None:
        self._fail()  # the message ended inside a call

    def _call_complete(self) -> bool:
        """Whether the call being read is complete (only its closing tag may be missing)."""
        return False

    def _flush(self) -> None:
        """Send what is pending at the end of `feed` (argument fragments)."""


def held_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`.

    >>> held_suffix("hello <tool_c", "<tool_call>")
    7
    """
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
