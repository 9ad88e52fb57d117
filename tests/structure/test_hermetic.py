"""The test session never writes into the user's home: caches live in pytest's tmp folder."""

from __future__ import annotations

import os
from pathlib import Path

from dpgen.eval.fid import default_cache_dir
from tests.conftest import HERMETIC_DIRS


def test_caches_point_into_the_session_tmp_folder(hermetic_caches):
    home_cache = Path.home() / ".cache"
    for var in HERMETIC_DIRS:
        p = Path(os.environ[var])
        assert p.is_dir() and Path(hermetic_caches) in p.parents and home_cache not in p.parents
    assert default_cache_dir() == Path(os.environ["DPGEN_CACHE_DIR"])
