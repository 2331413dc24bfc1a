"""benchmarks/regression.py: a benchmark run names every figure that went down beyond noise."""
from benchmarks import regression


def test_drops_beyond_noise_are_named_and_saved_figures_merge(tmp_path, monkeypatch):
    monkeypatch.setattr(regression, "RESULTS", tmp_path)
    before = {"onet": {"hwquant": {"sqnr_db": 35.0, "task": 0.984}}, "rnet": {"hwquant": {"sqnr_db": 28.3}}}
    regression.save("real", before)
    now = {"onet": {"hwquant": {"sqnr_db": 34.4, "task": 0.98}}, "rnet": {"hwquant": {"sqnr_db": 28.1}},
           "new": {"hwquant": {"sqnr_db": 1.0}}}
    found = regression.drops(regression.previous("real"), now)
    assert found == ["onet / hwquant: sqnr_db 34.400 dB, down from 35.000 dB"]  # 0.2 dB and 0.004: noise
    regression.save("real", {"new": now["new"]})
    assert set(regression.previous("real")) == {"onet", "rnet", "new"}
    assert regression.drops(before, {"onet": {"mct": {"sqnr_db": 1.0}}}) == []  # nothing to compare with
