"""A model's reasoning: the markup its template writes around it (`markup`) and the
parser that keeps it apart from content and tool calls (`parser`)."""

from ffwd.templates.reasoning.markup import (
    ReasoningMarkup,
    opens,
    reasoning_markup,
    thinking_variables,
)

__all__ = ["ReasoningMarkup", "opens", "reasoning_markup", "thinking_variables"]
