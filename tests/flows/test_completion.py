"""Shell completion of the `flywheel` command (Typer's --show-completion / --install-completion,
for the shell the command runs in)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.cli import app


def _invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, prog_name="flywheel", env=env)
    return result.exit_code, result.output


@pytest.mark.parametrize(("shell", "hook"), [("bash", "complete -o default -F _flywheel_completion"
                                                      " flywheel"),
                                             ("zsh", "compdef _flywheel_completion flywheel")])
def test_show_completion_prints_the_shells_script(shell, hook, monkeypatch):
    import shellingham

    monkeypatch.setattr(shellingham, "detect_shell", lambda: (shell, f"/bin/{shell}"))
    code, output = _invoke(["--show-completion"])
    assert code == 0 and hook in output, output
    assert f"_FLYWHEEL_COMPLETE=complete_{shell}" in output


def test_help_offers_install_and_show_completion():
    code, output = _invoke(["--help"])
    assert code == 0 and "--install-completion" in output and "--show-completion" in output


def test_the_bash_script_completes_commands_and_options():
    code, output = _invoke([], env={"_FLYWHEEL_COMPLETE": "complete_bash",
                                    "COMP_WORDS": "flywheel ru", "COMP_CWORD": "1"})
    assert code == 0 and output.split() == ["run", "runs"], output
    code, output = _invoke([], env={"_FLYWHEEL_COMPLETE": "complete_bash",
                                    "COMP_WORDS": "flywheel status r1 --js", "COMP_CWORD": "3"})
    assert code == 0 and output.split() == ["--json"], output
