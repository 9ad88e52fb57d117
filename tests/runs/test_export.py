"""``dpgen sample`` / ``dpgen.export`` / the privacy card: sampling from a release alone, exports in the
dataset's pixel format and ImageFolder layout, the card against the ledger, no exact private count
under add/remove, checkpoints refused, and the exported data usable by plain scikit-learn."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from dpgen.cli import main as dpgen_main
from dpgen.errors import ConfigError
from dpgen.export import load_release
from dpgen.pipeline import run
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.card import build_card, card_markdown
from tests.helpers import ROOT
from tests.helpers.configs import compose_cfg

FAST = ["evaluator=none", "logger=local", "trainer.progress=false"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The embedded default (DP class-Gaussian on digits: one release, seconds), trained once."""
    out = tmp_path_factory.mktemp("default_run")
    results = run(compose_cfg(["experiment=digits_moments", *FAST], out_dir=out))
    return out, results


def test_card_agrees_with_the_ledger_and_publishes_no_exact_count(default_run):
    out, results = default_run
    card = json.loads((out / "privacy_card.json").read_text())
    ledger = results["privacy"]  # ledger.summary() of the run
    assert card["privacy"]["epsilon"] == pytest.approx(ledger["epsilon"])
    assert card["privacy"]["epsilon_by_accountant"]["RDP (autodp)"] == pytest.approx(ledger["epsilon_rdp"])
    assert card["privacy"]["epsilon_by_accountant"]["PLD (dp-accounting)"] == pytest.approx(ledger["epsilon_pld"])
    assert card["privacy"]["calibrating_accountant"].startswith(ledger["calibrating_accountant"].upper())
    assert card["privacy"]["neighbouring_relation"] == ledger["neighbouring_relation"] == "add_remove"
    assert card["privacy"]["releases"] == ledger["private_steps"] == 1
    mech = results["train"]["mechanisms"]["moments"]
    assert card["privacy"]["mechanisms"][0]["noise_multiplier"] == pytest.approx(mech["noise_multiplier"])
    assert card["preset"] == "digits_moments" and card["method"] == "DPClassGaussian"
    assert re.fullmatch(r"[0-9a-f]{16}", card["config_hash"])
    # add/remove: N is private -> no exact count in results.json, the card or the release; a noisy count instead
    n = 1347
    assert "n_private" not in results and card["dataset"]["size"]["exact"] is None
    assert card["dataset"]["size"]["noisy"] is not None
    release = torch.load(out / "generator.pt", weights_only=False)
    assert "n_private" not in release["signature"]
    assert release["privacy_card"] == card
    noisy = card["dataset"]["size"]["noisy"]  # close to N by design: left out of the search
    no_noisy = {**card, "dataset": {**card["dataset"], "size": {**card["dataset"]["size"], "noisy": None}}}
    md = (out / "privacy_card.md").read_text().replace(f"{noisy:g}", "")
    for text in ((out / "results.json").read_text(), md, json.dumps(no_noisy), json.dumps(release["signature"])):
        assert not re.search(rf"(?<![\d.]){n}(?![\d])", text)
    md = (out / "privacy_card.md").read_text()
    assert "What it does not cover" in md and "hyper-parameters" in md and "Public data" in md


def test_a_replace_one_run_publishes_its_exact_count_at_the_replace_one_price(tmp_path):
    """accountant.sampling=without_replacement: N public, sensitivity sqrt 2, RDP calibrates (more noise)."""
    results = run(compose_cfg(["experiment=digits_moments", *FAST, "accountant.sampling=without_replacement"],
                              out_dir=tmp_path))
    card = json.loads((tmp_path / "privacy_card.json").read_text())
    assert results["n_private"] == card["dataset"]["size"]["exact"] == 1347
    assert card["privacy"]["neighbouring_relation"] == "replace_one" and card["privacy"]["epsilon"] <= 10.0
    assert card["privacy"]["mechanisms"][0]["noise_multiplier"] == pytest.approx(0.5246, abs=1e-3)


def test_replace_one_card_shows_the_exact_count_and_its_epsilon():
    ledger = PrivacyLedger(10.0, 1e-4, "without_replacement")
    ledger.record(0.5, 1.0, 1, relation="replace_one", mechanism="class_moments")
    card = build_card(ledger, method="M", preset="p", config={"model": {}}, dataset="d", n_private=123)
    assert card["dataset"]["size"]["exact"] == 123 and card["privacy"]["neighbouring_relation"] == "replace_one"
    assert card["privacy"]["epsilon"] == pytest.approx(ledger.epsilon())
    assert "PLD (dp-accounting)" not in card["privacy"]["epsilon_by_accountant"]  # no PLD without replacement
    assert "123 records" in card_markdown(card)


def test_add_remove_subsampled_card_says_the_sample_rate_reveals_n():
    ledger = PrivacyLedger(10.0, 1e-5, "poisson")
    ledger.record(1.0, 0.01, 100, mechanism="gradient")
    card = build_card(ledger, method="M", preset="p", config={}, dataset="d", n_private=5000)
    assert card["dataset"]["size"] == {**card["dataset"]["size"], "exact": None, "noisy": None}
    assert any("sample rate" in item for item in card["does_not_cover"])


def _sample(*args) -> int:
    return dpgen_main(["sample", *map(str, args)])


def test_npz_export_in_the_dataset_pixel_format_with_its_card(default_run, tmp_path):
    out, _ = default_run
    assert _sample(out, "--n", 1000, "--seed", 3, "--out", tmp_path / "synth.npz") == 0
    d = np.load(tmp_path / "synth.npz")
    assert d["x"].shape == (1000, 8, 8) and d["x"].dtype == np.uint8 and d["x"].max() <= 16  # digits: 0..16
    assert np.bincount(d["y"]).tolist() == [100] * 10
    card = json.loads((tmp_path / "synth.card.json").read_text())
    assert card["export"]["n"] == 1000 and card["privacy"] == load_release(out).card["privacy"]
    assert (tmp_path / "synth.card.md").read_text().startswith("# Privacy card")
    again = tmp_path / "again.npz"
    _sample(out / "generator.pt", "--n", 1000, "--seed", 3, "--out", again)
    assert np.array_equal(np.load(again)["x"], d["x"])  # the seed fixes the export


def test_png_folder_is_an_imagefolder(default_run, tmp_path):
    from PIL import Image

    out, _ = default_run
    folder = tmp_path / "pngs"
    assert _sample(out, "--n", 40, "--labels", "0,3,7", "--seed", 0, "--out", folder) == 0
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert classes == ["0", "3", "7"] and (folder / "privacy_card.json").exists()
    assert sum(len(list((folder / c).glob("*.png"))) for c in classes) == 40
    img = Image.open(next((folder / "3").glob("*.png")))
    assert img.size == (8, 8) and img.mode == "L"


def test_proportional_uses_the_released_noisy_counts(default_run):
    rel = load_release(default_run[0])
    noisy = rel.state["counts"].clamp_min(0)
    _, y = rel.sample(2000, labels="proportional", seed=0)
    expected = (2000 * noisy / noisy.sum()).numpy()
    assert np.abs(np.bincount(y.numpy(), minlength=10) - expected).max() <= 1


def test_checkpoints_and_bad_requests_are_one_line_errors(default_run, tmp_path, capsys):
    out, _ = default_run
    for target in (out / "checkpoints" / "last.pt", out / "checkpoints"):
        assert _sample(target, "--n", 10, "--out", tmp_path / "x.npz") == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "checkpoint" in err and "RNG" in err and "\n" not in err
    assert _sample(out, "--n", 10, "--labels", "0,12", "--out", tmp_path / "x.npz") == 2
    assert "not in 0..9" in capsys.readouterr().err
    assert _sample(tmp_path / "nothing", "--n", 10, "--out", tmp_path / "x.npz") == 2
    assert not (tmp_path / "x.npz").exists()


def test_resuming_from_a_release_is_an_error(default_run, tmp_path):
    out, _ = default_run
    cfg = compose_cfg(["experiment=digits_moments", *FAST, f"trainer.resume={out / 'generator.pt'}"], out_dir=tmp_path)
    with pytest.raises(ConfigError, match="weights-only release"):
        run(cfg)


def test_a_classifier_release_exports_its_weights(default_run, tmp_path, capsys):
    rel = load_release(default_run[0])
    fake = {"network": {"w": torch.zeros(2)}, "signature": {"method": "DPSGDClassifier"},
            "dpgen": rel.state["dpgen"], "privacy_card": {**rel.card, "method": "DPSGDClassifier"}}
    torch.save(fake, tmp_path / "classifier.pt")
    assert _sample(tmp_path, "--n", 10, "--out", tmp_path / "synth.npz") == 2
    assert "not a generator" in capsys.readouterr().err
    assert _sample(tmp_path, "--out", tmp_path / "export" / "model.pt") == 0
    assert torch.load(tmp_path / "export" / "model.pt", weights_only=False)["network"]["w"].shape == (2,)
    assert json.loads((tmp_path / "export" / "model.card.json").read_text())["method"] == "DPSGDClassifier"


def test_each_export_keeps_its_own_card_and_nothing_is_replaced_without_force(default_run, tmp_path, capsys):
    out, _ = default_run
    rel = load_release(out)
    model = tmp_path / "clf"
    model.mkdir()
    torch.save({"network": {"w": torch.zeros(2)}, "signature": {"method": "DPSGDClassifier"}, "dpgen": rel.state["dpgen"],
                "privacy_card": {**rel.card, "method": "DPSGDClassifier", "privacy": {**rel.card["privacy"],
                                                                                   "guarantee": "not DP"}}},
               model / "classifier.pt")
    shared = tmp_path / "exports"
    assert _sample(out, "--n", 20, "--seed", 0, "--out", shared / "a.npz") == 0
    assert _sample(model, "--out", shared / "clf.pt") == 0
    assert _sample(out, "--n", 30, "--seed", 1, "--out", shared / "b.npz") == 0
    assert "wrote" in capsys.readouterr().out
    cards = {p.name: json.loads(p.read_text()) for p in shared.glob("*.card.json")}
    assert sorted(cards) == ["a.card.json", "b.card.json", "clf.card.json"]  # one card per export, none replaced
    assert cards["clf.card.json"]["privacy"]["guarantee"] == "not DP" and cards["a.card.json"]["export"]["n"] == 20
    before = (shared / "a.npz").read_bytes()
    assert _sample(out, "--n", 50, "--out", shared / "a.npz") == 2  # an existing export: refused
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and "--force" in err and "\n" not in err
    assert (shared / "a.npz").read_bytes() == before
    (shared / "c.card.json").write_text("{}")  # a card without its export is not replaced either
    assert _sample(out, "--n", 5, "--out", shared / "c.npz") == 2 and not (shared / "c.npz").exists()
    capsys.readouterr()
    assert _sample(out, "--n", 50, "--out", shared / "a.npz", "--force") == 0
    assert len(np.load(shared / "a.npz")["y"]) == 50 and json.loads((shared / "a.card.json").read_text())["export"]["n"] == 50
    folder = tmp_path / "pngs"
    assert _sample(out, "--n", 20, "--out", folder) == 0 and (folder / "privacy_card.json").exists()
    assert _sample(out, "--n", 10, "--out", folder) == 2  # a previous export: only with --force
    assert _sample(out, "--n", 10, "--out", folder, "--force") == 0
    assert sum(1 for _ in folder.rglob("*.png")) == 10  # replaced, not mixed with the old images
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert _sample(out, "--n", 10, "--out", tmp_path / "mine", "--force") == 2  # not an export: never replaced
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_an_unwritable_out_is_one_line_and_python_is_told_its_keyword(default_run, tmp_path, capsys):
    from dpgen.api import load_release
    from dpgen.errors import ConfigError

    out, _ = default_run
    (tmp_path / "a-file").write_text("x")
    for place in (tmp_path / "a-file" / "synth.npz", tmp_path / "a-file" / "pngs"):
        assert _sample(out, "--n", 10, "--out", place) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: --out {place}: cannot write there") and "\n" not in err and "Traceback" not in err
    release = load_release(out)
    release.export(tmp_path / "s.npz", 10)
    with pytest.raises(ConfigError, match=r"pass force=True to replace") as e:
        release.export(tmp_path / "s.npz", 10)
    assert "--force" not in str(e.value) and str(e.value).startswith("out ")


def test_plain_sklearn_on_the_export_matches_the_evaluator(default_run, tmp_path):
    """The .npz is usable outside dpgen: scikit-learn's LogisticRegression on it scores what the evaluator's
    protocol (dpgen.eval.downstream, sklearn) scores on the same release's samples."""
    from sklearn.linear_model import LogisticRegression

    from dpgen.data.datasets import digits
    from dpgen.eval.downstream import downstream_accuracy

    out, _ = default_run
    test = digits().test
    rel = load_release(out)
    x, y = rel.sample(5000, seed=1)
    expected = downstream_accuracy(x, y, test.x, test.y, classifiers=("logreg",))["acc_logreg"]
    assert _sample(out, "--n", 5000, "--seed", 1, "--out", tmp_path / "synth.npz") == 0
    d = np.load(tmp_path / "synth.npz")
    clf = LogisticRegression(max_iter=5000).fit(d["x"].reshape(len(d["x"]), -1) / 16.0, d["y"])
    acc = float((clf.predict(test.x.flatten(1).numpy()) == test.y.numpy()).mean())
    assert acc > 0.5 and abs(acc - expected) <= 0.03


@pytest.mark.parametrize("page", ["README.md", "docs/guides/export.md"])
def test_the_python_example_runs(page, tmp_path, monkeypatch):
    """The first python block of the README / the export guide, executed as written."""
    text = (ROOT / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{page} has no python example"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], page, "exec"), {})
    assert (tmp_path / "synth.npz").exists() and (tmp_path / "synth.card.json").exists()


GENERATORS = {  # every generator preset, shrunk to a few steps (digits, CPU)
    "dpswd": ["experiment=digits_dpswd", "model.epochs=1"],
    "dpsinkhorn": ["experiment=digits_dpsinkhorn", "model.steps=2", "model.noise_multiplier=null"],
    "dpswflow_r": ["experiment=digits_dpswflow_r", "model.ae_steps=5", "model.epochs=1", "model.n_particles=100"],
    "dpswflow": ["experiment=digits_dpswflow_r", "model=dpswflow", "model.ae_steps=5", "model.steps=2",
                 "model.n_particles=100"],
    # a PCA of the public split instead of the autoencoder: the release carries the map (no public data to sample)
    "dpswgen": ["experiment=mnist_dpswgen", "dataset=digits", "dataset.public_fraction=0.5", "accountant.delta=1e-4",
                "model.autoencoder=null", "model.representation={kind:pca,n_components:8}", "model.steps=2",
                "model.batch_size=32"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GENERATORS))
def test_every_generator_samples_from_its_release_alone(name, tmp_path):
    run(compose_cfg([*GENERATORS[name], *FAST], out_dir=tmp_path / "run"))
    assert (tmp_path / "run" / "privacy_card.json").exists()
    rel = load_release(tmp_path / "run")
    x, y = rel.sample(50, labels=[1, 2], seed=0)
    assert x.shape == (50, 1, 8, 8) and set(y.tolist()) <= {1, 2} and torch.isfinite(x).all()
    assert rel.card["dataset"]["size"]["exact"] is None or rel.card["privacy"]["neighbouring_relation"] == "replace_one"
    assert _sample(tmp_path / "run", "--n", 30, "--out", tmp_path / "s.npz") == 0
    assert np.load(tmp_path / "s.npz")["x"].dtype == np.uint8
    assert math.isfinite(rel.card["privacy"]["epsilon"])


MODELS = {  # the methods that release a model, not a sampler
    "dpsgd": ["experiment=digits_dpsgd", "model.epochs=1", "evaluator=none"],
    "da": ["experiment=digits_shift_dpswd", "model.epochs=1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_model_releases_export_their_weights_with_the_card(name, tmp_path, capsys):
    run(compose_cfg([*MODELS[name], "logger=local", "trainer.progress=false"], out_dir=tmp_path / "run"))
    assert _sample(tmp_path / "run", "--n", 10, "--out", tmp_path / "s.npz") == 2
    assert "not a generator" in capsys.readouterr().err and not (tmp_path / "s.npz").exists()
    assert _sample(tmp_path / "run", "--out", tmp_path / "out" / "model.pt") == 0
    card = json.loads((tmp_path / "out" / "model.card.json").read_text())
    assert card["export"]["format"].startswith("the released weights") and (tmp_path / "out" / "model.pt").exists()


def test_own_image_folder_exports_in_its_declared_format_and_class_names(tmp_path):
    """dataset=image_folder: the export keeps the declared pixel range (uint8 0..255) and the class names."""
    from tests.helpers.fakedata import png_folder

    png_folder(tmp_path / "data", n_per_class=12, classes=("cat", "dog", "owl"))
    run(compose_cfg(["experiment=digits_moments", *FAST, "dataset=image_folder", f"dataset.path={tmp_path / 'data'}",
                     "dataset.image_size=8", "dataset.channels=1", "dataset.classes=[cat,dog,owl]",
                     "dataset.test_fraction=0.25"], out_dir=tmp_path / "run"))
    assert _sample(tmp_path / "run", "--n", 30, "--seed", 0, "--out", tmp_path / "s.npz") == 0
    x = np.load(tmp_path / "s.npz")["x"]
    assert x.dtype == np.uint8 and x.shape == (30, 8, 8) and x.max() > 16
    assert _sample(tmp_path / "run", "--n", 30, "--out", tmp_path / "pngs") == 0
    assert sorted(p.name for p in (tmp_path / "pngs").iterdir() if p.is_dir()) == ["cat", "dog", "owl"]


def test_a_dpimagebench_export_loads_the_way_the_benchmarks_eval_script_reads_it(default_run, tmp_path, capsys):
    """``--format dpimagebench``: ``eval.py`` does ``syn = np.load(<exp>/gen/gen.npz); syn["x"], syn["y"]``, its
    classifiers take ``torch.from_numpy(x).float() * 2 - 1`` (NCHW, x in [0, 1]), its FID asserts 0 <= x <= 1 and
    resizes ``torch.from_numpy(x)`` as (n, C, H, W); ``len(set(y))`` is the number of classes."""
    out, _ = default_run
    gen = tmp_path / "exp" / "gen" / "gen.npz"
    assert _sample(out, "--n", 500, "--seed", 1, "--format", "dpimagebench", "--out", gen) == 0
    syn = np.load(gen)
    syn_data, syn_labels = syn["x"], syn["y"]
    assert syn_data.dtype == np.float32 and syn_data.shape == (500, 1, 8, 8)  # NCHW, one channel
    assert syn_data.min() >= 0.0 and syn_data.max() <= 1.0 and syn_data.max() > 0.5
    assert syn_labels.dtype == np.int64 and len(set(syn_labels.tolist())) == 10
    x = torch.from_numpy(syn_data).float() * 2.0 - 1.0  # the classifiers' input
    assert x.shape[1] == syn_data.shape[1] and -1.0 <= float(x.min()) and float(x.max()) <= 1.0
    assert torch.nn.functional.interpolate(torch.from_numpy(syn_data), size=[32, 32]).shape == (500, 1, 32, 32)
    # the same draw as the pixel-format export, scaled to [0, 1] (digits: 0..16)
    plain = tmp_path / "plain.npz"
    assert _sample(out, "--n", 500, "--seed", 1, "--out", plain) == 0
    assert np.allclose(np.round(syn_data[:, 0] * 16), np.load(plain)["x"])
    card = json.loads((gen.parent / "gen.card.json").read_text())
    assert card["export"]["format"].startswith("npz for DPImageBench's eval.py")
    capsys.readouterr()
    assert _sample(out, "--n", 10, "--format", "dpimagebench", "--out", tmp_path / "folder") == 2
    assert "--format dpimagebench writes a .npz" in capsys.readouterr().err
