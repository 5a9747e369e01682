"""Honest answers, then try to fill every writable file system of the sandbox (/, /dev,
/dev/shm, /tmp), 768 MB in each: memory that no rlimit counts, held while the sandbox lives.

base: solution
where: end
expect: full
"""

# %%
import os

block = b"x" * 2**20
written = 0
for folder in ("/", "/dev", "/dev/shm", "/tmp"):
    for number in range(6):  # files of 128 MB, the largest a sandbox may write
        try:
            with open(os.path.join(folder, f"fill{number}"), "wb") as f:
                for _ in range(128):
                    f.write(block)
                    written += 1
        except OSError:
            break
print(f"fill_tmpfs wrote {written} MB")
