"""Held-out copy and repeat prompts for issue 40's targets (`tools.heldout`).

Written for this check, not drawn from `ffwd bench`'s workloads (no standard-library
source, no BFCL entry): a new user's copy prompts (quote a function, ask for it again
with a change) and requests sent again unchanged (an agent that retries, a user who
asks twice).
"""

from __future__ import annotations

READ_RECORDS = '''def read_records(stream, delimiter=",", skip_blank=True):
    """Yield one dict per record of a small delimited text format.

    The first non-comment line names the fields; later lines hold values.
    A line that ends with a backslash continues on the next one.
    """
    header = None
    pending = ""
    for number, raw in enumerate(stream, start=1):
        line = raw.rstrip("\\n")
        if line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        if not line.strip():
            if not skip_blank:
                yield {"line": number, "blank": True}
            continue
        if line.lstrip().startswith("#"):
            continue
        cells = [cell.strip() for cell in line.split(delimiter)]
        if header is None:
            header = cells
            yield {"line": number, "header": tuple(header)}
            continue
        if len(cells) != len(header):
            yield {"line": number, "error": f"expected {len(header)} cells, got {len(cells)}"}
            continue
        record = dict(zip(header, cells))
        record["line"] = number
        yield record
    if pending:
        yield {"line": number, "error": "the last line ends with a continuation"}
'''

INVOICE = '''def invoice_lines(order, prices, tax_rate=0.2, currency="EUR"):
    """Return the printable lines of an invoice for `order` (item -> quantity)."""
    lines = [f"Invoice for {len(order)} items", "-" * 32]
    subtotal = 0.0
    for item, quantity in sorted(order.items()):
        if item not in prices:
            lines.append(f"{item}: no price, skipped")
            continue
        if quantity <= 0:
            lines.append(f"{item}: quantity {quantity}, skipped")
            continue
        amount = prices[item] * quantity
        subtotal += amount
        lines.append(f"{item:<16} {quantity:>4} x {prices[item]:>8.2f} = {amount:>9.2f}")
    tax = round(subtotal * tax_rate, 2)
    total = subtotal + tax
    lines.append("-" * 32)
    lines.append(f"{'subtotal':<16} {subtotal:>24.2f} {currency}")
    lines.append(f"{'tax':<16} {tax:>24.2f} {currency}")
    lines.append(f"{'total':<16} {total:>24.2f} {currency}")
    return lines
'''


def _quote(source: str, ask: str) -> str:
    return f"```python\n{source}```\n\n{ask}"


# (name, user message): each sent twice; the second send is the target's.
COPY = (
    ("copy-yield", _quote(READ_RECORDS, "Write this function again, with a short comment "
                                        "above each yield.")),
    ("copy-hints", _quote(INVOICE, "Add type hints to this function and write it out "
                                   "in full.")),
    ("copy-usd", _quote(INVOICE, "Change the default currency to USD and write out the "
                                 "whole function.")),
)

# (name, user message): each sent three times; the third send is the target's.
REPEAT = (
    ("repeat-explain", _quote(INVOICE, "Explain what this function does, step by step.")),
    ("repeat-edit", _quote(READ_RECORDS, "Make `delimiter` a keyword-only argument and "
                                         "write out the whole function.")),
)
