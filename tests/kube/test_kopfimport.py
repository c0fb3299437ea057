"""kopf's first import leaves the Kubernetes client libraries out (gangsched/kube/kopfimport.py),
and they can still be imported afterwards. In a fresh interpreter: kopf may already be imported
in this one."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from gangsched.kube.kopfimport import import_kopf
kopf = import_kopf()
assert hasattr(kopf, "OperatorRegistry")
left_out = [m for m in sys.modules if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio")]
assert not left_out, left_out
assert import_kopf() is kopf
import kubernetes_asyncio.client  # not affected afterwards
assert kubernetes_asyncio.client.V1ObjectMeta
print("ok")
"""


def test_kopf_is_imported_without_the_client_libraries_which_still_import_later() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
