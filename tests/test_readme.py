"""The README's two copyable lines are what CI runs (issue 33.1): .ci/run calls the test command exactly."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> dict[str, str]:
    """'main job' / 'the tests' -> the README's command line for it (the block under "Install")."""
    block = re.search(r"## Install.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    out = {}
    for line in block.splitlines():
        command, _, comment = line.partition("  #")
        out["main job" if "main job" in comment else "tests" if "tests" in comment else comment] = command.strip()
    return out


def test_ci_runs_exactly_the_readmes_test_command():
    commands = _readme_commands()
    assert set(commands) == {"main job", "tests"}
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands["tests"] in ci


def test_the_quick_start_comes_before_the_install_and_runs_the_users_script():
    text = (ROOT / "README.md").read_text()
    quick = text.index("## Quick start")
    assert quick < text.index("## Install") < text.index("## Commands")
    first = text[quick:text.index("## Install")]
    assert "ccoverlap doctor -- " in first and "--report" in first and "ccoverlap tune" in first
    assert "train.py" in first and "ccoverlap bench" not in first
