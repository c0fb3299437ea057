"""docs/architecture.md names every module of the package: by its path under gangsched/
(``core/volumes.py``), or by its file name in the section of its package (the ``##`` section
whose heading names ``gangsched/<package>``). A module left out of the map is a module a reader
will not find."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gangsched"
DOC = REPO / "docs" / "architecture.md"


def modules() -> list[str]:
    """Every module under gangsched/, but the packages' __init__.py, relative to gangsched/."""
    return sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def sections(doc: str) -> dict[str, str]:
    """Each ``## `` section's text by the package its heading names (``gangsched/kube`` ->
    ``kube``); sections that name none are left out."""
    out: dict[str, str] = {}
    for part in re.split(r"(?m)^(?=## )", doc):
        heading = part.split("\n", 1)[0]
        if m := re.search(r"`gangsched/([\w/]+?)/?`", heading):
            out[m[1]] = out.get(m[1], "") + part
    return out


def _names(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def named(module: str, doc: str, by_package: dict[str, str]) -> bool:
    if _names(doc, module):
        return True
    package, _, name = module.rpartition("/")
    # core/plugins/x.py: in the section of core, or of core/plugins
    while package:
        if package in by_package and (
            _names(by_package[package], name)
            or _names(by_package[package], module.removeprefix(package + "/"))
        ):
            return True
        package = package.rpartition("/")[0]
    return False


def test_the_package_has_modules_to_check() -> None:
    assert {"core/scheduler.py", "kube/service.py", "sim/engine.py", "app.py"} <= set(modules())
    assert {"core", "kube", "sim"} <= set(sections(DOC.read_text()))


def test_every_module_is_named_in_the_architecture_doc() -> None:
    doc = DOC.read_text()
    by_package = sections(doc)
    missing = [m for m in modules() if not named(m, doc, by_package)]
    assert not missing, (
        f"docs/architecture.md does not name {missing}: add each to the module table or the "
        "section of its package"
    )


def test_the_diagram_counts_the_reflectors_the_service_runs() -> None:
    from tests.kube.test_service import Rig
    from tests.support.fakekube import FakeKube

    reflectors = Rig(FakeKube()).service.reflectors
    doc = DOC.read_text()
    assert f"Reflector x{len(reflectors)} " in doc
    assert f"One reflector per resource, {len(reflectors)} in all" in doc
