"""``ffwd bench``'s concurrency row: many clients at once (issue 33).

For each ``--parallel P`` of the row (`run` takes them; default ffwd's own
default), one ``ffwd serve --parallel P`` serves every ffwd system of the run
(each request names its fill mode, as in the main table) and one
``llama-server -np P`` each llama-server system without speculation
(``llama-server``, ``llama-server:fa-off``): the same threads, each sequence
(slot) the same context. Each system is measured on:

1. ``alone``: each short request (a title or a summary of a note, at most 24
   output ids) on an idle server;
2. ``beside long``: the same short requests while one request of `BESIDE`
   ids (end of text suppressed) decodes;
3. the mix at 1, 2, 4 and 8 clients: `SHORT` short and `LONG` long requests
   (prose answers of `LONG_TOKENS` ids) split among the clients (`shares`: a
   short and a long one to each in turn), each sending its share one after
   another: aggregate output ids per second over the
   round's wall time, the median and 95th percentile of a request's latency,
   and the short requests' median latency in the mix;
4. ``echo`` (the ffwd systems): the echo workload's edits and re-quotes at 1 and
   P clients, aggregate ids per second.

Every round's requests carry a tag of their own, so no cache holds them from
an earlier round; each round is a session of its own (`System.begin`: recall
copies nothing across rounds). Systems run back to back per round, the first
rotating with the round and the repeat, as in the main table. The summary and
the issue's targets are in `ffwd.bench.concurrency_report`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import httpx

from ffwd.bench.environment import load_average
from ffwd.bench.systems import TIMEOUT, Outcome, System, servers
from ffwd.bench.systems.ffwd_http import FfwdHTTP, chat_request
from ffwd.bench.systems.names import LLAMA_SERVER, SERVED, ffwd_settings, parse_system
from ffwd.bench.workloads import PROSE_QUESTIONS, Item, echo_items

CLIENTS = (1, 2, 4, 8)
SHORT, LONG = 4, 4  # requests of each kind in a round of the mix
SHORT_TOKENS = 24
LONG_TOKENS, QUICK_LONG_TOKENS = 256, 128
BESIDE = 1000  # the long generation a short request is sent beside (stopped after them)
NOTES = (
    "The meeting moved to Thursday at ten; bring the budget figures and the hiring plan.",
    "Our build broke after the dependency upgrade; pinning the old version fixed it.",
    "The river trail is closed for repairs until May, so take the ridge path instead.",
    "Sales rose eight percent in March, mostly from the new subscription plan.",
    "The printer on the second floor jams when the paper tray is more than half full.",
    "Grandma's soup needs two onions, a bay leaf and an hour on a low flame.",
)


def short_items(tag: str) -> list[Item]:
    asks = ("Give this note a title of at most five words: ", "Summarize in one line: ")
    return [Item("concurrency", f"short:{i}",
                 [{"role": "user", "content": f"({tag}) {asks[i % 2]}{NOTES[i % len(NOTES)]}"}],
                 SHORT_TOKENS, kind="short", warm=True) for i in range(SHORT)]


def long_items(tag: str, tokens: int) -> list[Item]:
    return [Item("concurrency", f"long:{i}",
                 [{"role": "user", "content": f"({tag}) {PROSE_QUESTIONS[i]}"}], tokens,
                 kind="long", warm=True) for i in range(LONG)]


def tagged(items: Sequence[Item], tag: str) -> list[Item]:
    """`items` with `tag` at the start of their first message (no earlier cache holds them)."""
    out = []
    for it in items:
        first = {**it.messages[0], "content": f"({tag}) {it.messages[0]['content']}"}
        out.append(replace(it, messages=[first, *it.messages[1:]], warm=True))
    return out


def interleave(a: Sequence[Item], b: Sequence[Item]) -> list[Item]:
    return [x for pair in zip(a, b, strict=True) for x in pair]


def shares(items: Sequence[Item], clients: int, group: int = 1) -> list[list[Item]]:
    """What each of `clients` sends, one after another: `items` taken `group` at a time
    (a short and a long request: every client sends both kinds), the groups dealt
    round-robin; with more clients than groups, one request each.

    >>> [[int(x) for x in s] for s in shares(list("01234567"), 2, group=2)]
    [[0, 1, 4, 5], [2, 3, 6, 7]]
    >>> [len(s) for s in shares(list("01234567"), 8, group=2)]
    [1, 1, 1, 1, 1, 1, 1, 1]
    """
    groups = [list(items[i : i + group]) for i in range(0, len(items), group)]
    if clients > len(groups):
        return [[it] for it in items[:clients]] + [[] for _ in range(clients - len(items))]
    return [[it for g in groups[k::clients] for it in g] for k in range(clients)]


def run_clients(system: System, items: Sequence[Item], clients: int,
                prompts: Callable[[Item], list[int]], group: int = 1) -> dict[str, Any]:
    """`items` split among `clients` threads (`shares`), each sending its share one after
    another: the round's wall seconds, output ids and each request's latency."""
    outcomes: list[tuple[Item, Outcome]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    dealt = shares(items, clients, group)

    def client(k: int) -> None:
        try:
            for it in dealt[k]:
                o = system.run(it, prompts(it))
                with lock:
                    outcomes.append((it, o))
        except BaseException as exc:  # reported below, with the system's name
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{system.name} at {clients} clients: {errors[0]}") from errors[0]
    return {"wall": round(wall, 4), "ids": sum(o.tokens for _, o in outcomes),
            "latency": [round(o.seconds, 4) for _, o in outcomes],
            "short": [round(o.seconds, 4) for it, o in outcomes if it.kind == "short"]}


Stream = Callable[[threading.Event, threading.Event], None]  # (began, stop)


@contextmanager
def decoding(stream: Stream) -> Iterator[None]:
    """A long generation running (`stream` reads it, setting `began` at its first output,
    until `stop`), entered once its output began; closed on exit (the server cancels it)."""
    began, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def go() -> None:
        try:
            stream(began, stop)
        except BaseException as exc:  # the waiting side reports it
            errors.append(exc)
        finally:
            began.set()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    began.wait()
    if errors:
        raise RuntimeError(f"the long generation did not start: {errors[0]}")
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _stream(url: str, body: dict[str, Any], began: threading.Event,
            stop: threading.Event) -> None:
    with httpx.Client(timeout=TIMEOUT) as client, client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        for _ in r.iter_lines():
            began.set()
            if stop.is_set():
                return  # closing the stream cancels the generation


def long_generation(system: System, prompt_ids: list[int], eos: Sequence[int],
                    tokens: int) -> Stream:
    """How to stream `system`'s long generation of `tokens` ids (end of text suppressed)."""
    from ffwd.bench.systems.llama_http import LlamaServerHTTP

    if isinstance(system, FfwdHTTP):
        return partial(_stream, system.url + "/v1/completions", {
            "model": "default", "prompt": prompt_ids, "max_tokens": tokens, "stream": True,
            "temperature": 0.0, "logit_bias": {str(i): -100 for i in eos},
            "ffwd": {"fill": "off"}})
    assert isinstance(system, LlamaServerHTTP)
    return partial(_stream, system.url + "/completion", {
        "prompt": prompt_ids, "n_predict": tokens, "stream": True, "temperature": 0.0,
        "ignore_eos": True, "cache_prompt": False})


def row_systems(names: Sequence[str]) -> list[str]:
    """The systems of a run that the row measures: ffwd-off and ffwd-echo (no variant) and
    llama-server without speculation.

    >>> row_systems(["ffwd-off", "ffwd-echo:kv-f16", "llama-server:ngram-mod",
    ...              "llama-server:fa-off", "ffwd-echo", "hf-generate"])
    ['ffwd-off', 'llama-server:fa-off', 'ffwd-echo']
    """
    out = []
    for name in names:
        n = parse_system(name)
        if (n.base in ("ffwd-off", "ffwd-echo") and ":" not in name) or (
                n.base == LLAMA_SERVER and n.spec is None):
            out.append(name)
    return out


def start(names: Sequence[str], setup: Any, parallel: int, decoder: Any,
          stack: ExitStack) -> list[System]:
    """The row's systems at `parallel` sequences (slots), their servers on `stack`."""
    from ffwd.bench.systems.llama_http import LlamaServerHTTP

    args, service = setup.args, setup.service
    out: list[System] = []
    ffwd_url = None
    for name in names:
        n = parse_system(name)
        if n.base in SERVED:
            if ffwd_url is None:
                ffwd_url = stack.enter_context(servers.ffwd_server(
                    args.model, setup.engine, setup.threads, args.dtype,
                    parallel=parallel)).url
            fill, grammar, recall = ffwd_settings(n.base)
            out.append(FfwdHTTP(ffwd_url, fill, name, grammar, recall))
        else:
            peer = LlamaServerHTTP(partial(
                servers.llama_server, str(setup.ref.path), setup.threads,
                service.context_window, 512, None, n.flash, parallel, n.upstream), decoder, None,
                name)
            stack.callback(peer.close)
            out.append(peer)
    return out


def measure(setup: Any, names: Sequence[str], parallels: Sequence[int],
            repeats: int) -> dict[str, Any]:
    """The row (see the module docstring) for each of `parallels`."""
    from ffwd.bench.systems import Decoder

    service = setup.service
    decoder = Decoder(service.tokenizer, service.format_name, frozenset(service.eos_ids))
    chosen = row_systems(names)
    load = [load_average()]
    by_parallel: dict[str, Any] = {}
    for parallel in parallels:
        with ExitStack() as stack:
            systems = start(chosen, setup, parallel, decoder, stack)
            by_parallel[str(parallel)] = _rows(setup, systems, parallel, repeats)
        load.append(load_average())
    return {"systems": chosen, "clients": list(CLIENTS), "parallel": by_parallel,
            "load": load, "ffwd_path": service.backend.dtype_name,
            "sizes": {"short": SHORT_TOKENS, "long": _quick(setup, LONG_TOKENS,
                                                           QUICK_LONG_TOKENS),
                      "beside": BESIDE}}


def _quick(setup: Any, full: int, quick: int) -> int:
    return quick if setup.args.quick else full


def _rows(setup: Any, systems: Sequence[System], parallel: int,
          repeats: int) -> dict[str, Any]:
    """Every measurement of the row at one `parallel`, systems interleaved."""
    service = setup.service
    cache: dict[str, list[int]] = {}

    def prompt(it: Item) -> list[int]:
        key = it.messages[0]["content"] + it.key
        if key not in cache:
            cache[key] = service.prepare(chat_request(it, "off")).prompt_ids
        return cache[key]

    rows: dict[str, dict[str, Any]] = {
        s.name: {"alone": [], "beside": [], "mix": {}, "echo": {}} for s in systems}
    echo = echo_items(setup.limit, setup.args.seed, max_chars=700 if setup.args.quick else 1600,
                      cap=192 if setup.args.quick else 448)
    rounds = 0
    for r in range(repeats):
        for kind, clients in _plan(parallel):
            k = rounds % len(systems)
            for system in [*systems[k:], *systems[:k]]:
                if kind == "echo" and parse_system(system.name).base not in SERVED:
                    continue
                tag = f"r{r}-{kind}{clients}-{system.name}-{rounds}"
                system.begin(tag)
                _one(setup, system, kind, clients, tag, prompt, echo, rows[system.name])
            rounds += 1
    return rows


def _plan(parallel: int) -> list[tuple[str, int]]:
    """The rounds of one repeat, (kind, clients); echo rounds run the ffwd systems only.

    >>> _plan(4)[:3], _plan(4)[-2:]
    ([('alone', 1), ('beside', 1), ('mix', 1)], [('echo', 1), ('echo', 4)])
    """
    return [("alone", 1), ("beside", 1), *(("mix", c) for c in CLIENTS),
            *(("echo", c) for c in dict.fromkeys((1, parallel)))]


def _one(setup: Any, system: System, kind: str, clients: int, tag: str,
         prompt: Callable[[Item], list[int]], echo: Sequence[Item],
         row: dict[str, Any]) -> None:
    """One round of `kind` on `system`, its figures added to `row`."""
    shorts = short_items(tag)
    if kind == "alone":
        row["alone"] += [round(system.run(it, prompt(it)).seconds, 4) for it in shorts]
    elif kind == "beside":
        eos = sorted(setup.service.eos_ids)
        tokens = BESIDE
        ids = prompt(long_items(tag, tokens)[0])
        with decoding(long_generation(system, ids, eos, tokens)):
            row["beside"] += [round(system.run(it, prompt(it)).seconds, 4) for it in shorts]
    else:
        items = (interleave(shorts, long_items(tag, _quick(setup, LONG_TOKENS,
                                                           QUICK_LONG_TOKENS)))
                 if kind == "mix" else tagged(echo, tag))
        row[kind].setdefault(str(clients), []).append(
            run_clients(system, items, clients, prompt, group=2 if kind == "mix" else 1))


def parallels_default(raw: str | None, default: int) -> list[int]:
    """``--parallel`` of ``ffwd bench``: a comma-separated list (default: ffwd's own).

    >>> parallels_default("1,4", 4), parallels_default(None, 4)
    ([1, 4], [4])
    """
    if not raw:
        return [default]
    values = [int(v) for v in raw.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise ValueError(f"--parallel {raw!r}: expected numbers >= 1, comma-separated")
    return list(dict.fromkeys(values))

