"""An endless loop that ignores every signal it can, with a child process doing the same.

base: blank
where: end
expect: 0
"""

# %%
import os
import signal

for number in (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGALRM,
    signal.SIGXCPU,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGVTALRM,
    signal.SIGPROF,
):
    signal.signal(number, signal.SIG_IGN)
os.fork()
while True:
    try:
        pass
    except BaseException:
        pass
