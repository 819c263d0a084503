"""`seglake ... | head`: the reader closes the pipe before the CLI wrote everything. The
CLI ends with exit 1 and nothing on stderr -- no BrokenPipeError traceback, neither from
the command nor from the interpreter's last flush."""

import os
import subprocess
import sys


def test_output_into_a_closed_pipe_ends_without_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    env["SEGLAKE_HOME"] = str(tmp_path)
    p = subprocess.Popen([sys.executable, "-m", "seglake.cli", "config", "show", "--json"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()            # the reader is gone before the CLI has even started
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
