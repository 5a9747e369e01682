"""Try to start hundreds of processes that sleep for a long time.

base: blank
where: end
expect: 0
"""

# %%
import os
import time

started = 0
for _ in range(300):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        started += 1
    except OSError as error:
        print("stopped after", started, "processes:", error)
        break
