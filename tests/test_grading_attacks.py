"""The attacks of the grading red team (ssm-basics and poisoning-theorem), each a test that it
scores what its honest work earns; each attack that still worked is named by its number there.

- shortcuts a forbid list did not name (n06: ``lib.ssm.diagonal._response``,
``square_loss_gradient``;
  n07: ``lib.ssm.extrapolation_protocols.impulse_responses``, a fresh
  ``torch._C._ImperativeEngine``)
- defeating the in-process swap (n02: hidden inputs read from the harness's frames and answered
  early; n03: the forbidden code kept aside; n04: the swap switched off through the harness's
  globals; n05b: a second record written after "done" from an exit handler)
- a lone surrogate as the student id stopping the folder (n31), a newline in the metadata forging
  a terminal line (n19), a file name faking a score with a look-alike of "/" (n20g), one huge
  result record (n35), a notebook that answers and then never ends (n34)
- the system calls the sandbox refuses (vsock, io_uring, keyctl, ptrace)
- the second red team's: scipy's complex-step derivative where differentiation packages are
  absent (r2_scipy_complex_step), and two notebooks graded at once passing torch's answers
  through file locks to the sandbox without torch (r2_lock_client, r2_lock_server; more in
  tests/test_grading_collusion.py)

The questions whose hidden tests forbid a shortcut now run those tests in a sandbox of their own
where ``lib`` (and for automatic differentiation ``torch``) is absent, so each shortcut attack
loses exactly that question. Two folders, graded two at a time; on a loaded 2-core machine about
three minutes (the time limits below are generous for that reason: they bound a hang, and no
honest notebook comes near them).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import nbformat
import pytest
from grading_support import grade, grading, run_python, sandbox, solution, student_bundle

pytestmark = pytest.mark.not_numerics
SECRET = "attack-test-secret"

# Cell code shared by the attacks on the harness.
FIND_JOB = """
import sys
def _harness_frame():
    frame = sys._getframe()
    while frame is not None:
        if "job" in frame.f_locals and "emit" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None
"""
RESULT_FD = """
import os
def _result_fd():
    taken = {os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 2)}
    for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if fd > 2 and target.startswith("pipe:") and target not in taken:
            return fd
"""

SSM_ATTACKS = {
    "n06_unlisted_helper": """
from lib.ssm.diagonal import _response
def step_response(a, b, c, length):
    return _response(a, b, c, length).cumsum(-1)
""",
    "n07_other_public_form": """
import torch
from lib.ssm.extrapolation_protocols import impulse_responses
def step_response(a, b, c, length):
    params = {"A": torch.diag(a)[None], "B": b[None], "C": c[None]}
    return impulse_responses("general", params, length)[0].cumsum(-1)
""",
    "n02_answers_read_early": FIND_JOB
    + """
import json
import torch
from lib.ssm.diagonal import impulse_response
_cache = {}
_frame = _harness_frame()
if _frame is not None:
    decode = _frame.f_globals["decode"]
    for variant in _frame.f_locals["job"]["variants"]:
        for test in variant["tests"]:
            for probe in test["probes"]:
                if probe.get("call") == "step_response":
                    args = decode(probe["args"])
                    try:
                        _cache[json.dumps(probe["args"])] = impulse_response(*args).cumsum(-1)
                    except Exception:
                        pass
def step_response(a, b, c, length):
    key = [x.tolist() if hasattr(x, "tolist") else x for x in (a, b, c)]
    for stored, answer in _cache.items():
        if json.loads(stored)[3] == length:
            return answer
    return impulse_response(a, b, c, length).cumsum(-1)
""",
    "n03_code_kept_aside": """
import types
from lib.ssm.diagonal import impulse_response
try:
    _kept = types.FunctionType(impulse_response.__code__, impulse_response.__globals__)
except AttributeError:
    _kept = impulse_response
def step_response(a, b, c, length):
    return _kept(a, b, c, length).cumsum(-1)
""",
    "n04_switch_off": FIND_JOB
    + """
from lib.ssm.diagonal import impulse_response
_frame = _harness_frame()
if _frame is not None:
    for name, thing in list(_frame.f_globals.items()):
        if isinstance(thing, type) and hasattr(thing, "__enter__"):
            thing.__enter__ = lambda self: self
            thing.__exit__ = lambda self, *exc: None
def step_response(a, b, c, length):
    return impulse_response(a, b, c, length).cumsum(-1)
""",
    "n05b_record_after_done": RESULT_FD
    + FIND_JOB
    + """
import atexit, json, os
from lib.ssm.diagonal import impulse_response
_fd = os.dup(_result_fd())
_frame = _harness_frame()
_job = _frame.f_locals["job"] if _frame else {"variants": []}
_decode = _frame.f_globals["decode"] if _frame else None
def _forge():  # at exit, with the library's function back: the right answers, recomputed
    for variant in _job["variants"]:
        for test in variant["tests"]:
            values = [impulse_response(*_decode(p["args"])).cumsum(-1).tolist()
                      for p in test["probes"]]
            record = {"variant": 0, "key": test["key"], "values": values,
                      "errors": [None] * len(values)}
            os.write(_fd, (json.dumps(record) + "\\n").encode())
atexit.register(_forge)
def step_response(a, b, c, length):
    return impulse_response(a, b, c, length).cumsum(-1)
""",
}
PT_ATTACKS = {
    "n06_square_loss_gradient": """
import torch
from lib.ssm.diagonal import square_loss_gradient, unit_impulse
def poisoned_velocity(a, kappa, p):
    a = torch.as_tensor(a, dtype=torch.float64)
    x = torch.cat([unit_impulse(kappa, 1).reshape(1, -1), unit_impulse(kappa, p).reshape(1, -1)])
    one = torch.ones_like(a)
    gradient = square_loss_gradient(x, torch.ones(2, dtype=torch.float64))
    return (-gradient({"a": a, "b": one, "c": one})[1]["a"]).numpy()
""",
    "n07_fresh_engine": """
import torch
def poisoned_velocity(a, kappa, p):
    leaf = torch.as_tensor(a, dtype=torch.float64).clone().requires_grad_(True)
    loss = 0.5 * ((1 - (leaf ** (kappa - 1)).sum()) ** 2 + (1 - (leaf ** (kappa - p)).sum()) ** 2)
    (g,) = torch._C._ImperativeEngine().run_backward(
        (loss,), (torch.ones_like(loss),), False, False, (leaf,), False, False)
    return (-g).numpy()
""",
    "n03_engine_kept_aside": """
import torch
from torch.autograd.variable import Variable
_engine = Variable._execution_engine
def poisoned_velocity(a, kappa, p):
    leaf = torch.as_tensor(a, dtype=torch.float64).clone().requires_grad_(True)
    loss = 0.5 * ((1 - (leaf ** (kappa - 1)).sum()) ** 2 + (1 - (leaf ** (kappa - p)).sum()) ** 2)
    (g,) = _engine.run_backward(
        (loss,), (torch.ones_like(loss),), False, False, (leaf,), False, False)
    return (-g).numpy()
""",
    # Red team 2, a1b: the loss only, differentiated by scipy's complex step (exact to rounding)
    "r2_scipy_complex_step": """
import numpy as np
from scipy.optimize._numdiff import approx_derivative
def poisoned_velocity(a, kappa, p):
    def loss(x):
        return 0.5 * ((1 - (x ** (kappa - 1)).sum()) ** 2 + (1 - (x ** (kappa - p)).sum()) ** 2)
    return -approx_derivative(loss, np.asarray(a, dtype=float), method="cs")
""",
}
# Red team 2, pt5: two notebooks graded at once talking through byte-range read locks on a file
# both sandboxes see read-only. The client, in the sandbox without torch, sends each hidden
# input as lock bits; the server, in its run with torch, differentiates and sends the answer.
LOCK_CHANNEL = """
import fcntl, json, os, struct, time
import numpy as np
def _lock(kind, offset):
    return struct.pack("hhqqi4x", kind, 0, offset, 1, 0)
class Channel:
    def __init__(self):
        self.fd = os.open("/usr/bin/env", os.O_RDONLY)
        self.probe = os.open("/usr/bin/env", os.O_RDONLY)
    def set(self, offset):
        fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, _lock(fcntl.F_RDLCK, offset))
    def get(self, offset):
        held = fcntl.fcntl(self.probe, fcntl.F_OFD_GETLK, _lock(fcntl.F_WRLCK, offset))
        return struct.unpack("hhqqi4x", held)[0] != fcntl.F_UNLCK
    def send(self, base, data):
        data = len(data).to_bytes(4, "big") + data
        for i, byte in enumerate(data):
            for bit in range(8):
                if byte >> bit & 1:
                    self.set(base + 1 + 8 * i + bit)
        self.set(base)
    def receive(self, base, seconds):
        end = time.time() + seconds
        while not self.get(base):
            if time.time() > end:
                return None
            time.sleep(0.002)
        def read(first, n):
            return bytes(sum(self.get(base + 1 + 8 * i + b) << b for b in range(8))
                         for i in range(first, first + n))
        return read(4, int.from_bytes(read(0, 4), "big"))
try:
    import torch
    _has_torch = "absent" not in repr(torch.zeros)
except Exception:
    _has_torch = False
def _autograd(a, kappa, p):
    x = torch.tensor(np.asarray(a, dtype=float), dtype=torch.float64, requires_grad=True)
    loss = 0.5 * ((1 - (x ** (kappa - 1)).sum()) ** 2 + (1 - (x ** (kappa - p)).sum()) ** 2)
    loss.backward()
    return (-x.grad).numpy()
"""
LOCK_SERVER = (
    LOCK_CHANNEL
    + """
poisoned_velocity = _autograd
if _has_torch:  # serve for 30 s (the client's run without torch would overlap)
    _channel, _k, _end = Channel(), 0, time.time() + 30
    while time.time() < _end:
        asked = _channel.receive(10**9 + _k * 10**6, 0.5)
        if asked is not None:
            answer = _autograd(*json.loads(asked)).tolist()
            _channel.send(2 * 10**9 + _k * 10**6, json.dumps(answer).encode())
            _k += 1
"""
)
LOCK_CLIENT = (
    LOCK_CHANNEL
    + """
_channel, _asked = None, [0]
def poisoned_velocity(a, kappa, p):
    global _channel
    if _has_torch:
        return _autograd(a, kappa, p)
    _channel = _channel or Channel()
    k = _asked[0]
    _asked[0] += 1
    _channel.send(10**9 + k * 10**6, json.dumps([np.asarray(a).tolist(), kappa, p]).encode())
    answer = _channel.receive(2 * 10**9 + k * 10**6, 10)
    return np.zeros_like(a) if answer is None else np.array(json.loads(answer))
"""
)


def _replace_answer(nb, function: str, code: str):
    (index,) = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and f"def {function}(" in c.source
    ]
    nb.cells[index].source = textwrap.dedent(code).strip() + "\n"
    return nb


def _with_cell(nb, code: str, where: int | None = None):
    cell = nbformat.v4.new_code_cell(textwrap.dedent(code).strip() + "\n")
    nb.cells.insert(len(nb.cells) if where is None else where, cell)
    return nb


def _grade(folder: Path):
    settings = grading.Settings(timeout=120, cell_timeout=60, jobs=2, secret=SECRET)
    return grade(folder, settings)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return student_bundle(tmp_path_factory)


def _attack_folder(folder: Path, bundle: Path, name: str, function: str, attacks: dict) -> Path:
    """The solution as ``a_solution.ipynb`` and, for each attack, the solution with the answer
    cell that defines ``function`` replaced by the attack's code."""
    nbformat.write(solution(bundle, name), folder / "a_solution.ipynb")
    for attack, code in attacks.items():
        nb = _replace_answer(solution(bundle, name), function, code)
        nbformat.write(nb, folder / f"{attack}.ipynb")
    return folder


@pytest.fixture(scope="module")
def ssm(bundle, tmp_path_factory):
    name = "ssm-basics"
    folder = tmp_path_factory.mktemp("ssm-attacks")
    _attack_folder(folder, bundle, name, "step_response", SSM_ATTACKS)
    # n31: a lone surrogate as the student id (valid JSON, not encodable text)
    data = json.loads((bundle / "autograder" / f"{name}.ipynb").read_text(encoding="utf-8"))
    data["metadata"]["course"] = {"assignment": name, "student": "\ud800"}
    (folder / "n31_surrogate_id.ipynb").write_text(json.dumps(data), encoding="utf-8")
    # n19: a newline and a fake score line in the metadata's assignment name
    data["metadata"]["course"] = {
        "assignment": f"{name}-v2)\n[7/60] n19_forged_line.ipynb: 10 / 10 (graded, 9 s"
    }
    (folder / "n19_metadata_newline.ipynb").write_text(json.dumps(data), encoding="utf-8")
    # n20g: a file name that fakes a score with U+2215 (a look-alike of "/"), then spaces
    fake = "n20g_mallory: 10 \u2215 10 (graded, 11 s)" + " " * 140 + ".ipynb"
    nbformat.write(solution(bundle, name), folder / fake)
    # n34: full answers, then a thread that never ends
    nb = _with_cell(
        solution(bundle, name),
        "import threading, time\n"
        "threading.Thread(target=lambda: [time.sleep(1) for _ in iter(int, 1)]).start()",
    )
    nbformat.write(nb, folder / "n34_answers_then_hangs.ipynb")
    # n35: one huge well-formed record on the result stream (4 million floats), then honest work
    huge = (
        RESULT_FD
        + """
import json, os
_fd = _result_fd()
record = {"variant": 0, "key": "q1/random_poles", "values": [[0.5] * 4_000_000], "errors": [None]}
os.write(_fd, (json.dumps(record) + "\\n").encode())
"""
    )
    nbformat.write(_with_cell(solution(bundle, name), huge, 1), folder / "n35_huge_record.ipynb")
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows, messages = _grade(folder)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"folder": folder, "rows": rows, "messages": messages, "grown_kb": grown, "fake": fake}


@pytest.fixture(scope="module")
def poisoning(bundle, tmp_path_factory):
    name = "poisoning-theorem"
    folder = tmp_path_factory.mktemp("pt-attacks")
    locks = {"r2_lock_client": LOCK_CLIENT, "r2_lock_server": LOCK_SERVER}
    _attack_folder(folder, bundle, name, "poisoned_velocity", {**PT_ATTACKS, **locks})
    rows, messages = _grade(folder)
    return {"rows": rows, "messages": messages}


def _points(name: str) -> dict[str, float]:
    return grading.load(name).auto


def _scores(row: dict, points: dict) -> dict[str, float]:
    return {q: float(row[q]) for q in points}


@pytest.mark.parametrize("attack", sorted(SSM_ATTACKS))
def test_ssm_shortcuts_lose_exactly_their_question(ssm, attack):
    points = _points("ssm-basics")
    assert _scores(ssm["rows"]["a_solution.ipynb"], points) == points
    row = ssm["rows"][f"{attack}.ipynb"]
    assert _scores(row, points) == {**points, "q1": 0.0}, row["status"]


@pytest.mark.parametrize("attack", sorted(PT_ATTACKS))
def test_poisoning_shortcuts_lose_exactly_their_question(poisoning, attack):
    points = _points("poisoning-theorem")
    assert _scores(poisoning["rows"]["a_solution.ipynb"], points) == points
    row = poisoning["rows"][f"{attack}.ipynb"]
    assert _scores(row, points) == {**points, "q1": 0.0}, row["status"]


def test_colluding_sandboxes_cannot_talk_through_file_locks(poisoning):
    """Red team 2's pt5, graded two at a time: the client, whose q1 runs without torch, scored
    full marks on answers the server computed with torch.autograd. Now each loses q1 (the
    client's channel calls are refused, and its run without torch runs alone)."""
    points = _points("poisoning-theorem")
    for name in ("r2_lock_client.ipynb", "r2_lock_server.ipynb"):
        row = poisoning["rows"][name]
        assert _scores(row, points) == {**points, "q1": 0.0}, (name, row["status"])


def test_hostile_metadata_is_one_row_of_zero_and_the_rest_is_graded(ssm):
    points = _points("ssm-basics")
    zero = dict.fromkeys(points, 0.0)
    surrogate = ssm["rows"]["n31_surrogate_id.ipynb"]
    assert _scores(surrogate, points) == zero
    assert "student id is not an id" in surrogate["status"]
    newline = ssm["rows"]["n19_metadata_newline.ipynb"]
    assert _scores(newline, points) == zero and "\n" not in newline["status"]
    assert "another assignment" in newline["status"]
    assert len(ssm["rows"]) == len(list(ssm["folder"].glob("*.ipynb")))  # every file has a row


def test_the_terminal_shows_only_sanitized_text(ssm):
    for line in ssm["messages"]:
        assert line.isascii() and line.isprintable(), line
    for line in ssm["messages"]:  # a progress line starts with its real score
        if line.startswith("["):
            assert re.match(r"\[\d+/\d+\] \d+(\.\d+)? / 10 \(", line), line
    forged = [m for m in ssm["messages"] if "n19_forged_line" in m]
    assert len(forged) == 1 and forged[0].startswith("[") and " 0 / 10 " in forged[0]
    (fake,) = [m for m in ssm["messages"] if "n20g_mallory" in m]
    assert re.match(r"\[\d+/\d+\] 10 / 10 \(graded", fake)  # its honest score, first
    assert "\\u2215" in fake and len(fake) < 160
    feedback = (ssm["folder"] / "feedback" / "n19_metadata_newline.txt").read_text("utf-8")
    assert not any(line.startswith("[7/60]") for line in feedback.splitlines())


def test_a_huge_record_costs_its_own_points_only_and_little_memory(ssm):
    row = ssm["rows"]["n35_huge_record.ipynb"]
    assert float(row["score"]) == 0.0  # its stream was cut at the cap: its records are lost
    assert ssm["grown_kb"] < 400_000, ssm["grown_kb"]  # 465 MB per such notebook before
    assert grading.RESULT_CAP <= 2**20


def test_answers_then_hangs_keeps_its_points_and_ends_at_once(ssm):
    row = ssm["rows"]["n34_answers_then_hangs.ipynb"]
    assert float(row["score"]) == 10.0 and row["status"] == "graded"
    (line,) = [m for m in ssm["messages"] if "n34_answers" in m]
    seconds = int(re.search(r", (\d+) s\)", line).group(1))
    assert seconds < 100  # not the 2 x 120 s of its time limit


def test_one_record_per_test_from_its_own_run_and_nothing_after_done():
    def line(record):
        return (json.dumps(record) + "\n").encode()

    first = {"variant": 0, "key": "q1/a", "values": [1.0], "errors": [None]}
    second = {**first, "values": [2.0]}
    other = {"variant": 0, "key": "q2/b", "values": [3.0], "errors": [None]}
    late = {"variant": 0, "key": "q3/c", "values": [4.0], "errors": [None]}
    stream = line(first) + line(second) + line(other) + line({"done": True}) + line(late)
    run = grading.Run()
    grading._parse_results(stream, run, {(0, "q1/a"), (0, "q3/c")})
    assert run.finished
    assert run.results == {(0, "q1/a"): first}  # the first; not another run's; not after done


def test_a_surrogate_or_formula_id_is_refused_before_anything_uses_it(tmp_path):
    spec = grading.load("ssm-basics")
    for student in ("\ud800", "=HYPERLINK(1)", "a\nb", "x" * 65, "ok@id-1"):
        s = grading.Submission(tmp_path / "x.ipynb", {"cells": [], "metadata": {}})
        s.notebook["metadata"]["course"] = {"assignment": "ssm-basics", "student": student}
        values = grading._prepare(s, "ssm-basics", spec, SECRET)
        assert (values is None) == (student != "ok@id-1"), student
    assert grading._terminal_name("a\nb\u2215c" + " " * 200) == "'a b\\u2215c'"


def test_the_sandbox_refuses_the_system_calls_it_does_not_need():
    if reason := sandbox.missing():
        pytest.skip(reason)
    code = textwrap.dedent(
        """
        import ctypes, errno, socket
        libc = ctypes.CDLL(None, use_errno=True)
        def call(number, *args):
            return libc.syscall(number, *args), ctypes.get_errno()
        try:
            socket.socket(40, socket.SOCK_STREAM)  # AF_VSOCK
            print("vsock opened")
        except OSError as error:
            print("vsock", errno.errorcode[error.errno])
        print("io_uring_setup", call(425, 8, ctypes.create_string_buffer(120)))
        print("keyctl", call(250, 0, 0))
        print("add_key", call(248, b"user", b"k", b"v", 1, -2))
        print("ptrace", call(101, 16, 1, 0, 0))
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        print("inet socket ok")
        """
    )
    result = run_python(code)
    out = result.stdout.decode()
    assert "vsock EAFNOSUPPORT" in out, out + result.stderr.decode()[-2000:]
    for name in ("io_uring_setup", "keyctl", "add_key", "ptrace"):
        assert f"{name} (-1, 1)" in out, out  # EPERM
    assert "inet socket ok" in out  # what a notebook needs still works
