"""What ``pip install .`` puts into site-packages: one root package, ``pcisim``.

The layer folders the owner asked for at the repository root (compute/, conductor/,
db/, objects/, pci/) install as ``pcisim.compute`` and so on, so that installing pcisim
never shadows another project's own ``db`` or ``pci`` package.
"""

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "pcisim", "compute", "conductor", "db", "objects", "pci"]
LAYERS = ["compute", "conductor", "db", "objects", "pci"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the sources."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        ignore = (
            {"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}
        )
        copy(ROOT / name, source / name, **ignore)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("pcisim-*.whl")
    with zipfile.ZipFile(path) as built:
        yield built


@pytest.fixture(scope="module")
def wheel_names(wheel):
    return wheel.namelist()


def top_level_names(names):
    return {name.split("/")[0] for name in names}


def test_the_wheel_installs_one_root_package_and_its_metadata(wheel_names):
    tops = top_level_names(wheel_names)
    assert {name for name in tops if not name.endswith(".dist-info")} == {"pcisim"}


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_folder_installs_under_pcisim(wheel_names, layer):
    assert f"pcisim/{layer}/__init__.py" in wheel_names


def test_the_migrations_and_their_template_are_installed(wheel_names):
    assert "pcisim/db/migrations/script.py.mako" in wheel_names
    assert "pcisim/db/migrations/versions/0001_initial.py" in wheel_names


def test_the_pytest_plugin_and_console_scripts_point_into_pcisim(wheel, wheel_names):
    (entry_points,) = [name for name in wheel_names if name.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[pytest11]\npcisim = pcisim.pytest_plugin" in text
    for script in (
        "pcisim",
        "pcisim-api",
        "pcisim-compute",
        "pcisim-conductor",
        "pcisim-manage",
        "pcisim-status",
    ):
        assert f"\n{script} = pcisim.cmd" in text
