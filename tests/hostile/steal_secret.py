"""Look for COURSE_SECRET in the environment of every process the sandbox can see (bwrap's pid 1
keeps the environment it was started with) and hand it back through the feedback (a cell that
raises).

base: blank
where: end
expect: 0
"""

# %%
import os

found = [f"{key}={value}" for key, value in os.environ.items() if "SECRET" in key]
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            variables = f.read().split(b"\0")
    except OSError:
        continue
    found += [v.decode(errors="replace") for v in variables if v.startswith(b"COURSE_SECRET=")]
raise RuntimeError(f"secret: {found}")
