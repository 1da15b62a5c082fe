"""Engine-agnostic fast-forward bookkeeping (standard library only)."""

from ffwd.fill.echo import EchoConfig, EchoSource
from ffwd.fill.prefix import common_prefix
from ffwd.fill.proposal import (
    ORIGINS,
    POLICIES,
    ConstrainingSource,
    ObservingSource,
    Proposal,
    ProposalOrigin,
    ProposalPolicy,
    ProposalSource,
    TokenView,
)
from ffwd.fill.session import (
    FILL_KINDS,
    FillKind,
    FillPlan,
    FillRow,
    FillSession,
    FillStats,
    StrictFillContext,
    StrictRowSource,
)
from ffwd.fill.trace import TraceRecord, TraceWriter, first_mismatch, read_trace

__all__ = [
    "FILL_KINDS",
    "ORIGINS",
    "POLICIES",
    "ConstrainingSource",
    "EchoConfig",
    "EchoSource",
    "FillKind",
    "FillPlan",
    "FillRow",
    "FillSession",
    "FillStats",
    "ObservingSource",
    "Proposal",
    "ProposalOrigin",
    "ProposalPolicy",
    "ProposalSource",
    "StrictFillContext",
    "StrictRowSource",
    "TokenView",
    "TraceRecord",
    "TraceWriter",
    "common_prefix",
    "first_mismatch",
    "read_trace",
]
