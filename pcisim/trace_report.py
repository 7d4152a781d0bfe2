"""Reading a trace back: flows, and a flow as text or as a Mermaid sequence diagram.

A flow is every record sharing one request id (see ``pcisim.trace``). The flow a user
most likely wants is the last one an HTTP request other than a GET began: the last
boot or delete, not the polling that waited for it, nor a periodic task.
"""

import json
import os
import re

from pcisim import exception

FIRST_PARTICIPANTS = ("client", "api", "conductor")


def read(path):
    """The records of ``path`` (and of ``path.1``, its previous part), oldest first,
    and how many lines could not be read (one cut short by a killed process)."""
    records, unreadable = [], 0
    parts = [part for part in (path + ".1", path) if os.path.exists(part)]
    if not parts:
        raise exception.TraceUnavailable(path=path, reason="no such file (start with --trace)")
    for part in parts:
        with open(part, encoding="utf-8") as lines:
            for line in lines:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    unreadable += 1
    records.sort(key=lambda record: record["ts"])
    return records, unreadable


def flows(records):
    """Request id -> that flow's records, in the order the flows began."""
    grouped = {}
    for record in records:
        grouped.setdefault(record["request_id"], []).append(record)
    return grouped


def pick(grouped, path, request_id=None):
    """The flow ``request_id`` (a unique prefix will do), else the last flow begun by an
    HTTP request other than a GET, else the last flow."""
    if request_id is not None:
        matches = [rid for rid in grouped if rid and rid.startswith(request_id)]
        if not matches:
            raise exception.FlowNotFound(request_id=request_id, path=path)
        if len(matches) > 1:
            shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
            raise exception.FlowAmbiguous(
                request_id=request_id, path=path, count=len(matches), matches=shown
            )
        return grouped[matches[0]]
    if not grouped:
        raise exception.TraceUnavailable(path=path, reason="nothing recorded yet")
    changing = [flow for flow in grouped.values() if _begun_by_a_change(flow)]
    return (changing or list(grouped.values()))[-1]


def _begun_by_a_change(flow):
    first = flow[0]
    return first["kind"] == "http" and not first["method"].startswith("GET ")


def summary(flow):
    """One line per flow for a listing: its id, what began it, size and span."""
    return {
        "request_id": flow[0]["request_id"],
        "began": _label(flow[0]),
        "by": flow[0]["from"],
        "messages": len(flow),
        "ms": round(_span_ms(flow), 1),
    }


def _span_ms(flow):
    start = flow[0]["ts"]
    return max((record["ts"] - start) * 1000 + record["ms"] for record in flow)


def _label(record):
    if record.get("object_method"):
        return f"{record['object']}.{record['object_method']}"
    if record.get("object"):
        return f"{record['method']} {record['object']}"
    return record["method"]


def _details(record):
    if record["kind"] == "http":
        return str(record.get("status", ""))
    details = [record["method"]] if record.get("object") else []
    if record.get("version"):
        details.append(f"rpc {record['version']}")
    if record.get("object_version"):
        details.append(f"{record['object']} {record['object_version']}")
    return ", ".join(details)


def text(flow):
    """The flow as lines: offset from its start, sender -> receiver, kind, what, time."""
    start = flow[0]["ts"]
    lines = [
        f"flow {flow[0]['request_id']}: {_label(flow[0])}, {len(flow)} messages, "
        f"{_span_ms(flow):.1f} ms"
    ]
    width = max(len(_label(record)) for record in flow)
    party = max(len(name) for record in flow for name in (record["from"], record["to"]))
    for record in flow:
        outcome = "" if record["outcome"] == "ok" else f"  !! {record['outcome']}"
        lines.append(
            f"{(record['ts'] - start) * 1000:9.1f} ms  {record['from']:>{party}} -> "
            f"{record['to']:<{party}}  {record['kind']:<4}  {_label(record):<{width}}  "
            f"{record['ms']:8.2f} ms  ({_details(record)}){outcome}"
        )
    return "\n".join(lines)


def mermaid(flow):
    """The flow as a Mermaid sequence diagram: a solid arrow per request, an open one
    per cast, a dashed one per reply (crossed when it carried an exception)."""
    names = _participants(flow)
    lines = ["sequenceDiagram"]
    lines += [
        f"    participant {ident}" + ("" if ident == name else f" as {name}")
        for name, ident in names.items()
    ]
    for _, _, line in sorted(_arrows(flow, names)):
        lines.append(f"    {line}")
    return "\n".join(lines)


def _participants(flow):
    seen = [name for name in FIRST_PARTICIPANTS if _appears(flow, name)]
    for record in flow:
        for name in (record["from"], record["to"]):
            if name not in seen:
                seen.append(name)
    return {name: re.sub(r"\W", "_", name) for name in seen}


def _appears(flow, name):
    return any(name in (record["from"], record["to"]) for record in flow)


def _arrows(flow, names):
    """(time, order, line) per arrow: a reply sorts at the time it came back."""
    for order, record in enumerate(flow):
        sender, receiver = names[record["from"]], names[record["to"]]
        send = "-)" if record["kind"] == "cast" else "->>"
        http = record["kind"] == "http"
        details = "" if http else _details(record)
        message = f"{_label(record)} ({details})" if details else _label(record)
        yield record["ts"], order, f"{sender}{send}{receiver}: {message}"
        if record["kind"] != "cast":
            back = "-->>" if record["outcome"] == "ok" else "--x"
            note = f"{record['status']}, " if http else _failure(record)
            came_back = record["ts"] + record["ms"] / 1000
            yield came_back, order, f"{receiver}{back}{sender}: {note}{record['ms']:.1f} ms"


def _failure(record):
    return "" if record["outcome"] == "ok" else f"{record['outcome']}, "
