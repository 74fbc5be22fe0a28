"""The shim, a stand-in libcuda.so.1 (also answering as libnvidia-ml.so.1) that simulates
GPUs in host memory, for trying cuquota without a GPU. `cuquota run --stand-in` gives it to
one command; this module prints its directory, for a command of one's own:

    cuquota run --stand-in --limit 6GiB ./my_program
    LD_LIBRARY_PATH=$(python3 -m cuquota.shim) CUDA_SHIM_MEMORY=8GiB \\
      cuquota run --limit 6GiB ./my_program

In the wheel, libcuda.so and libnvidia-ml.so.1 are small libraries that need libcuda.so.1
(a wheel cannot hold symbolic links), so the loader maps one object for the three names.
"""

import os

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")

if __name__ == "__main__":
    print(DIR)
