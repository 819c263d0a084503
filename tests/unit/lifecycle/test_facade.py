"""A lifecycle package's face refuses assignments of names its submodules define: setting
the copy would silently do nothing for the code that uses the original."""

import pickle

import pytest

from seglake.lifecycle import copyjob, flush, gc, snapshot


@pytest.mark.parametrize("face,name,home", [
    (copyjob, "PARALLEL_MIN_FILES", "seglake.lifecycle.copyjob.running"),
    (flush, "RELEASE_BATCH", "seglake.lifecycle.flush.flusher"),
    (gc, "wal_truncatable", "seglake.lifecycle.gc.walview"),
    (snapshot, "read_segments", "seglake.lifecycle.snapshot.read"),
])
def test_setting_a_re_export_is_refused_naming_its_home(face, name, home, monkeypatch):
    with pytest.raises(AttributeError, match=f"{home}.{name}"):
        setattr(face, name, 0)
    with pytest.raises(AttributeError):
        monkeypatch.setattr(face, name, 0)


def test_a_face_still_takes_its_own_attributes_and_pickles_by_name():
    gc.some_note = 1   # not a name of a submodule: allowed
    del gc.some_note
    assert pickle.loads(pickle.dumps(gc)) is gc
