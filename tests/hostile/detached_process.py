"""Leave a detached process behind that keeps rewriting grades.csv after grading.

base: blank
where: end
expect: 0
"""

# %%
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: no parent, own session
        for _ in range(400):
            for target in ("{SUBMISSIONS}/grades.csv", "{CANARY}.alive"):
                try:
                    with open(target, "w") as f:
                        f.write(
                            "submission,student,q1,q2,q3,q4,score,possible,status\n"
                            "solution.ipynb,,0,0,0,,0,10,graded\n"
                            "detached_process.ipynb,,3,3,4,,10,10,graded\n"
                        )
                except OSError:
                    pass
            time.sleep(0.1)
    os._exit(0)
time.sleep(0.5)
