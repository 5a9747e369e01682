"""Honest answers, then a cell that allocates 8 GB (twice, in two ways).

base: solution
where: end
expect: full
"""

# %%
import numpy as np

hog = bytearray(8 * 2**30)
# %%
hog = np.ones(2**30)  # 8 GB of float64
hog[:] = 2.0
