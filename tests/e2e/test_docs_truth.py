"""The docs stay true to the artefacts: every file, results.json key and metrics.csv column that the getting-started
page and the run-folder guide name exists in a real default run (one run, shared by the module), and every
`python train.py` / `dpgen` command shown in the README and the guides parses (a dry compose of the command line,
the subcommand exists)."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest

from dpgen.cli import COMMANDS
from dpgen.preflight import preflight
from tests.helpers import ROOT
from tests.helpers.runs import FAST, train_here

TABLES = {"docs/getting-started.md": "## What a run writes", "docs/guides/runs.md": "## What is kept where"}
ELSEWHERE = {"classifier.pt", "da_model.pt", "release.pt",  # the releases of other methods
             ".dpgen/holder.json"}  # removed when the run ends (it names the live holder of the lock)
PAGES = ["README.md", "docs/getting-started.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guides").glob("*.md"))]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """`python train.py` (in this process) with the default preset and the default logger (W&B offline), evaluation
    shortened."""
    out = tmp_path_factory.mktemp("docs_truth") / "run"
    r = train_here([*FAST, f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def section(page: str, heading: str) -> str:
    text = (ROOT / page).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end > 0 else None]


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]


def named_files(page: str) -> list[str]:
    """The backticked names in the first column of the page's run-folder table."""
    names = []
    for row in table_rows(section(page, TABLES[page]))[1:]:
        names += [n for n in re.findall(r"`([^`]+)`", row[0]) if re.fullmatch(r"[\w.<>/*-]+", n)]
    return names


@pytest.mark.parametrize("page", list(TABLES))
def test_every_file_the_docs_name_is_in_a_default_run(default_run, page):
    names = named_files(page)
    assert len(names) >= 8, names  # the table was found and read
    missing = [n for n in names if n not in ELSEWHERE
               and not list(default_run.glob(re.sub(r"<[^>]+>", "*", n).rstrip("/")))]
    assert not missing, f"{page} names {missing}, which a default run does not write"


@pytest.mark.parametrize("page", list(TABLES))
def test_every_json_file_the_page_names_anywhere_is_written(default_run, page):
    """Not only the table: a file named in the text (e.g. where a resumed run keeps its segments' times) exists."""
    names = set(re.findall(r"`([\w./-]+\.json)`", (ROOT / page).read_text()))
    assert "results.json" in names
    missing = [n for n in names if n not in ELSEWHERE and not list(default_run.rglob(Path(n).name))]
    assert not missing, f"{page} names {missing}, which a default run does not write"


def test_every_results_key_and_metrics_column_the_docs_name_exists(default_run):
    rows = {row[0]: row[1] for row in table_rows(section("docs/getting-started.md", TABLES["docs/getting-started.md"]))}
    results = json.loads((default_run / "results.json").read_text())
    keys = re.findall(r"`(\w+)`", rows["`results.json`"].split("**")[0])
    assert keys and not [k for k in keys if k not in results], keys
    assert {"privacy", "utility", "provenance"} <= set(results["summary"])
    with open(default_run / "metrics.csv", newline="") as fh:
        header = next(csv.reader(fh))
    columns = re.findall(r"`(\w+)`", rows["`metrics.csv`"])
    assert columns and not [c for c in columns if c not in header], (columns, header)
    assert not [h for h in header if "time" in h or h.endswith("_per_s")]  # no timing column (private)


def commands(page: str, with_comments: bool = False) -> list[str]:
    """Every `python train.py ...` / `dpgen ...` / `make train ARGS="..."` line of the page's bash blocks
    (continuations joined; the make line as the `python train.py` line it runs), without its comment unless asked."""
    out = []
    for block in re.findall(r"```(?:bash|console)\n(.*?)```", (ROOT / page).read_text(), flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", line.strip().removeprefix("$ "))  # VAR=value python train.py
            line = line if with_comments else line.split(" #")[0].strip()
            if (make := re.match(r'make train ARGS="([^"]*)"(.*)', line)) is not None:
                line = f"python train.py {make.group(1)}{make.group(2)}"
            if line.startswith(("python train.py", "dpgen ")):
                out.append(line)
    return out


@pytest.mark.parametrize("page", PAGES)
def test_a_command_that_needs_a_gpu_says_so(page):
    """On a machine without a GPU, `device=cuda` is refused before the run starts: the docs say it needs one."""
    unsaid = [line for line in commands(page, with_comments=True)
              if re.search(r"device=cuda", line.split(" #")[0]) and "GPU" not in line.partition(" #")[2]]
    assert not unsaid, f"{page}: say `# needs a CUDA GPU` beside {unsaid}"


@pytest.mark.parametrize("page", PAGES)
def test_every_command_shown_parses(page):
    for line in commands(page):
        words = shlex.split(line)
        if words[0] == "dpgen":
            assert words[1] in COMMANDS, f"{page}: `{line}`: no subcommand {words[1]!r}"
            if words[1] != "train":
                continue
            words = words[1:]
            if "--nproc" in words:  # dpgen train's own option (processes per node, docs/guides/distributed.md)
                i = words.index("--nproc")
                words = words[:i] + words[i + 2:]
        args = [w for w in words[2:] if not re.search(r"<|…|\.\.\.|\$", w)]  # placeholders: the reader's to fill
        if len(args) < len(words[2:]) and not any(a.startswith("trainer.resume=") for a in args):
            args = [a for a in args if not a.startswith("trainer.fresh_noise=")]  # a branch of the reader's run
        args = [re.sub(r"device=cuda\S*", "device=cpu", w) for w in args]  # said to need a GPU (the test above)
        assert preflight(args) is None, f"{page}: `{line}`: {preflight(args)}"


def _flat(page: str) -> str:
    return " ".join((ROOT / page).read_text().split())


def test_the_guarantee_page_says_what_the_code_does_with_n():
    """Under add/remove (the default) no exact N is published: the page must not call N public and written."""
    from dpgen.privacy.card import n_is_public

    text = _flat("docs/privacy/guarantee.md")
    assert not n_is_public("add_remove") and n_is_public("replace_one")
    assert "**N is public.**" not in text and "it is written to results.json" not in text
    assert "N is itself protected" in text and "Under replace-one" in text


def test_the_guarantee_page_names_the_evaluations_un_noised_reads():
    text = _flat("docs/privacy/guarantee.md")
    assert "Nothing un-noised is logged.**" not in text  # no unconditional claim: dpimagebench's FID is one
    assert "evaluator=dpimagebench" in text and "privacy card names the reads" in text


def test_the_utility_pages_name_the_accountant_that_calibrates_the_default():
    from dpgen.privacy.accountants import calibrating_accountant

    assert calibrating_accountant("poisson", "auto") == "pld"
    pages = ["docs/utility.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "research").glob("*.md"))]
    said = [p for p in pages if "calibrating accountant (RDP)" in _flat(p)]
    assert not said, f"{said} say RDP calibrates the default (PLD does, for Poisson sampling)"


def test_a_preset_the_configs_guide_calls_not_timed_has_no_recorded_time():
    from dpgen import preset_runs

    runs = preset_runs.load()["runs"]
    for row in table_rows((ROOT / "docs" / "guides" / "configs.md").read_text()):
        name = row[0].strip("`")
        if any("not timed" in c for c in row):
            timed = [k for k, r in (runs.get(name) or {}).items() if k != "smoke" and "wall_s" in (r or {})]
            assert not timed, f"configs.md says {name} is not timed, but its {timed} run has a wall time recorded"


def test_the_readme_says_what_varies_between_the_default_runs_it_summarises():
    """The default's noise is secret (not seeded by `seed`) and `seed` sets the split: a spread over seeds is a
    spread over noise draws too, and the README says so beside its ± numbers."""
    from tests.helpers.configs import compose_cfg

    cfg = compose_cfg([])
    assert cfg.trainer.deterministic is False and cfg.dataset.seed == cfg.seed
    text = _flat("README.md")
    assert "The noise is drawn from OS entropy whatever `seed` says (the seed sets the split and the evaluation)" in text
    assert "`make train` four times gave LogReg" in text


def test_the_celeba_guides_fixture_command_keeps_the_fid_it_promises(tmp_path):
    """The evaluator of the guide's fixture command, checked on the fixture's data: the FID stays on."""
    from hydra.utils import instantiate

    from tests.helpers import fakedata
    from tests.helpers.configs import compose_cfg

    (line,) = [c for c in commands("docs/guides/celeba.md") if "experiment=celeba_dpswd" in c and "max_steps=20" in c]
    root = fakedata.make(tmp_path / "fixture-data", ("celeba",))
    cfg = compose_cfg([w for w in shlex.split(line)[2:]], out_dir=tmp_path / "run", data_root=root)
    evaluator = instantiate(cfg.evaluator, _convert_="all")
    evaluator.check()
    evaluator.check(instantiate(cfg.dataset))
    assert evaluator.fid_off is None and evaluator.fid["extractor"] == "domain"
