"""gangsched's dev tools: the local dev cluster (``gangsched dev-cluster``, and the control plane
the end-to-end tests run against) and the in-process benchmark (``gangsched bench``).

Installed with the project from a checkout (``pip install -e .``, or ``pip install -e '.[dev]'``
with the test tools); the runtime image holds only ``gangsched`` (Dockerfile). ``gangsched``
imports nothing from here but, in ``gangsched/cli.py``, the commands of :mod:`gangsched_dev.cli`
when this package is installed.
"""
