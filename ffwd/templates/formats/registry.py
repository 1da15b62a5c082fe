"""The registry: every tool-call format, one line each, in the order `recognize` tries them."""

from __future__ import annotations

from ffwd.templates.formats import (
    deepseek,
    dsml,
    functionary,
    gemma4,
    glm,
    harmony,
    hermes,
    hunyuan,
    json_lists,
    kimi,
    llama3_json,
    minimax,
    mistral,
    mistral_v11,
    qwen_xml,
    seed_oss,
)
from ffwd.templates.formats.base import ToolFormat

FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    hermes.FORMAT,
    qwen_xml.FORMAT,
    llama3_json.FORMAT,
    mistral.FORMAT,
    harmony.FORMAT,
    mistral_v11.FORMAT,
    mistral_v11.WITH_IDS,
    glm.FORMAT,
    gemma4.FORMAT,
    hunyuan.FORMAT,
    seed_oss.FORMAT,
    dsml.FORMAT,
    dsml.V4,
    deepseek.V31,
    deepseek.R1,
    kimi.K2,
    kimi.K3,
    minimax.M2,
    minimax.M3,
    minimax.MINICPM5,
    functionary.FUNCTIONARY,
    functionary.SOLAR,
    json_lists.APRIEL,
    json_lists.NEMOTRON,
    json_lists.GRANITE,
    json_lists.COMMAND_R,
    json_lists.MINIMAX_M1,
    json_lists.GIGACHAT,
)}


def as_format(fmt: ToolFormat | str) -> ToolFormat:
    """A format, or the registered format of that name."""
    return fmt if isinstance(fmt, ToolFormat) else get_format(fmt)


def get_format(name: str) -> ToolFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"tool-call format {name!r}: expected one of {', '.join(FORMATS)}"
        ) from None
