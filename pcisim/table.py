"""Tables as pcisim's commands print them: prettytable, left-aligned, None as empty."""

import prettytable


def render(header, rows):
    """``rows`` (sequences of cells) under ``header`` as text; a None cell is empty."""
    table = prettytable.PrettyTable(header)
    table.align = "l"
    for row in rows:
        table.add_row(["" if cell is None else cell for cell in row])
    return table.get_string()
