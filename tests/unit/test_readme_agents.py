"""README's agent blocks are what `make agents` runs (tools/agents.py reads them), so
they must stay runnable: each file parses in its format, everything points at `make
serve`'s address and names the served model as ``default``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from tools.agents import README_PORT, agent_blocks

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_agent_has_its_block_and_a_headless_turn() -> None:
    agents = {a.name: a for a in agent_blocks(README.read_text())}
    assert list(agents) == ["Claude Code", "opencode", "Codex CLI", "Continue"]
    for agent in agents.values():
        assert len(agent.scripts) == 1, agent.name  # the one headless turn
        text = "".join([*agent.files.values(), *agent.scripts])
        assert f"http://{README_PORT}" in text, agent.name
    claude = agents["Claude Code"].scripts[0]
    assert "ANTHROPIC_MODEL=default" in claude and "claude -p" in claude


def test_the_config_files_parse_and_name_the_served_model() -> None:
    agents = {a.name: a for a in agent_blocks(README.read_text())}
    opencode = json.loads(agents["opencode"].files["opencode.json"])
    provider = opencode["provider"]["ffwd"]
    assert opencode["model"] == "ffwd/default" and list(provider["models"]) == ["default"]
    codex = tomllib.loads(agents["Codex CLI"].files["~/.codex/config.toml"])
    assert codex["model"] == "default"
    assert codex["model_providers"][codex["model_provider"]]["wire_api"] == "responses"
    cont = yaml.safe_load(agents["Continue"].files["~/.continue/config.yaml"])
    assert cont["schema"] == "v1" and cont["models"][0]["model"] == "default"
