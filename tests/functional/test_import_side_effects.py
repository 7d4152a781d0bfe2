"""Importing pcisim, loading its pytest plugin and running its HTTP client select no
concurrency backend and import no service machinery (issue 12)."""

import subprocess
import sys
import textwrap

SERVICE_MACHINERY = ("oslo_service", "eventlet", "sqlalchemy", "oslo_messaging")

REPORT_IMPORTED = textwrap.dedent(
    f"""
    import sys
    print(sorted(name for name in {SERVICE_MACHINERY!r} if name in sys.modules))
    """
)


def run_python(code, cwd, *args):
    return subprocess.run(
        [sys.executable, *args, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_importing_pcisim_imports_no_service_machinery(tmp_path):
    result = run_python("import pcisim\n" + REPORT_IMPORTED, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_pcisim_help_imports_no_service_machinery(tmp_path):
    code = textwrap.dedent(
        """
        import contextlib, io, sys
        sys.argv = ["pcisim", "--help"]
        from pcisim.cmd import pcisim
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            pcisim.main()
        """
    )
    result = run_python(code + REPORT_IMPORTED, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_pytest_session_with_the_plugin_keeps_the_backend_unselected(tmp_path):
    (tmp_path / "test_other_project.py").write_text(
        textwrap.dedent(
            """
            import sys


            def test_nothing_selected_a_backend(pytestconfig):
                assert pytestconfig.pluginmanager.has_plugin("pcisim")
                backend = sys.modules.get("oslo_service.backend")
                assert backend is None or backend.get_backend_type() is None
                assert "eventlet" not in sys.modules
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_conductor_help_prints_no_warning(tmp_path):
    code = "import sys; sys.argv = ['pcisim-conductor', '--help']\n"
    code += "from pcisim.cmd import conductor; conductor.main()"
    result = run_python(code, tmp_path)

    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout
    assert result.stderr == ""


def test_manage_help_prints_no_warning(tmp_path):
    code = "import sys; sys.argv = ['pcisim-manage', '--help']\n"
    code += "from pcisim import cmd; cmd.manage_main()"
    result = run_python(code, tmp_path)

    assert result.returncode == 0, result.stderr
    assert "usage: pcisim-manage" in result.stdout
    assert result.stderr == ""
