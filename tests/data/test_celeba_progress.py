"""Loading CelebA draws one progress bar (both splits), which goes away once the images are read."""

from __future__ import annotations

import rich.progress

from dpgen.data.vision import celeba
from tests.helpers import fakedata


def test_celeba_loads_under_one_transient_progress_bar(tmp_path, monkeypatch):
    root = fakedata.make(tmp_path, ("celeba",))
    bars = []
    real = rich.progress.track

    def track(sequence, **kw):
        bars.append(kw)
        return real(sequence, **kw)

    monkeypatch.setattr(rich.progress, "track", track)
    data = celeba(str(root), image_size=32)
    assert len(bars) == 1 and bars[0]["transient"] and bars[0]["total"] == len(data.private) + len(data.test)
