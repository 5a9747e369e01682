"""Honest answers, plus an attempt to copy the hidden tests into the output (and so the logs).

base: solution
where: end
expect: full
"""

# %%
import glob
import os
import zipfile

for pattern in (
    "tests/*.py",
    "./tests/q*.py",
    "/**/tests/q*.py",
    "/**/book/assignments/*.md",
    "/**/autograder/*.zip",
    "/work/main/book/assignments/gradient-flow.md",
):
    for path in glob.glob(pattern, recursive=True):
        try:
            if path.endswith(".zip"):
                with zipfile.ZipFile(path) as bundle:
                    for name in bundle.namelist():
                        print(name, bundle.read(name).decode(errors="replace"))
            else:
                print(path, open(path).read())
        except OSError as error:
            print(path, error)
print("cwd:", os.getcwd(), os.listdir("."), "root:", os.listdir("/"))
