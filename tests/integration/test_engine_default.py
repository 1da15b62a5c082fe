"""The decode loop on the embedded SmolLM2-135M-Instruct, on both engines.

llama.cpp runs the Q4_1 GGUF as it is (under --deterministic its batched and
one-at-a-time forwards agree exactly there); transformers runs the float32
copy. Includes a forced Hermes tool call: strict rows fire and the call parses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ffwd.bench import agreement
from ffwd.cli import main as ffwd_main
from ffwd.config import FillConfig
from ffwd.engine.core.decode import fixed_policy
from ffwd.engine.core.generate import generate
from ffwd.engine.llama.context import LlamaContext
from ffwd.engine.sample.text import ToolCalls
from ffwd.fill import FillPlan, read_trace
from ffwd.models import check_vocab, load_backend, load_tokenizer
from ffwd.templates.choose import encode_prompt, resolve_template
from ffwd.templates.render import render_chat
from ffwd.templates.rows import compile_tools, default_eos_ids

pytestmark = pytest.mark.slow

QUOTE = (
    "Copy this list exactly, then write it once more: "
    "alpha-7, beta-12, gamma-31, delta-44, epsilon-58, zeta-63, eta-77, theta-81."
)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        }, "required": ["city"]},
    }},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    }},
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer("default")


@pytest.fixture(scope="module", params=["llamacpp", "transformers"])
def backend(request: pytest.FixtureRequest, tokenizer: Any) -> Any:
    return load_backend("default", backend=request.param, dtype="float32", tokenizer=tokenizer,
                        deterministic=True)


def test_the_default_model_runs_on_llama_cpp(tokenizer: Any) -> None:
    b = load_backend("default", tokenizer=tokenizer)  # auto, CPU: the vocabulary check passed
    assert isinstance(b.context, LlamaContext) and b.vocab_size == len(tokenizer)
    assert set(default_eos_ids(tokenizer)) <= b.eos_ids
    with pytest.raises(ValueError, match="not the same vocabulary"):
        check_vocab(b, load_tokenizer("gemma3"), "default")


def test_deterministic_gives_the_same_logits_however_ids_are_batched(tokenizer: Any) -> None:
    # --deterministic on the default engine and threads: one-id forwards, 16-id forwards,
    # and cold and warm prefills give bit-identical logits, past the 256 ids where an f16
    # cache splits a one-id forward's attention over the threads.
    backend = load_backend("default", tokenizer=tokenizer, deterministic=True)
    assert backend.attention.exact(backend.invariant)  # whichever exact path measured fastest
    prompt = encode_prompt(tokenizer, agreement.PROMPTS[0])
    result = agreement.measure(backend, [prompt], tokens=320, span=16)
    assert result["from"]["positions"] > 64
    for part in ("below", "from", "prefill"):
        assert (result[part]["flips"], result[part]["max_abs_diff"]) == (0, 0.0), part


def test_the_default_is_exact_where_its_path_is(tokenizer: Any) -> None:
    # The default runs the attention path measured fastest here. With the shape-invariant
    # kernel (patches/llama.cpp) every flash path is exact: batched and one-id forwards,
    # cold and warm prefills give the same logits bit for bit. The plain path (or flash on
    # an f16 cache without the kernel) rounds them apart, so greedy choices agree almost
    # everywhere but not at near-ties (docs/attention.md states the measured rates).
    backend = load_backend("default", tokenizer=tokenizer)
    assert backend.attention_table is not None
    assert backend.attention.name == backend.attention_table.chosen
    prompt = encode_prompt(tokenizer, agreement.PROMPTS[0])
    result = agreement.measure(backend, [prompt], tokens=320, span=16)
    positions = sum(result[p]["positions"] for p in ("below", "from"))
    flips = sum(result[p]["flips"] for p in ("below", "from", "prefill"))
    worst = max(result[p]["max_abs_diff"] for p in ("below", "from", "prefill"))
    assert positions >= 300
    if backend.attention.exact(backend.invariant):
        assert (flips, worst) == (0, 0.0)
    else:
        assert flips <= 0.05 * positions and worst < 2.5


def test_greedy_echo_is_identical_to_off(backend: Any, tokenizer: Any) -> None:
    ids = encode_prompt(tokenizer, QUOTE)
    off = generate(backend, tokenizer, ids, max_tokens=64)
    # Every proposal verified (probe first), whatever the machine's measured cost curve
    # would decline, so that the accepted spans are really there to compare.
    echo = generate(
        backend, tokenizer, ids, max_tokens=64, plan=FillPlan(),
        fill=FillConfig(mode="echo", trace=True), policy=fixed_policy(True),
    )
    assert echo.token_ids == off.token_ids and echo.text == off.text
    assert echo.stats.verify_accepted > 0
    # Prefill of the repeated prompt reuses all but its last id.
    assert echo.cached_tokens == len(ids) - 1
    assert echo.forward_calls < off.forward_calls


def test_stop_string_on_the_real_tokenizer(backend: Any, tokenizer: Any) -> None:
    ids = encode_prompt(tokenizer, QUOTE)
    full = generate(backend, tokenizer, ids, max_tokens=40)
    stop = full.text[30:36]  # a few characters mid-output, across token boundaries
    for fill in ("off", "echo"):
        res = generate(
            backend, tokenizer, ids, max_tokens=40, stop=[stop], plan=FillPlan(),
            fill=FillConfig(mode=fill),  # type: ignore[arg-type]
        )
        assert res.finish_reason == "stop"
        assert res.text == full.text[: full.text.index(stop)]


def test_ffwd_generate_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = ffwd_main([
        "generate", "--model", "default", "--prompt", "Say hello.", "--max-tokens", "12",
        "--fill", "echo", "--json",
    ])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("text", "token_ids", "finish_reason", "stats", "forward_calls", "seconds"):
        assert key in out
    assert out["finish_reason"] in ("stop", "length") and out["token_ids"]
    assert out["stats"]["decode_steps"] >= 1


def test_ffwd_generate_writes_its_trace(tmp_path: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # --trace FILE writes the fill trace (fill defaults to the server's echo: plain
    # decoding proposes nothing to trace); with --fill off it is a clear error, no file.
    path = tmp_path / "t.jsonl"
    rc = ffwd_main(["generate", "--prompt", QUOTE, "--max-tokens", "40", "--trace", str(path)])
    assert rc == 0 and path.exists()
    records = read_trace(path)
    assert records and all(r["origin"] == "echo" and r["proposed"] for r in records)
    off = tmp_path / "off.jsonl"
    rc = ffwd_main(["generate", "--prompt", QUOTE, "--fill", "off", "--trace", str(off)])
    assert rc == 2 and "fill is off" in capsys.readouterr().err and not off.exists()


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_forced_hermes_call_with_strict_rows_parses(
    tool_choice: Any, tmp_path: Any, tokenizer: Any, backend: Any
) -> None:
    resolved = resolve_template(tokenizer, "hermes")
    template, fmt = resolved.template, resolved.format_name
    assert fmt == "hermes"
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    text = render_chat(template, messages, tools=TOOLS, add_generation_prompt=True,
                       tokenizer=tokenizer)
    ids = tokenizer.encode(text, add_special_tokens=False)
    compiled = compile_tools(tokenizer, template, TOOLS, tool_choice, default_eos_ids(tokenizer))
    trace = tmp_path / "trace.jsonl"
    res = generate(
        backend, tokenizer, ids, max_tokens=36, plan=compiled.plan,
        fill=FillConfig(mode="strict", trace=str(trace)),
        calls=ToolCalls(compiled.format, TOOLS, compiled.rules),
    )
    assert res.calls, res.text
    call = res.calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments).get("city") == "Paris"
    assert res.text.startswith("<tool_call>")
    assert res.stats.strict > 0 and res.origins[0] == "template"
    assert trace.exists()
