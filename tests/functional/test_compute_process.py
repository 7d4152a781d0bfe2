"""pcisim-compute refuses a bad configuration at startup, naming what is wrong."""

import pathlib
import subprocess
import sys

COMPUTE = pathlib.Path(sys.executable).with_name("pcisim-compute")


def _run(tmp_path, **sections):
    config = tmp_path / "pcisim.conf"
    config.write_text(
        "".join(
            f"[{name}]\n" + "".join(f"{key} = {value}\n" for key, value in options.items())
            for name, options in {"DEFAULT": {"state_path": tmp_path}, **sections}.items()
        )
    )
    return subprocess.run(
        [str(COMPUTE), "--config-file", str(config)], capture_output=True, text=True, timeout=60
    )


def test_without_an_inventory_it_refuses_to_start(tmp_path):
    result = _run(tmp_path)
    assert result.returncode != 0
    assert "no [compute] inventory" in result.stderr


def test_a_bad_inventory_is_refused_naming_the_entry(tmp_path):
    result = _run(tmp_path, compute={"inventory": "node1=pfs=2,vfs_per_pf=lots"})
    assert result.returncode != 0
    assert "vfs_per_pf" in result.stderr and "node1" in result.stderr


def test_a_bad_device_spec_is_refused_naming_the_key(tmp_path):
    result = _run(
        tmp_path,
        compute={"inventory": "node1=pfs=1,vfs_per_pf=1"},
        pci={"device_spec": '{"vendor_id": "80g6"}'},
    )
    assert result.returncode != 0
    assert "device_spec" in result.stderr and "vendor_id" in result.stderr
