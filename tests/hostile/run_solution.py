"""Look for the solution notebook (or any assignment source) and run its code; read classmates.

base: blank
where: end
expect: 0
"""

# %%
import glob
import json
import os

found = []
for pattern in (
    "/**/*gradient-flow*.ipynb",
    "/**/autograder/*.ipynb",
    "/**/assignments/*.md",
    "/**/*.ipynb",
    "/tmp/**/*",
    os.path.expanduser("~/**/*.ipynb"),
):
    found += glob.glob(pattern, recursive=True)
for proc in glob.glob("/proc/[0-9]*/cmdline"):  # the grader's command line names the bundle
    try:
        words = open(proc, "rb").read().decode(errors="replace").split("\0")
        found += [w for w in words if w.endswith((".zip", ".ipynb"))]
    except OSError:
        pass
print("found:", found[:50])
for path in found:
    try:
        if path.endswith(".ipynb"):
            cells = json.load(open(path))["cells"]
            for cell in cells:
                if cell["cell_type"] == "code":
                    exec("".join(cell["source"]), globals())
    except Exception as error:
        print("could not run", path, error)
