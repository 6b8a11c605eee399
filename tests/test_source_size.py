"""Keep modules focused: no authored source or test file may exceed 500 lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 500


def authored_python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    if listed.returncode == 0 and listed.stdout.strip():
        return [ROOT / line for line in listed.stdout.splitlines() if (ROOT / line).is_file()]
    return [p for d in ("artifactkit", "tests", "diagnostics") for p in (ROOT / d).rglob("*.py")]


def test_no_authored_python_file_exceeds_500_lines() -> None:
    files = authored_python_files()
    assert files, "found no source files: the guard would pass vacuously"
    too_long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > LIMIT}
    assert too_long == {}, f"split these by responsibility: {too_long}"


def test_the_guard_notices_a_long_file(tmp_path: Path) -> None:
    long_file = tmp_path / "long.py"
    long_file.write_text("x = 1\n" * (LIMIT + 1))
    assert len(long_file.read_text().splitlines()) > LIMIT
