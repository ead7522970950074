#!/usr/bin/env python3
"""Builds the {{name}} policy into policy.wasm: `python3 build.py`.

The first run makes a virtual environment in .venv and installs the pinned componentize-py
(requirements.txt) from the package index; later runs need no network. The component targets
the world in wit/world.wit, with the SDK in tfjob_policy/ and the policy in app.py.
"""

import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
TOOL = VENV / "bin" / "componentize-py"


def main() -> int:
    requirements = (HERE / "requirements.txt").read_text()
    stamp = VENV / "requirements.txt"
    if not TOOL.exists() or not stamp.exists() or stamp.read_text() != requirements:
        print("installing componentize-py into .venv (once)", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        subprocess.run(
            [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r",
             str(HERE / "requirements.txt")],
            check=True,
        )
        stamp.write_text(requirements)
    output = HERE / "policy.wasm"
    subprocess.run(
        [str(TOOL), "-d", str(HERE / "wit"), "-w", "policy", "componentize",
         "-p", str(HERE), "app", "-o", str(output)],
        check=True,
    )
    print(f"built {output.relative_to(HERE)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
