"""MLflow (mlflow-skinny), local file store: ``log_artifacts`` in a run, then ``download_artifacts``.

Runs in a Python that can ``import mlflow`` (``$ARTIFACTKIT_MLFLOW_PYTHON``, else this one)::

    MLFLOW_ALLOW_FILE_STORE=true MLFLOW_TRACKING_URI=file://{tmp}/mlruns HOME={tmp}
    with mlflow.start_run() as run:
        mlflow.log_artifacts("{src}", artifact_path="tree")
    mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="tree", dst_path="{tmp}/dl")
    mv {tmp}/dl/tree {dst}

Every option, and why (MLflow docs, "Tracking", ``mlflow.log_artifacts``, ``download_artifacts``):

* ``file://{tmp}/mlruns``: the local file store, no server. MLflow 3 refuses it ("maintenance mode")
  unless ``MLFLOW_ALLOW_FILE_STORE=true``; without any URI it defaults to sqlite, which
  mlflow-skinny cannot open (no SQLAlchemy).
* ``artifact_path="tree"``: log the tree under one artifact directory and download exactly that.
* ``HOME={tmp}``: nothing of this user's configuration takes part. The final ``mv`` is a rename.
"""

from __future__ import annotations

import os
import subprocess
import sys

from artifactkit.conformance.adapters._tool import steps
from artifactkit.errors import ToolMissingError

PACKAGE = "PyPI's mlflow-skinny (pip install mlflow-skinny)"
_SCRIPT = """
import sys, mlflow
from mlflow.artifacts import download_artifacts
src, dl = sys.argv[1:3]
with mlflow.start_run() as run:
    mlflow.log_artifacts(src, artifact_path="tree")
download_artifacts(run_id=run.info.run_id, artifact_path="tree", dst_path=dl)
"""


def python() -> str:
    """A Python that can import mlflow, or :class:`ToolMissingError`."""
    for candidate in (os.environ.get("ARTIFACTKIT_MLFLOW_PYTHON"), sys.executable):
        if candidate and subprocess.run([candidate, "-c", "import mlflow"], capture_output=True,
                                        stdin=subprocess.DEVNULL, check=False).returncode == 0:
            return candidate
    raise ToolMissingError(f"mlflow cannot be imported here; install {PACKAGE} (or point "
                           "ARTIFACTKIT_MLFLOW_PYTHON at a Python that has it)", tool="mlflow", package=PACKAGE)


def mlflow(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """Log ``src`` as a run's artifacts in a file store and download them into ``dst``."""
    exe = python()
    with steps(src, dst, "mlflow", log) as run:
        env = {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_TRACKING_URI": f"file://{run.tmp}/mlruns",
               "HOME": run.tmp}
        os.mkdir(f"{run.tmp}/dl")
        run.run([exe, "-c", _SCRIPT, run.src, f"{run.tmp}/dl"], cwd=run.tmp, env=env)
        run.log.append("mv {tmp}/dl/tree {dst}")
        os.rename(f"{run.tmp}/dl/tree", run.dst)


VERSION = ("mlflow",)
