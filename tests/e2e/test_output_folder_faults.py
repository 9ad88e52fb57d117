"""An output folder that cannot be made or written: one ``error:`` line naming the folder and the fix, exit
code 2, before anything is written, and nothing left behind (not even the folders the check made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpgen.preflight import writable_folder_problem
from tests.helpers.runs import train_here


@pytest.mark.parametrize("where", ["/proc/nonexist/run", "/proc/1/run"])
def test_train_py_refuses_a_run_folder_it_cannot_make(where):
    if not Path("/proc/1").is_dir():
        pytest.skip("needs Linux /proc")
    r = train_here(["logger=local", "evaluator=none", f"hydra.run.dir={where}"])
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"the run folder {where}" in errors[0] and "fix: choose a writable folder with hydra.run.dir=" in errors[0]


def test_a_folder_the_os_refuses_is_named_and_the_check_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "outputs" / "digits_moments" / "run"
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self == target:  # e.g. a read-only mount or an ACL that os.access does not see
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    problem = writable_folder_problem(target, "hydra.run.dir")
    assert problem == (f"cannot create the run folder {target}: Permission denied ({target}); fix: choose a writable "
                       "folder with hydra.run.dir=<folder>, or fix the permissions")
    assert list(tmp_path.iterdir()) == []  # outputs/ and outputs/digits_moments/ made by the check are gone
    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    assert writable_folder_problem(target, "hydra.run.dir") is None and list(tmp_path.iterdir()) == []


def test_a_file_in_the_path_is_named(tmp_path):
    (tmp_path / "afile").write_text("")
    problem = writable_folder_problem(tmp_path / "afile" / "run", "hydra.sweep.dir")
    assert problem.startswith(f"cannot create the run folder {tmp_path / 'afile' / 'run'}: {tmp_path / 'afile'} is a "
                              "file, not a folder; fix: choose a writable folder with hydra.sweep.dir=<folder>")
