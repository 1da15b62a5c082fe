"""The names of the systems `ffwd bench` compares, and how a name is read.

A name is ``BASE`` or ``BASE:VARIANT``; what the variant means depends on the base:

* an ffwd system (``ffwd-off``, ``ffwd-echo``, ...): the engine its server runs
  on (`ENGINES`), ``ffwd-off:transformers``; bare, the bench's ``--backend``;
  or ``kv-TYPE`` (`KV_VARIANTS`): llama.cpp with that KV cache type instead of
  the default (``--kv-cache``), ``ffwd-echo:kv-f16``; or ``deterministic``:
  the server's exact mode (``ffwd serve --deterministic``, bit-identical greedy
  output), ``ffwd-echo:deterministic``, beside the default fast mode in one run;
* ``llama-server``: one of llama.cpp's draft-free speculation modes
  (`SPEC_MODES`, its ``--spec-type``), ``llama-server:ngram-mod``: a variant
  of the same server on the same engine, not an engine; or ``fa-off``, its
  other attention path (``-fa off``: llama.cpp's default is flash attention
  on), alone or joined to a mode with ``+``: ``llama-server:fa-off+ngram-mod``;
  or ``upstream``: the same server built without ``patches/llama.cpp``
  (``llama-server-upstream``, `make peers`), what a user of llama.cpp runs;
* ``hf-generate``, ``hf-prompt-lookup``: no variant.

`parse_system` reads a name into a `SystemName` whose ``engine`` and ``spec``
fields keep the two meanings apart, and refuses any other name.

>>> parse_system("ffwd-off:transformers").engine
'transformers'
>>> parse_system("llama-server:ngram-mod")[:3]
('llama-server', None, 'ngram-mod')
>>> parse_system("llama-server:fa-off+ngram-mod").flash
'off'
>>> parse_system("llama-server:upstream").upstream
True
>>> parse_system("ffwd-echo:kv-f16").name
'ffwd-echo:kv-f16'
>>> parse_system("ffwd-echo:deterministic").deterministic
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

FFWD_FILLS = ("off", "strict", "echo")
FFWD_SYSTEMS = tuple(f"ffwd-{f}" for f in FFWD_FILLS)
NO_GRAMMAR = "-nogrammar"  # ffwd-strict with {"ffwd": {"grammar": false}}
NO_RECALL = "-norecall"  # ffwd-echo with {"ffwd": {"recall": false}}: echo without recall
ECHO_NO_RECALL = "ffwd-echo" + NO_RECALL
ENGINES = ("llamacpp", "transformers")
KV_VARIANTS = ("kv-f16", "kv-q8_0", "kv-bf16")  # llama.cpp with that KV cache type
DETERMINISTIC = "deterministic"  # ffwd serve --deterministic: the exact mode
LLAMA_SERVER = "llama-server"
FA_OFF = "fa-off"  # llama-server -fa off: the attention path its default (on) is not
UPSTREAM = "upstream"  # llama-server built without patches/llama.cpp
# llama-server's draft-free speculation modes (--spec-type), each with llama.cpp's defaults.
SPEC_MODES = ("ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache")
EXTRA_SPEC_MODES = ("ngram-map-k4v",)  # experimental upstream: accepted, not run by default
LLAMA_SERVER_SYSTEMS = (LLAMA_SERVER, *(f"{LLAMA_SERVER}:{m}" for m in SPEC_MODES),
                        # its other attention path, plain and with its best speculation
                        f"{LLAMA_SERVER}:{FA_OFF}", f"{LLAMA_SERVER}:{FA_OFF}+ngram-mod",
                        f"{LLAMA_SERVER}:{UPSTREAM}")  # and unpatched, as users run it
HF_SYSTEMS = ("hf-generate", "hf-prompt-lookup")
ALL_SYSTEMS = (*FFWD_SYSTEMS, ECHO_NO_RECALL, *LLAMA_SERVER_SYSTEMS, *HF_SYSTEMS)
# --quick's systems: ffwd plain and copying, llama-server at its default and at its best
# flags on this project's CPU (docs/performance.md: ngram-mod at its default attention
# leads on every workload there since the patched kernel; -fa off led before it)
QUICK_SYSTEMS = ("ffwd-off", "ffwd-echo", LLAMA_SERVER, f"{LLAMA_SERVER}:ngram-mod")
# accepted by --systems, not run by default
EXTRA_SYSTEMS = ("ffwd-strict" + NO_GRAMMAR,
                 *(f"{LLAMA_SERVER}:{m}" for m in EXTRA_SPEC_MODES))
SERVED = (*FFWD_SYSTEMS, ECHO_NO_RECALL, "ffwd-strict" + NO_GRAMMAR)  # bases of ffwd serve


class SystemName(NamedTuple):
    """A parsed system name: ``engine`` only for ffwd systems, ``spec`` only for
    llama-server."""

    base: str
    engine: str | None = None  # ffwd systems: the engine after the colon (None: --backend)
    spec: str | None = None  # llama-server: the speculation mode after the colon (None: off)
    kv: str | None = None  # ffwd on llama.cpp: the KV cache type (None: the server's default)
    deterministic: bool = False  # ffwd: the server runs with --deterministic
    flash: str | None = None  # llama-server: "off" for -fa off (None: its default)
    upstream: bool = False  # llama-server: the build without patches/llama.cpp

    @property
    def name(self) -> str:
        spec = "+".join(v for v in (FA_OFF if self.flash == "off" else None, self.spec) if v)
        variant = (DETERMINISTIC if self.deterministic else UPSTREAM if self.upstream else
                   f"kv-{self.kv}" if self.kv else self.engine or spec)
        return f"{self.base}:{variant}" if variant else self.base



def parse_system(name: str) -> SystemName:
    """`name` read as in the module docstring; ValueError for anything else."""
    base, colon, variant = name.partition(":")
    if base not in (*SERVED, *LLAMA_SERVER_SYSTEMS, *HF_SYSTEMS):
        raise ValueError(f"unknown system {name!r}")
    if not colon:
        return SystemName(base)
    if base in SERVED and variant in ENGINES:
        return SystemName(base, engine=variant)
    if base in SERVED and variant in KV_VARIANTS:
        return SystemName(base, engine="llamacpp", kv=variant.removeprefix("kv-"))
    if base in SERVED and variant == DETERMINISTIC:
        return SystemName(base, deterministic=True)
    if base == LLAMA_SERVER and variant == UPSTREAM:
        return SystemName(base, upstream=True)
    if base == LLAMA_SERVER:
        flash, plus, spec = variant.partition("+") if variant.startswith(FA_OFF) else \
            ("", "", variant)
        if flash in ("", FA_OFF) and (spec in (*SPEC_MODES, *EXTRA_SPEC_MODES)
                                      or (flash and not plus)):
            return SystemName(base, spec=spec or None, flash="off" if flash else None)
    raise ValueError(f"system {name!r}: {_variants(base)}")


def _variants(base: str) -> str:
    if base in SERVED:
        return "an ffwd system may name an engine, a KV cache type or its mode: " + ", ".join(
            (*ENGINES, *KV_VARIANTS, DETERMINISTIC))
    if base == LLAMA_SERVER:
        return (f"llama-server may name {UPSTREAM}, {FA_OFF}, a speculation mode or the last "
                "two joined by +: " + ", ".join((*SPEC_MODES, *EXTRA_SPEC_MODES)))
    return f"{base} takes no variant"


def ffwd_settings(base: str) -> tuple[str, bool, bool]:
    """``(fill, grammar, recall)`` of an ffwd system's requests.

    >>> ffwd_settings("ffwd-echo-norecall")
    ('echo', True, False)
    """
    if base not in SERVED:
        raise ValueError(f"{base!r} is not an ffwd system")
    fill = base.removeprefix("ffwd-").removesuffix(NO_GRAMMAR).removesuffix(NO_RECALL)
    return fill, not base.endswith(NO_GRAMMAR), not base.endswith(NO_RECALL)


def prefill_systems(names: Sequence[str]) -> list[str]:
    """One of `names` per engine setup: systems that differ only in how they decode
    (fill mode, speculation, prompt lookup) prefill alike, so the prefill rows run
    one of each, the plain one where it is listed.

    >>> prefill_systems(["ffwd-echo", "ffwd-off", "ffwd-echo:deterministic",
    ...                  "llama-server:ngram-mod", "llama-server", "hf-prompt-lookup"])
    ['ffwd-off', 'ffwd-echo:deterministic', 'llama-server', 'hf-prompt-lookup']
    """
    groups: dict[tuple[str | bool | None, ...], list[str]] = {}
    for name in names:
        n = parse_system(name)
        key = (("ffwd", n.engine, n.kv, n.deterministic) if n.base in SERVED
               else (n.base.split("-")[0], n.flash, n.upstream))  # llama (per build, path), hf
        groups.setdefault(key, []).append(name)
    plain = {"ffwd-off", LLAMA_SERVER, "hf-generate"}
    return [next((n for n in group if n.partition(":")[0] in plain and parse_system(n).spec
                  is None), group[0]) for group in groups.values()]


def known_systems() -> str:
    """Every name --systems accepts, for help and errors."""
    return ", ".join((*ALL_SYSTEMS, *EXTRA_SYSTEMS))
