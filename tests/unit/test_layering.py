"""Layers point one way: compute and pci never reach the database except by objects.

The compute and the conductor may use each other's RPC clients (``*.rpcapi``), never
each other's server side.

A static walk of every module's imports. ``pcisim`` is the glue package (config,
context, exceptions, RPC, services, commands) and may import any layer, but the
modules that lower layers import from it must not import upward in turn.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRST_PARTY = {"pcisim", "objects", "compute", "conductor", "db", "pci"}

ALLOWED = {
    "db": {"db", "pcisim"},
    "objects": {"objects", "db", "pcisim"},
    "conductor": {"conductor", "objects", "db", "pci", "pcisim", "compute.rpcapi"},
    "pci": {"pci", "objects", "pcisim"},
    "compute": {"compute", "pci", "objects", "pcisim", "conductor.rpcapi"},
}
NEVER_FROM_COMPUTE_OR_PCI = ("db", "sqlalchemy", "oslo_db", "alembic")
# pcisim modules that lower layers import: they must stay below those layers.
GLUE_BASE = {"pcisim.conf", "pcisim.context", "pcisim.exception", "pcisim.dbaccess"}


def imported_modules(path):
    """Absolute module names a file imports, at any depth of the file.

    ``from pcisim import conf`` counts as importing ``pcisim.conf``.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def imports_matching(root, package, is_bad):
    """``path imports module`` for every import in ``package`` that ``is_bad``."""
    return sorted(
        f"{path.relative_to(root)} imports {module}"
        for path in (root / package).rglob("*.py")
        for module in set(imported_modules(path))
        if is_bad(module)
    )


def upward_imports(root, package):
    def upward(module):
        allowed = ALLOWED[package]
        top = module.split(".")[0]
        client_module = ".".join(module.split(".")[:2])
        return top in FIRST_PARTY and top not in allowed and client_module not in allowed

    return imports_matching(root, package, upward)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package):
    assert upward_imports(ROOT, package) == []


@pytest.mark.parametrize("package", ["compute", "pci"])
def test_compute_and_pci_never_import_database_code(package):
    def database_code(module):
        return module.split(".")[0] in NEVER_FROM_COMPUTE_OR_PCI

    assert imports_matching(ROOT, package, database_code) == []


@pytest.mark.parametrize("module", sorted(GLUE_BASE))
def test_glue_that_lower_layers_use_imports_no_layer(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    first_party = {name for name in imported_modules(path) if name.split(".")[0] in FIRST_PARTY}
    assert first_party <= GLUE_BASE


def test_the_checker_sees_a_forbidden_import(tmp_path):
    (tmp_path / "pci").mkdir()
    (tmp_path / "pci" / "tracker.py").write_text("from db import api\n")
    assert upward_imports(tmp_path, "pci") == ["pci/tracker.py imports db.api"]
