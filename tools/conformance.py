"""Every promise on the default path, on generated inputs: ``python -m tools.conformance``.

Hypothesis draws tool schemas (nested objects, arrays, enums, integers, numbers,
booleans, optional keys, ``anyOf``), user prompts, seeds, temperatures 0-1.2,
``tool_choice`` required / named / auto, ``parallel_tool_calls`` and
``response_format`` json_schema, and `check` sends each as a request to an app
in this process, plain and streamed (greedy ones twice more, from a cold and a
warm prompt cache). Every reply must be a 200 whose calls name listed functions
with arguments valid against their schema and no keys outside it (or an honest
``finish_reason: "length"``, the last call cut), never the same call twice,
streamed == plain, and greedy cold == warm. `tests/integration/test_conformance.py`
runs a few examples in ``make test``; the command runs more and prints the counts::

    python -m tools.conformance --examples 500
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from hypothesis import strategies as st

WORDS = ("alpha", "bravo", "cargo", "delta", "ember", "fable", "glyph", "harbor", "ivory",
         "jolly", "kiosk", "lumen", "mango", "noble", "orbit", "pixel", "quartz", "ridge",
         "sable", "tundra", "umber", "vivid", "wharf", "yonder", "zephyr", "city", "count",
         "date", "price", "unit", "mode", "level", "tags", "note", "limit", "query")
PROMPTS = ("Book two seats to {0} for {1}, please.", "What is the {0} of {1}?",
           "Set the {0} to {1} and tell me when it is done.", "Find {0} items about {1}.",
           "Please log today's numbers: {1} and {0}.", "Convert {1} {0} now.")

names = st.sampled_from(WORDS)


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({"type": "string"}),
        st.integers(1, 40).map(lambda n: {"type": "string", "maxLength": n}),
        st.lists(names, min_size=1, max_size=4, unique=True).map(
            lambda xs: {"type": "string", "enum": xs}),
        st.just({"type": "integer"}),
        st.tuples(st.integers(-5, 5), st.integers(0, 50)).map(
            lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}),
        st.just({"type": "number"}), st.just({"type": "boolean"}),
    )


def _value(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    leaf = _leaf()
    if depth <= 0:
        return leaf
    return st.one_of(
        leaf,
        leaf.map(lambda s: {"type": "array", "items": s}),
        st.tuples(leaf, leaf).map(lambda t: {"anyOf": list(t)}),
        _object(depth - 1),
    )


def _object(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    props = st.dictionaries(names, st.deferred(lambda: _value(depth)), min_size=1, max_size=4)
    return props.flatmap(lambda p: st.lists(st.sampled_from(sorted(p)), unique=True).map(
        lambda req: {"type": "object", "properties": p, "required": req}))


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """One chat request body as an agent might send it (see the module docstring)."""
    tool_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": f"{n}_{i}", "parameters": draw(_object(1))}}
        for i, n in enumerate(tool_names)]
    prompt = draw(st.sampled_from(PROMPTS)).format(draw(names), draw(st.integers(2, 999)))
    greedy = draw(st.booleans())
    body: dict[str, Any] = {
        "model": "default", "messages": [{"role": "user", "content": prompt}],
        "max_tokens": draw(st.integers(40, 128)), "seed": draw(st.integers(0, 2**31)),
        "temperature": 0.0 if greedy else round(draw(st.floats(0.05, 1.2)), 3),
    }
    kind = draw(st.sampled_from(["required", "named", "auto", "response_format"]))
    if kind == "response_format":
        schema = draw(_object(1))
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "reply", "schema": schema}}
        return body
    choice: Any = kind
    if kind == "named":
        choice = {"type": "function", "function": {"name": draw(st.sampled_from(
            [t["function"]["name"] for t in tools]))}}
    return {**body, "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": draw(st.booleans())}


@dataclass(frozen=True)
class Reply:
    """What a client gets: the content, the calls (name, arguments) and why it ended."""

    content: str
    calls: tuple[tuple[str, str], ...]
    finish: str


@dataclass
class Outcome:
    kind: str = "valid"  # valid | cut (finish_reason length) | failure
    problems: list[str] = field(default_factory=list)


Post = Callable[[dict[str, Any]], tuple[int, Any]]  # body -> (status, JSON or error text)
Stream = Callable[[dict[str, Any]], Reply]


def whole_reply(body: Any) -> Reply:
    choice = body["choices"][0]
    message = choice["message"]
    calls = tuple((c["function"]["name"], c["function"]["arguments"])
                  for c in message.get("tool_calls") or [])
    return Reply(message.get("content") or "", calls, choice["finish_reason"])


def joined_reply(chunks: list[dict[str, Any]]) -> Reply:
    """A stream's chunks put together the way an OpenAI client does."""
    content, finish = "", ""
    calls: dict[int, tuple[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for d in delta.get("tool_calls") or []:
                name, args = calls.get(d["index"], ("", ""))
                fn = d.get("function") or {}
                name, args = name + (fn.get("name") or ""), args + (fn.get("arguments") or "")
                calls[d["index"]] = (name, args)
    return Reply(content, tuple(calls[i] for i in sorted(calls)), finish)


def problems(body: dict[str, Any], reply: Reply) -> list[str]:
    """What breaks a promise in `reply` to `body` (empty: none)."""
    from ffwd.grammar.lark import strict_schema

    cut = reply.finish == "length"
    out = [f"the same call twice: {reply.calls[0][0]}"] if len(set(reply.calls)) < len(
        reply.calls) else []
    if "response_format" in body and not cut:
        schema = body["response_format"]["json_schema"]["schema"]
        out += _invalid(reply.content, schema, "content")
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in body.get("tools", [])}
    choice = body.get("tool_choice")
    forced = choice == "required" or isinstance(choice, dict)
    if forced and not reply.calls and not cut:
        out.append(f"tool_choice {json.dumps(choice)} gave no call")
    for i, (name, args) in enumerate(reply.calls):
        named = choice["function"]["name"] if isinstance(choice, dict) else None
        if name not in tools or named not in (None, name):
            out.append(f"a call of {name!r}, which may not be called")
        elif not (cut and i == len(reply.calls) - 1):  # a cut call is as far as written
            out += _invalid(args, strict_schema(tools[name], listed_only=True),
                            f"{name} arguments")
    return out


def _invalid(text: str, schema: dict[str, Any], what: str) -> list[str]:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
        return [f"{what} invalid: {str(exc).splitlines()[0][:160]} in {text[:120]!r}"]
    return []


def check(body: dict[str, Any], post: Post, stream: Stream,
          cold: Callable[[], None] | None = None, exact: bool = True) -> Outcome:
    """One request's promises: a 200 with valid calls, streamed and whole; where the server
    is `exact` (--deterministic), streamed == plain and greedy cold == warm as well."""
    status, got = post(body)
    if status != 200:
        return Outcome("failure", [f"HTTP {status}: {str(got)[:200]}"])
    plain = whole_reply(got)
    found = problems(body, plain)
    streamed = stream(body)
    if not exact:
        found += [f"streamed: {p}" for p in problems(body, streamed)]
        return Outcome("failure", found) if found else Outcome(
            "cut" if plain.finish == "length" else "valid")
    if streamed != plain:
        found.append(f"stream {streamed} != plain {plain}")
    if body["temperature"] == 0 and cold is not None:
        cold()
        first = whole_reply(post(body)[1])
        again = whole_reply(post(body)[1])  # warm: the cache holds its prompt and output
        if not first == again == plain:
            found.append(f"greedy: cold {first} warm {again} before {plain}")
    if found:
        return Outcome("failure", found)
    return Outcome("cut" if plain.finish == "length" else "valid")


class InProcess:
    """The app over the default engine, in this process: `post`, `stream` and `cold`;
    `exact` runs it under --deterministic."""

    def __init__(self, model: str = "default", exact: bool = False) -> None:
        from fastapi.testclient import TestClient

        from ffwd.config import SERVER_DEFAULT_FILL, resolve_engine_config, resolve_fill_config
        from ffwd.serve.app import create_app
        from ffwd.serve.service import load_service

        fill = resolve_fill_config(default_mode=SERVER_DEFAULT_FILL)
        engine = resolve_engine_config(overrides={"deterministic": exact or None})
        self.exact = engine.deterministic
        self.service = load_service(model, engine, fill)
        self.client = TestClient(create_app(self.service))

    def post(self, body: dict[str, Any]) -> tuple[int, Any]:
        r = self.client.post("/v1/chat/completions", json=body)
        return r.status_code, r.json() if r.status_code == 200 else r.text

    def stream(self, body: dict[str, Any]) -> Reply:
        chunks = []
        with self.client.stream("POST", "/v1/chat/completions",
                                json={**body, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(json.loads(line[6:]))
        return joined_reply(chunks)

    def cold(self) -> None:
        """Forget every cached prefix: the next request prefills from nothing."""
        self.service.prompt_cache.clear()
        for seq in self.service.context.sequences:
            seq.reset()


def run(examples: int, app: InProcess, seed: int = 0) -> tuple[Counter[str], list[str]]:
    """`examples` generated requests through `check`: the counts and the failures."""
    from hypothesis import HealthCheck, Phase, given, settings

    counts: Counter[str] = Counter()
    failures: list[str] = []

    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=seed == 0)
    @given(requests())
    def one(body: dict[str, Any]) -> None:
        outcome = check(body, app.post, app.stream, app.cold, app.exact)
        counts[outcome.kind] += 1
        if outcome.problems:
            failures.append(f"{json.dumps(body)[:300]}\n    " + "\n    ".join(outcome.problems))

    one()
    return counts, failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.conformance",
                                description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--model", default="default")
    p.add_argument("--seed", type=int, default=0, help="0: the same examples every run")
    p.add_argument("--deterministic", action="store_true",
                   help="serve --deterministic and check streamed == plain, cold == warm too")
    args = p.parse_args(argv)
    counts, failures = run(args.examples, InProcess(args.model, args.deterministic), args.seed)
    total = sum(counts.values())
    print(f"{total} examples: valid {counts['valid']}, cut by max_tokens {counts['cut']}, "
          f"failures {counts['failure']}")
    for f in failures:
        print(f"- {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
