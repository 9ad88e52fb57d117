"""Experiment presets: list them, dump every preset's fully composed config, find lines that restate a default.

A preset (``configs/experiment/*.yaml``) should patch only what differs from the composition it
builds on (``train.yaml``'s defaults + the groups its own ``defaults:`` list selects).  A leaf
key is *redundant* when composing the preset without that key gives the same config.

    dpgen presets [list] [--method M] [--dataset D]  # every preset: dataset, method, guarantee, one line
    dpgen presets dump OUT_DIR          # one YAML per preset: the composed config (hydra node included)
    dpgen presets redundant [PRESET..]  # the redundant leaf keys, with line numbers; exit 1 if any
    dpgen presets stats                 # preset lines, and the fraction that restate a default
    dpgen presets fix [PRESET..]        # delete the redundant keys (the composed config must not change)
    dpgen presets check                 # fast: keys equal to what the file's defaults give; exit 1 if any
    dpgen presets status                # what has been run of each preset here, with measured times (markdown)

Compare two dumps with ``diff -r BEFORE AFTER`` (nothing is ignored).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from .config import compose, require_checkout
from .paths import CONFIGS

# fixed paths so that the dump does not depend on the environment
FIXED = ["paths.output_dir=unused-output", "paths.data_root=unused-data"]  # composed only, never created


# keys a preset states even when they equal the default: its own name (the preset's identity)
KEEP = {"experiment_name"}


def presets(configs: Path = CONFIGS) -> list[str]:
    return sorted(p.stem for p in (configs / "experiment").glob("*.yaml"))


def composed(preset: str, configs: Path = CONFIGS, hydra_node: bool = False) -> str:
    """The fully composed config of ``experiment=<preset>`` as YAML (interpolations unresolved).

    With ``hydra_node`` the ``hydra`` node is included, except ``hydra.runtime.config_sources``
    (it names the config directory's path, which differs between copies of ``configs``).
    """
    cfg = compose([f"experiment={preset}", *FIXED], config_dir=configs, hydra_node=hydra_node)
    if hydra_node and configs != CONFIGS:
        cfg.hydra.runtime.config_sources = []
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(cfg)


@dataclass
class Leaf:
    """A leaf key of a preset file: its dotted path and the 0-based line span [first, last] it occupies."""

    path: str
    first: int
    last: int
    keys: tuple = ()


def leaves(text: str) -> list[Leaf]:
    """Every leaf key outside ``defaults:`` (a scalar or a list value counts as one leaf)."""
    root = yaml.compose(text)
    out: list[Leaf] = []
    if root is None or not isinstance(root, yaml.MappingNode):
        return out

    def walk(node: yaml.MappingNode, prefix: str, keys: tuple) -> None:
        for k, v in node.value:
            path = f"{prefix}{k.value}"
            if path == "defaults":
                continue
            if isinstance(v, yaml.MappingNode) and v.value and v.flow_style is not True:
                walk(v, path + ".", (*keys, k.value))
            else:
                end = v.end_mark.line if v.end_mark.column > 0 else v.end_mark.line - 1
                out.append(Leaf(path, k.start_mark.line, max(end, k.start_mark.line), (*keys, k.value)))

    walk(root, "", ())
    return out


def drop_lines(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the given line spans, and without mapping keys left with no children."""
    lines = text.splitlines(keepends=True)
    gone = {i for a, b in spans for i in range(a, b + 1)}
    kept = [ln for i, ln in enumerate(lines) if i not in gone]
    # remove parents that became empty (a `key:` line followed by nothing more indented)
    changed = True
    while changed:
        changed = False
        for i, ln in enumerate(kept):
            s = ln.split("#", 1)[0].rstrip()
            if not s.endswith(":") or s.lstrip().startswith("-"):
                continue
            ind = len(ln) - len(ln.lstrip())
            nxt = next((x for x in kept[i + 1:] if x.split("#", 1)[0].strip()), None)
            if nxt is None or len(nxt) - len(nxt.lstrip()) <= ind:
                del kept[i]
                changed = True
                break
    return "".join(kept)


def _with_preset(configs: Path, preset: str, text: str, tmp: Path) -> Path:
    """A copy of ``configs`` whose ``experiment/<preset>.yaml`` is ``text``."""
    import shutil

    dst = tmp / "configs"
    if not dst.exists():
        shutil.copytree(configs, dst)
    (dst / "experiment" / f"{preset}.yaml").write_text(text)
    return dst


def redundant(preset: str, configs: Path = CONFIGS) -> list[Leaf]:
    """The leaf keys of ``preset`` whose removal leaves the composed config unchanged."""
    src = (configs / "experiment" / f"{preset}.yaml").read_text()
    out = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ref = composed(preset, _with_preset(configs, preset, src, tmp), hydra_node=True)
        for leaf in leaves(src):
            cdir = _with_preset(configs, preset, drop_lines(src, [(leaf.first, leaf.last)]), tmp)
            if composed(preset, cdir, hydra_node=True) == ref:
                out.append(leaf)
        _with_preset(configs, preset, src, tmp)
    return out


def _body_removed(text: str) -> str:
    """``text`` with only its header comments, ``defaults:`` list and ``experiment_name``."""
    keep = {leaf.path for leaf in leaves(text)} - {"experiment_name"}
    return drop_lines(text, [(x.first, x.last) for x in leaves(text) if x.path in keep])


def _raw(cfg, keys: tuple):
    """The value at ``keys`` (interpolations unresolved), or ``_ABSENT``."""
    from omegaconf import OmegaConf

    node = cfg
    for k in keys:
        if not OmegaConf.is_dict(node) or node._is_none() or k not in node:
            return _ABSENT
        node = node._get_node(k)
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node._value()


_ABSENT = object()


def restatements(configs: Path = CONFIGS) -> list[tuple[str, int, str]]:
    """Fast check (one composition per preset and shared file): ``(file, line, key)`` for every leaf key
    of a preset, or of a shared ``configs/da_dataset`` file, whose value equals what the composition
    gives without the file's own keys (the defaults its ``defaults:`` list pulls in)."""
    out = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        import shutil

        work = tmp / "configs"
        shutil.copytree(configs, work)

        def compose_raw(preset):
            return compose([f"experiment={preset}", *FIXED], config_dir=work, hydra_node=True)

        users: dict[str, list[str]] = {}
        for p in presets(configs):
            path = work / "experiment" / f"{p}.yaml"
            src = path.read_text()
            for line in src.splitlines():
                if line.strip().startswith("- /"):
                    users.setdefault(line.strip()[3:].split("@")[0].strip(), []).append(p)
            path.write_text(_body_removed(src))
            base = compose_raw(p)
            path.write_text(src)
            rel = f"configs/experiment/{p}.yaml"
            out += [(rel, x.first + 1, x.path) for x in leaves(src)
                    if x.path not in KEEP and _raw(base, x.keys) == _value(src, x.keys)]
        for shared, ps in sorted(users.items()):
            path = work / f"{shared}.yaml"
            src = path.read_text()
            path.write_text(_body_removed(src))
            bases = {p: compose_raw(p) for p in ps}
            path.write_text(src)
            own = {p: {x.path for x in leaves((work / "experiment" / f"{p}.yaml").read_text())} for p in ps}
            for x in leaves(src):
                val = _value(src, x.keys)
                if all(x.path in own[p] or _raw(bases[p], x.keys) == val for p in ps):
                    out.append((f"configs/{shared}.yaml", x.first + 1, x.path))
    return out


def _value(text: str, keys: tuple):
    node = yaml.safe_load(text)
    for k in keys:
        node = node[k]
    return node


def content_lines(text: str) -> list[int]:
    """0-based indices of non-blank, non-comment lines (the lines a preset 'says')."""
    return [i for i, ln in enumerate(text.splitlines()) if ln.strip() and not ln.lstrip().startswith("#")]


def stats(configs: Path = CONFIGS) -> tuple[int, int, int]:
    """(all lines, content lines, content lines that restate a default) over every preset."""
    total = content = restating = 0
    for p in presets(configs):
        text = (configs / "experiment" / f"{p}.yaml").read_text()
        total += len(text.splitlines())
        content += len(content_lines(text))
        restating += sum(r.last - r.first + 1 for r in redundant(p, configs) if r.path not in KEEP)
    return total, content, restating


# ---------------------------------------------------------------------------- list
@dataclass
class PresetInfo:
    """What ``dpgen presets`` shows of one preset: read from its YAML and the presets it builds on."""

    name: str
    dataset: str
    method: str
    guarantee: str  # the label the run prints (dpgen.privacy.guarantee.LABELS), from the composed config
    description: str


@functools.cache
def _load(path: Path, stamp: tuple[int, int]) -> dict:
    """A config file's YAML (libyaml's parser when installed); cached per (path, mtime and size)."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def _yaml(path: Path) -> dict:
    st = path.stat()
    return _load(path, (st.st_mtime_ns, st.st_size))


def _own(preset: str, configs: Path) -> dict:
    return _yaml(configs / "experiment" / f"{preset}.yaml")


def _choice(preset: str, group: str, configs: Path, default: str) -> str:
    """The ``group`` choice of a preset: its own ``override /group``, else that of a preset or
    ``/da_dataset`` file it builds on, else ``default`` (train.yaml's)."""
    for entry in _own(preset, configs).get("defaults") or []:
        if isinstance(entry, dict):
            for key, value in entry.items():
                if key.replace("override ", "").strip("/") == group:
                    return str(value)
    for entry in _own(preset, configs).get("defaults") or []:
        if isinstance(entry, str) and entry.startswith("/da_dataset/") and group == "dataset":
            da = _yaml(configs / "da_dataset" / f"{entry.rsplit('/', 1)[1]}.yaml")
            for e in da.get("defaults") or []:
                if isinstance(e, dict) and any(k.replace("override ", "").strip("/") == "dataset" for k in e):
                    return str(next(iter(e.values())))
        elif isinstance(entry, str) and (configs / "experiment" / f"{entry}.yaml").is_file():
            return _choice(entry, group, configs, default)
    return default


def _description(preset: str, configs: Path, width: int = 90) -> str:
    """The preset's leading comment, shortened to one line."""
    text = []
    for line in (configs / "experiment" / f"{preset}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        if "@package" not in line:
            text.append(line.lstrip("# ").strip())
    return textwrap.shorten(" ".join(text), width=width, placeholder=" …")


def config_guarantee(cfg) -> str:
    """The guarantee label a run of the composed config ``cfg`` prints (the ledger's, as results.json groups it):
    paper convention, non-private, data-dependent reports, a CLT bound anywhere in the model, else rigorous."""
    from .privacy.guarantee import CLT, DATA_DEPENDENT, NON_PRIVATE, PAPER_CONVENTION, RIGOROUS

    if not isinstance(cfg, dict):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(cfg, resolve=False)
    node = cfg
    model, accountant = node.get("model") or {}, node.get("accountant") or {}
    if (node.get("privacy") or {}).get("convention") == "paper":
        return PAPER_CONVENTION
    if model.get("private") is False or ("epsilon" in accountant and accountant["epsilon"] is None):
        return NON_PRIVATE
    if accountant.get("data_dependent_reports"):
        return DATA_DEPENDENT

    def bounds(x):
        if isinstance(x, dict):
            for k, v in x.items():
                yield from ([v] if k == "bound" else []) + list(bounds(v))
        elif isinstance(x, list):
            for v in x:
                yield from bounds(v)
    return CLT if "clt" in bounds(model) else RIGOROUS


def preset_info(preset: str, configs: Path = CONFIGS) -> PresetInfo:
    merged: dict = {}
    chain, seen = [preset], set()
    while chain:  # the presets it builds on, nearest last so its own keys win
        p = chain.pop()
        if p in seen:
            continue
        seen.add(p)
        own = _own(p, configs)
        for entry in own.get("defaults") or []:
            if isinstance(entry, str) and (configs / "experiment" / f"{entry}.yaml").is_file():
                chain.append(entry)
        merged = {**own, **merged}
    model = _choice(preset, "model", configs, "dp_class_gaussian")
    accountant = _choice(preset, "accountant", configs, "calibrated")
    group = lambda name, choice: _yaml(configs / name / f"{choice}.yaml")  # noqa: E731
    cfg = {"model": _deep_merge(group("model", model), merged.get("model") or {}),  # what the composition gives
           "accountant": _deep_merge(group("accountant", accountant), merged.get("accountant") or {}),
           "privacy": merged.get("privacy") or {}}
    return PresetInfo(preset, _choice(preset, "dataset", configs, "digits"), model, config_guarantee(cfg),
                      _description(preset, configs))


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def list_presets(method: str | None = None, dataset: str | None = None, configs: Path = CONFIGS) -> list[PresetInfo]:
    """Every preset whose method / dataset contains the given text (case-insensitive)."""
    rows = [preset_info(p, configs) for p in presets(configs)]
    if method:
        rows = [r for r in rows if method.lower() in r.method.lower() or method.lower() in r.name.lower()]
    if dataset:
        rows = [r for r in rows if dataset.lower() in r.dataset.lower()]
    return rows


def no_match(method: str | None, dataset: str | None, rows: list[PresetInfo]) -> str:
    """Why a filter matched nothing, with the values it could take and a did-you-mean."""
    from .errors import suggestion

    parts = []
    for option, wanted, values in (("--method", method, sorted({r.method for r in rows})),
                                   ("--dataset", dataset, sorted({r.dataset for r in rows}))):
        if wanted and not any(wanted.lower() in v.lower() for v in values):
            hint = suggestion(wanted, values) or suggestion(wanted, [r.name for r in rows])
            parts.append(f"{option} {wanted} matches no preset;{hint} {option.lstrip('-')}s: {', '.join(values)}")
    return "; ".join(parts) or f"no preset has both --method {method} and --dataset {dataset}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dpgen presets", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    ls = sub.add_parser("list", help="every preset with its dataset, method, guarantee and one line (the default)")
    for parser in (ap, ls):
        parser.add_argument("--method", help="only presets whose method (model config) or name contains this")
        parser.add_argument("--dataset", help="only presets whose dataset contains this")
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    r = sub.add_parser("redundant")
    r.add_argument("presets", nargs="*")
    sub.add_parser("stats")
    sub.add_parser("check")
    st = sub.add_parser("status", help="what has been run of each preset here: smoke, shortened, full (markdown table)")
    st.add_argument("--write", action="store_true", help="also write it between the markers of docs/guides/presets.md")
    f = sub.add_parser("fix")
    f.add_argument("presets", nargs="*")
    a = ap.parse_args(argv)
    if a.cmd in ("status", "fix"):
        require_checkout(f"dpgen presets {a.cmd}")  # docs/guides/preset_runs.yaml; the preset files themselves
    if a.cmd in (None, "list"):
        rows = list_presets(a.method, a.dataset)
        if not rows:
            print(f"error: {no_match(a.method, a.dataset, list_presets())}", file=sys.stderr)
            return 2
        width = max(len(r.name) for r in rows)
        label = max(len(r.guarantee) for r in rows)
        print(f"{'preset':<{width}}  {'dataset':<14} {'method':<18} {'guarantee':<{label}}  description")
        for r in rows:
            print(f"{r.name:<{width}}  {r.dataset:<14} {r.method:<18} {r.guarantee:<{label}}  {r.description}")
        return 0
    if a.cmd == "status":
        from . import preset_runs

        table = preset_runs.markdown(presets(), preset_runs.load())
        print(table, end="")
        if a.write:
            from .reproduce.markers import write_between

            write_between(preset_runs.GUIDE, preset_runs.BEGIN, preset_runs.END, table.rstrip("\n"), append=False)
        return 0
    if a.cmd == "dump":
        a.out.mkdir(parents=True, exist_ok=True)
        for p in presets():
            (a.out / f"{p}.yaml").write_text(composed(p, hydra_node=True))
        print(f"{len(presets())} presets -> {a.out}")
        return 0
    if a.cmd == "redundant":
        bad = 0
        for p in a.presets or presets():
            for leaf in redundant(p):
                if leaf.path in KEEP:
                    continue
                bad += 1
                print(f"configs/experiment/{p}.yaml:{leaf.first + 1}: {leaf.path} restates the composed default")
        return 1 if bad else 0
    if a.cmd == "check":
        found = restatements()
        for f, line, key in found:
            print(f"{f}:{line}: {key} restates the value the composition has without it")
        return 1 if found else 0
    if a.cmd == "fix":
        for p in a.presets or presets():
            path = CONFIGS / "experiment" / f"{p}.yaml"
            src, ref = path.read_text(), composed(p, hydra_node=True)
            spans = [(x.first, x.last) for x in redundant(p) if x.path not in KEEP]
            if not spans:
                continue
            path.write_text(drop_lines(src, spans))
            if composed(p, hydra_node=True) != ref:
                path.write_text(src)
                print(f"{p}: removing {len(spans)} keys changed the composition; left as is")
            else:
                print(f"{p}: removed {len(spans)} keys")
        return 0
    total, content, restating = stats()
    print(f"preset lines {total}, content lines {content}, restating a default {restating} "
          f"({100 * restating / max(content, 1):.1f} % of content lines, {100 * restating / max(total, 1):.1f} % of all lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
