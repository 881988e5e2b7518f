import subprocess
import sys

from ablate.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_python_m_ablate_help():
    proc = subprocess.run([sys.executable, "-m", "ablate", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "ablation studies" in proc.stdout


def test_each_command_has_help(capsys):
    for name in COMMANDS:
        try:
            main([name, "--help"])
        except SystemExit as exc:
            assert exc.code == 0
        assert name in capsys.readouterr().out
