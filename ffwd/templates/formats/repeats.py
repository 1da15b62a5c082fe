"""A reply never carries the same call twice: repeats are held back, then dropped.

A small model that has made a call often writes it again, name and arguments
alike; an agent would run it twice. `RepeatFilter` sits between a parser's
deltas and the client. While a call's name and arguments so far could still
become a call made earlier in the reply (a prefix of one), its deltas are held
back; once it differs they go out, late but whole. If it completes as an exact
repeat (same name, same arguments text) it is dropped and `repeated` is set:
the generation stops there (`ffwd.engine.sample.text`). Holding is what keeps a
streamed reply equal to a whole one.

Worked example, the reply ``f({"a": 1}) f({"a": 1}) f({"a": 2})``::

    call 0  f {"a": 1}      nothing earlier: out as it comes
    call 1  f {"a":         a prefix of call 0: held
            f {"a": 1}      complete and equal to call 0: dropped, repeated = True
    (had it gone on as f {"a": 2}, the held deltas would go out at the "2")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ffwd.templates.formats.base import ContentDelta, Delta, ReasoningDelta


@dataclass(slots=True)
class _Call:
    name: str
    arguments: str = ""
    held: list[Delta] = field(default_factory=list)
    holding: bool = False


class RepeatFilter:
    """Deltas in, deltas out, without any call that repeats an earlier one."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []  # the complete calls passed on
        self.repeated = False  # the last call repeated an earlier one (and was dropped)
        self.dropped = 0
        self._calls: dict[int, _Call] = {}  # by the parser's index
        self._completed = 0  # calls the parser has completed (repeats included)

    def feed(self, deltas: Sequence[Delta], completed: int = 0) -> list[Delta]:
        """The deltas that may go out now; `completed` calls were finished by this feed
        (their last deltas are among `deltas`)."""
        out: list[Delta] = []
        for d in deltas:
            if isinstance(d, ReasoningDelta):
                out.append(d)  # before any call: nothing to hold
                continue
            if isinstance(d, ContentDelta):
                out += self.release()  # a call that turned into content is no repeat
                out.append(d)
                continue
            call = self._calls.get(d.index)
            if call is None:
                call = self._calls[d.index] = _Call(d.name or "")
                call.holding = any(name == call.name for name, _ in self.made)
            call.arguments += d.arguments
            if call.holding:
                call.held.append(d)
                if not self._may_repeat(call):
                    out += self.release()
            else:
                out.append(d)
        for _ in range(completed):  # the parser completes calls in order
            call = self._calls.get(self._completed)
            out += self._complete(call) if call is not None else []
            self._completed += 1
        return out

    def release(self) -> list[Delta]:
        """Whatever is held (the output ends, or the call stopped looking like a repeat)."""
        out: list[Delta] = []
        for call in self._calls.values():
            out += call.held
            call.held, call.holding = [], False
        return out

    def _may_repeat(self, call: _Call) -> bool:
        return any(name == call.name and args.startswith(call.arguments)
                   for name, args in self.made)

    def _complete(self, call: _Call) -> list[Delta]:
        if call.holding and (call.name, call.arguments) in self.made:
            call.held, call.holding = [], False
            self.repeated = True
            self.dropped += 1
            return []
        self.made.append((call.name, call.arguments))
        return self.release()

