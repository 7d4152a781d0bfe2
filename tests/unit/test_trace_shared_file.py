"""Two processes recording to one trace file, as docs/operators.md allows, lose nothing
when it rotates (issue 12: each rotated by its own descriptor, renaming the other's
fresh file away, and 32 records of 400 were left)."""

import subprocess
import sys
import time

from pcisim import trace_report

RECORDS = 200
# NOTE: about 130 bytes a record: one rotation, and the file with its previous part
# still holds both writers' records, so any record missing was lost by a rotation.
MAX_BYTES = 40_000

WRITER = """
import sys, time

from pcisim import trace

path, name, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
recorder = trace.Recorder(path, name, max_bytes=int(sys.argv[4]))
time.sleep(max(0.0, start_at - time.time()))
for n in range(int(sys.argv[5])):
    recorder.write({"ts": time.time(), "request_id": f"req-{name}", "from": name,
                    "to": "conductor", "kind": "call", "method": f"{name}-{n:03d}",
                    "ms": 0.1, "outcome": "ok"})
    time.sleep(0.0005)
recorder.close()
"""


def _write_together(path, names):
    start_at = str(time.time() + 1.0)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, start_at, str(MAX_BYTES), str(RECORDS)]
        )
        for name in names
    ]
    for writer in writers:
        assert writer.wait(timeout=60) == 0


def test_two_processes_rotating_one_file_keep_every_record(tmp_path):
    path = tmp_path / "trace.jsonl"
    _write_together(path, ["writer-a", "writer-b"])

    assert (tmp_path / "trace.jsonl.1").exists()
    records, unreadable = trace_report.read(str(path))
    assert unreadable == 0
    expected = {f"{name}-{n:03d}" for name in ("writer-a", "writer-b") for n in range(RECORDS)}
    assert sorted(record["method"] for record in records) == sorted(expected)
