"""Layers point one way: compute and pci never reach the database except by objects.

The compute and the conductor may use each other's RPC clients (``*.rpcapi``) and
binary names (``BINARY``), never each other's server side.

A static walk of every module's imports. ``pcisim`` is the glue package (config,
context, exceptions, RPC, services, commands) and may import any layer, but the
modules that lower layers import from it must not import upward in turn.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = {"objects", "compute", "conductor", "db", "pci"}

ALLOWED = {
    "db": {"db", "pcisim"},
    "objects": {"objects", "db", "pcisim"},
    "conductor": {
        "conductor",
        "objects",
        "db",
        "pci",
        "pcisim",
        "compute.rpcapi",
        "compute.BINARY",
    },
    "pci": {"pci", "objects", "pcisim"},
    "compute": {"compute", "pci", "objects", "pcisim", "conductor.rpcapi"},
}
DATABASE_LIBRARIES = ("sqlalchemy", "oslo_db", "alembic")
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


def layer_of(module):
    """The layer an absolute module name belongs to, or None for a third-party one.

    The layer folders install under ``pcisim``: ``pcisim.db.api`` is in layer ``db``,
    ``pcisim.conf`` in the glue, ``pcisim``.
    """
    parts = module.split(".")
    if parts[0] != "pcisim":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "pcisim"


def upward_imports(root, package):
    def upward(module):
        allowed = ALLOWED[package]
        layer = layer_of(module)
        client_module = ".".join(module.split(".")[1:3])
        return layer is not None and layer not in allowed and client_module not in allowed

    return imports_matching(root, package, upward)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package):
    assert upward_imports(ROOT, package) == []


@pytest.mark.parametrize("package", ["compute", "pci"])
def test_compute_and_pci_never_import_database_code(package):
    def database_code(module):
        return layer_of(module) == "db" or module.split(".")[0] in DATABASE_LIBRARIES

    assert imports_matching(ROOT, package, database_code) == []


@pytest.mark.parametrize("module", sorted(GLUE_BASE))
def test_glue_that_lower_layers_use_imports_no_layer(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    first_party = {name for name in imported_modules(path) if layer_of(name)}
    assert first_party <= GLUE_BASE


def test_the_checker_sees_a_forbidden_import(tmp_path):
    (tmp_path / "pci").mkdir()
    (tmp_path / "pci" / "tracker.py").write_text("from pcisim.db import api\n")
    assert upward_imports(tmp_path, "pci") == ["pci/tracker.py imports pcisim.db.api"]
