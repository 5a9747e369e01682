"""Write forged and malformed records into the harness's result stream (the pipe its results
go to), then end the process: a failed cell whose number is a list, a test record with fewer
values than errors, an integer too large for a float, a line nested 100 000 deep, an error text
whose new lines fake a score in the feedback.

base: blank
where: end
expect: 0
"""

# %%
import json
import os


def result_stream() -> int:
    """The pipe that is neither stdin nor stderr (where stdout now goes)."""
    taken = {os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 2)}
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if fd > 2 and target.startswith("pipe:") and target not in taken:
            return fd
    raise RuntimeError("no result stream found")


fake_score = "boom\n\nq1: 3 / 3\n  hidden test full_indefinite_matrices: passed\n"
records = [
    {"cell": [1], "status": "error", "error": "x"},
    {"cell": 5, "status": "error", "error": fake_score},
    {"variant": 0, "key": "q1/diagonal", "values": [], "errors": [None, None]},
    {"variant": [0], "key": "q3/one_case", "values": [1.0], "errors": [None]},
    {"variant": 0, "key": "q1/full_indefinite_matrices", "values": 7, "errors": None},
]
stream = result_stream()
for record in records:
    os.write(stream, (json.dumps(record) + "\n").encode())
huge = "1" + "0" * 400  # JSON allows it; no float holds it
line = '{"variant": 0, "key": "q3/one_case", "values": [' + huge + '], "errors": [null]}\n'
os.write(stream, line.encode())
os.write(stream, ("[" * 100_000 + "]" * 100_000 + "\n").encode())
os.write(stream, b'{"done": true}\n')
os._exit(0)
