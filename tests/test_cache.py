from ccoverlap.util import cache


def test_work_is_done_once_per_key_and_survives_an_unwritable_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CCOVERLAP_CACHE", str(tmp_path / "c"))
    calls = []

    def make(value):
        calls.append(value)
        return value

    assert cache.cached("cubin", "k1", lambda: make(b"one")) == b"one"
    assert cache.cached("cubin", "k1", lambda: make(b"other")) == b"one"  # from disk
    assert cache.cached("cubin", "k2", lambda: make(b"two")) == b"two"
    assert calls == [b"one", b"two"]
    assert not list((tmp_path / "c").glob("*.tmp"))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CCOVERLAP_CACHE", str(blocker / "c"))
    assert cache.cached("cubin", "k1", lambda: make(b"fresh")) == b"fresh"
