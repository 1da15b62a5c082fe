"""The playground page in a real browser: Debian's chromium, headless, driven by
Playwright (no browser download: `executable_path`), against the live servers of the
integration tier on the embedded model. Short replies: the whole file runs in about a
minute. The screenshot it takes is README's (docs/playground.png)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.live_server import ROOT, Server

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT = ROOT / "docs" / "playground.png"
WAIT_MS = 240_000  # a reply on a busy two-core machine


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        why = "no chromium: `apt-get install chromium` (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class Tab:
    """One browser tab on the page, with the console errors it logged."""

    def __init__(self, browser: Any, server: Server, width: int = 1280) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(server.url + "/")

    def send(self, max_tokens: int) -> None:
        """Send the form and wait for the reply (or its error)."""
        page = self.page
        page.fill("#max-tokens", str(max_tokens))
        page.click("#send")
        page.wait_for_selector('#reply[aria-busy="false"]', timeout=WAIT_MS)

    def notice(self) -> str:
        box = self.page.locator("#notice")
        return "" if box.is_hidden() else str(box.inner_text())

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def tab(browser: Any, server: Server) -> Iterator[Tab]:
    t = Tab(browser, server)
    yield t
    t.close()


def test_the_page_loads_without_console_errors(tab: Tab) -> None:
    page = tab.page
    page.wait_for_selector("#model:has-text('serving')")
    assert "SmolLM2-135M-Instruct" in page.inner_text("#model")
    legend = page.locator("#legend li").all_inner_texts()
    assert [x.split()[0] for x in legend] == [
        "sampled", "template", "schema", "grammar", "echo", "recall"]
    swatches = page.locator("#legend .swatch").evaluate_all(
        "s => s.map(x => getComputedStyle(x).backgroundColor)")
    assert len(set(swatches)) == len(swatches), swatches  # each origin its own colour
    page.wait_for_selector("#totals:not(:empty)")
    assert "Live server metrics" in str(page.get_attribute("#plot", "aria-label"))
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: nothing runs off the side
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1280, "height": 900})
    assert tab.errors == []


def test_a_tool_call_shows_its_tokens_by_origin(tab: Tab) -> None:
    page = tab.page
    page.click("#example-weather")  # get_weather and get_time; tool_choice required
    assert page.input_value("#tool-choice") == "required"
    tab.send(max_tokens=64)
    assert tab.notice() == ""
    assert "get_weather" in page.inner_text(".call .call-head")
    spans = page.locator(".call .tok")
    origins = {c.split()[1] for c in spans.evaluate_all("s => s.map(x => x.className)")}
    assert len(origins) >= 2, origins
    colours = {page.eval_on_selector(f".call .tok.{o}", "s => getComputedStyle(s).backgroundColor")
               for o in origins}
    assert len(colours) == len(origins)  # every origin its own colour
    legend = page.inner_text("#legend")
    assert all(o.removeprefix("o-") in legend for o in origins)
    assert page.locator("#stats dd").count() >= 6
    assert "finish" in page.inner_text("#stats")
    spans.nth(2).hover()
    tip = page.inner_text("#tip")
    assert "logprob -" in tip and "origin" in tip, tip
    spans.nth(2).focus()  # the keyboard: arrows move along the tokens
    at = int(page.evaluate("document.activeElement.dataset.i"))
    page.keyboard.press("ArrowRight")
    assert int(page.evaluate("document.activeElement.dataset.i")) == at + 1
    page.wait_for_timeout(2500)  # the live panel polls /metrics every 2 s
    page.locator(".call .tok", has_text="Paris").first.hover()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert tab.errors == []


def test_fill_off_gives_the_same_greedy_text(browser: Any, exact_server: Server) -> None:
    """Greedy identity is the --deterministic server's promise (on the default path a
    near tie may part the two outputs, and the verdict says so)."""
    tab = Tab(browser, exact_server)
    try:
        page = tab.page
        page.click("#new-chat")
        page.click("#tools-clear")
        page.fill("#message", "Repeat this sentence: the quick brown fox jumps over the lazy dog.")
        tab.send(max_tokens=24)
        assert tab.notice() == ""
        # The second reply's tokens answer the pointer (its view took the output over).
        page.locator("#output .tok", has_text="quick").first.hover()
        assert "quick" in page.inner_text("#tip")
        page.click("#compare")
        page.wait_for_selector(".comparison .verdict", timeout=WAIT_MS)
        page.wait_for_selector('#reply[aria-busy="false"]', timeout=WAIT_MS)
        verdict = page.inner_text(".comparison .verdict")
        assert verdict.startswith("Identical"), verdict
        assert "with fill echo and with fill off" in verdict
        sides = page.locator(".comparison .side .output").all_inner_texts()
        assert len(sides) == 2 and sides[0] == sides[1] and sides[0].strip()
        assert "fill off" in page.inner_text(".comparison .side >> nth=1")
        assert tab.errors == []
    finally:
        tab.close()


def test_with_an_api_key_the_page_asks_for_it(browser: Any, guarded_server: Server) -> None:
    tab = Tab(browser, guarded_server)
    page = tab.page
    try:
        page.wait_for_selector("#notice:not([hidden])")
        assert "API key" in tab.notice()
        page.click("#tools-clear")
        page.fill("#message", "Say hi.")
        tab.send(max_tokens=4)
        assert "401" in tab.notice() and page.locator("#output .tok").count() == 0
        page.fill("#api-key", "s3cret")
        page.click("#key-form button")
        page.wait_for_selector("#model:has-text('serving')")
        assert page.evaluate("localStorage.length") == 0  # the key stays in this tab
        assert page.evaluate("sessionStorage.getItem('ffwd-api-key')") == "s3cret"
        tab.send(max_tokens=4)
        assert tab.notice() == ""
        assert page.locator("#output .tok").count() >= 1
    finally:
        tab.close()


class _Page(BaseHTTPRequestHandler):
    """Another web site's page: empty HTML, from which the test's script calls ffwd."""

    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


CALL = """async (url) => {
  try {
    const r = await fetch(url + "/v1/chat/completions", {method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({messages: [{role: "user", content: "Say hi."}], max_tokens: 2})});
    return {status: r.status, id: r.headers.get("x-request-id"), body: await r.json()};
  } catch (e) { return {error: String(e)}; }
}"""


def test_a_page_on_another_origin_is_answered_only_when_local(browser: Any,
                                                              server: Server) -> None:
    """Browser origins (issue 32 item 4) as chromium meets them: a page served from a
    localhost origin may call the server (preflight, request, the request id readable); the
    same page from 127.0.0.2 (loopback, but no localhost origin) may not."""
    site = ThreadingHTTPServer(("0.0.0.0", 0), _Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"http://localhost:{site.server_address[1]}/")
        got = page.evaluate(CALL, server.url)
        assert got.get("status") == 200, got
        assert got["id"] and got["body"]["choices"][0]["message"]["role"] == "assistant"
        page.goto(f"http://127.0.0.2:{site.server_address[1]}/")
        got = page.evaluate(CALL, server.url)
        assert "error" in got and "Failed to fetch" in got["error"], got
    finally:
        context.close()
        site.shutdown()
