"""The `cuquota` command of the wheel: executes the packaged binary, which finds the
libraries beside it (cuquota/bin/cuquota looks for ../lib/libcuquota.so, the rule an install
into PREFIX/bin and PREFIX/lib already uses), so no variable needs to be set. exec, not
spawn: `cuquota run` keeps this process id, and so does the program it runs."""

import os
import sys

BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "cuquota")


def main() -> None:
    try:
        os.execv(BINARY, ["cuquota", *sys.argv[1:]])
    except OSError as e:
        sys.stderr.write(f"cuquota: cannot run {BINARY}: {e} (a damaged install? pip install --force-reinstall cuquota)\n")
        sys.exit(127)


if __name__ == "__main__":
    main()
