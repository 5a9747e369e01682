"""Write outside its own folder: the grades, a classmate's notebook, the repository, a canary.

base: blank
where: end
expect: 0
"""

# %%
import os

targets = [
    "{SUBMISSIONS}/grades.csv",
    "{SUBMISSIONS}/solution.ipynb",
    "{SUBMISSIONS}/new.ipynb",
    "{CANARY}",
    "/work/main/README.md",
    "/tmp/hostile-wrote-here",
    os.path.expanduser("~/.bashrc"),
    "/etc/hostile",
]
for target in targets:
    try:
        with open(target, "a") as f:
            f.write("student,pwned,10,10,10,10,10,graded\n")
        print("wrote", target)
    except OSError as error:
        print("could not write", target, error)
