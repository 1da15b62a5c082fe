"""`make agents`: each agent CLI, set up as README says, runs one headless turn against a
local ``ffwd serve`` (issue 41).

    python -m tools.agents [--only "Claude Code,Codex CLI"] [--timeout 900]

1. npm installs the CLIs (`PACKAGES`) into ``.agents/npm`` (nothing global).
2. ``ffwd serve --model default`` starts on a free loopback port (``make serve``'s
   8000 may be taken), its log in ``.agents/serve.log``.
3. README's "With an agent" section is read (`agent_blocks`): each agent is a bold
   name and the fenced blocks after it. A block after a paragraph that names a file
   (`opencode.json`, ``~/.codex/config.toml``) is written there, a ``sh`` block is run
   with bash: in a scratch project holding `forecast.py` (``.agents/project``), with
   HOME a scratch home (``.agents/home``), PATH the npm prefix's first, stdin empty
   and nothing else from this environment. The one change to README's text is the
   server's port.
4. Each agent's output, exit status and seconds are printed, then the server's request
   lines of its turn. The next agent starts once the server has nothing running (an
   agent that gave up on a request may leave its run going). Exit status 0, whatever
   the agents did: it reports.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("@anthropic-ai/claude-code", "opencode-ai", "@openai/codex", "@continuedev/cli")
README_PORT = "127.0.0.1:8000"
FORECAST = '''def forecast(city: str) -> str:
    """Tomorrow's weather in `city`."""
    return f"Sunny in {city}, 21 C"
'''
AGENT = re.compile(r"^\*\*(?P<name>[^*]+)\*\*(?P<rest>.*)$")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
FILE = re.compile(r"`(?P<path>~?[\w./-]*\.(?:json|toml|ya?ml))`")


@dataclass
class Agent:
    """One agent's README blocks: files to write (path -> text) and scripts to run."""

    name: str
    files: dict[str, str] = field(default_factory=dict)
    scripts: list[str] = field(default_factory=list)


def agent_blocks(readme: str) -> list[Agent]:
    """The agents of README's "With an agent" section (see the module docstring).

    >>> text = ("## With an agent\\n\\n**Tool** (API), `~/.tool/config.toml`:\\n\\n"
    ...         "```toml\\nurl = 1\\n```\\n\\n```sh\\ntool run\\n```\\n\\n## Next\\n")
    >>> agent_blocks(text)
    [Agent(name='Tool', files={'~/.tool/config.toml': 'url = 1\\n'}, scripts=['tool run\\n'])]
    """
    section = re.split(r"^## With an agent.*$", readme, maxsplit=1, flags=re.MULTILINE)[1]
    section = section.split("\n## ", 1)[0]
    agents: list[Agent] = []
    at = 0
    for fence in FENCE.finditer(section):
        before = section[at:fence.start()]
        at = fence.end()
        for line in before.splitlines():
            if (m := AGENT.match(line)) is not None:
                agents.append(Agent(m["name"].strip()))
        if not agents:
            continue
        named = FILE.search(before)
        if fence["lang"] == "sh" and named is None:
            agents[-1].scripts.append(fence["body"])
        elif named is not None:
            agents[-1].files[named["path"]] = fence["body"]
    return agents


def install(prefix: Path) -> Path:
    """The CLIs from npm into `prefix`; their bin folder."""
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-fund", "--no-audit",
                    *PACKAGES], check=True)
    return prefix / "node_modules" / ".bin"


def run_agent(agent: Agent, port: int, scratch: Path, bin_dir: Path,
              timeout: float) -> tuple[int | None, float, str]:
    """Write the agent's files, run its scripts; (exit status or None on timeout,
    seconds, what it printed)."""
    home, project = scratch / "home", scratch / "project"
    for folder in (home, project):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    (project / "forecast.py").write_text(FORECAST)
    for name, text in agent.files.items():
        path = home / name[2:] if name.startswith("~/") else project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace(README_PORT, f"127.0.0.1:{port}"))
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "LANG": "C.UTF-8", "TERM": "dumb"}
    script = "\n".join(agent.scripts).replace(README_PORT, f"127.0.0.1:{port}")
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", script], cwd=project, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the agent and whatever it started
        out, _ = proc.communicate()
        status = None
    return status, time.monotonic() - started, out


def access_lines(log: Path, skip: int) -> tuple[list[str], int]:
    """The server's request lines after the first `skip` lines of its log; the count."""
    lines = log.read_text(errors="replace").splitlines()
    return [ln for ln in lines[skip:] if "ffwd.access:" in ln], len(lines)


def settle(url: str, timeout: float) -> float:
    """Wait until the server at `url` runs and queues nothing (at most `timeout` s); the
    seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        health = httpx.get(url + "/health", timeout=10).json()
        if not health["active"] and not health["queue_depth"]:
            break
        time.sleep(2)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated agent names (default: all)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per agent (900)")
    p.add_argument("--scratch", type=Path, default=ROOT / ".agents")
    args = p.parse_args(argv)
    agents = agent_blocks((ROOT / "README.md").read_text())
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    agents = [a for a in agents if not wanted or a.name in wanted]
    bin_dir = install(args.scratch / "npm")
    from ffwd.bench.systems.servers import ChildServer, free_port

    port = free_port()
    log = args.scratch / "serve.log"
    command = [sys.executable, "-m", "ffwd.cli", "serve", "--model", "default",
               "--host", "127.0.0.1", "--port", str(port)]
    with ChildServer("ffwd serve", command, port, log=log, startup_seconds=900) as server:
        for agent in agents:
            _, seen = access_lines(log, 0)
            status, seconds, out = run_agent(agent, port, args.scratch, bin_dir, args.timeout)
            said = "timed out" if status is None else f"exit {status}"
            print(f"\n===== {agent.name}: {said} after {seconds:.0f} s =====\n{out.rstrip()}")
            waited = settle(server.url, args.timeout)
            lines, _ = access_lines(log, seen)
            print(f"----- the server's request lines ({len(lines)}; its runs ended "
                  f"{waited:.0f} s after the agent did):")
            print("\n".join(ln.split("ffwd.access: ", 1)[1] for ln in lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
