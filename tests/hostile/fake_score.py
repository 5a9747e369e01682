"""Print a fake score line and terminal control sequences into the grader's terminal.

base: blank
where: end
expect: 0
"""

# %%
import os
import sys

fake = "\r\x1b[2K\x1b[1A\x1b[2K[1/1] fake_score.ipynb: 10 / 10 (graded, 1 s)\n"
print(fake * 3)
print(fake, file=sys.stderr)
os.write(1, fake.encode())
os.write(2, fake.encode())
try:
    with open("/dev/tty", "w") as tty:
        tty.write(fake)
except OSError as error:
    print("no terminal:", error)
try:
    import fcntl
    import termios

    for character in "echo pwned\n":
        fcntl.ioctl(0, termios.TIOCSTI, character.encode())
except Exception as error:
    print("no TIOCSTI:", error)
