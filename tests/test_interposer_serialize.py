"""The interposer's serialized launches (the doctor's alone window) and what launches show (the marks levers
leave), against the fake CUDA driver (tests/fake_gpu; CPU only). The fake counts a launch as "busy" when it
finds earlier work still running: every launch runs until the next cuCtxSynchronize, except on a capturing
stream, where nothing runs and a sync from a thread not in relaxed capture mode would invalidate the capture."""
import json

from test_interposer import launch

from ccoverlap.control.interposer import LaunchStats


def test_serialized_launches_each_start_on_an_idle_device_from_every_thread(fake, tmp_path):
    stats = tmp_path / "s.json"
    (row,), err = launch(fake, "serialize", 8, 400, CCOVERLAP_STATS=stats)
    assert err == ""
    assert row["before"] == 0 and row["was"] == 1  # the switch returns the previous setting
    assert row["graphs"] == row["launches"] // 4  # a quarter of them CUDA graph replays (cuGraphLaunch)
    assert row["busy"] == 0  # 3,200 launches of 8 threads, graph replays too: none found work still running
    assert row["syncs"] == 2 * row["launches"]  # drained before and after each
    assert row["capture_syncs"] == 0 and row["invalidated"] == 0  # a capturing stream is left alone
    assert row["busy_after"] == 9  # switched off: launches overlap again (the first finds an idle device)
    serial = json.loads(stats.read_text())["serial"]
    assert serial == {"serialized": row["launches"], "serialize_capturing": 1}


def test_hip_launches_are_serialized_too(fake):
    (row,), err = launch(fake, "hip_serialize", 25)
    assert err == "" and row == {"launches": 27, "syncs": 52}  # two per serialized launch (a graph replay's too),
    # none after the switch


def test_without_the_switch_launches_overlap(fake):
    (row,), _ = launch(fake, "serialize", 1, 30, preload=False)
    assert row == {"path": "no_serialize"}  # the symbol is the interposer's: absent without it


def test_comm_launches_show_priority_cluster_grid_and_threads_and_compute_its_green_context(fake, tmp_path):
    stats = tmp_path / "s.json"
    (row,), err = launch(fake, "observe", CCOVERLAP_STATS=stats)
    assert err == ""
    data = json.loads(stats.read_text())
    comm = data["comm_launches"]
    assert comm == {"launches": 4, "priority_unknown": 0, "priority": {"-3": 3, "0": 1}, "cluster": {"1": 1, "4": 3},
                    "grid": [8, 16], "threads": [544, 640]}
    kernels = {k["name"]: k for k in data["kernels"]}
    assert kernels["computeA_func"]["sm_limit"] == 116  # launched on a stream of a green context of 116 SMs
    assert "sm_limit" not in kernels["computeK_cudart_kernel"]  # the whole device
    assert row["stream_ctx_calls"] == 2  # asked once per stream, then cached
    seen = LaunchStats.read([stats])
    assert seen.comm_launches == 4 and seen.comm_priorities == frozenset({-3, 0})
    assert seen.comm_clusters == frozenset({1, 4}) and seen.comm_grid == (8, 16) and seen.comm_threads == (544, 640)
    assert seen.sm_limits == {"computeA_func": 116} and seen.padded == 0 and seen.carveout_set == 0


def test_stats_of_several_processes_merge(fake, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    launch(fake, "observe", CCOVERLAP_STATS=a)
    launch(fake, "paths", CCOVERLAP_PAD_BYTES=60000, CCOVERLAP_STATS=b)
    seen = LaunchStats.read([a, b])
    one, two = json.loads(a.read_text()), json.loads(b.read_text())
    assert seen.comm_launches == one["comm_launches"]["launches"] + two["comm_launches"]["launches"]
    assert seen.padded == two["padded"] > 0
    assert seen.comm_grid == (8, 132)  # the paths' comm launches use grid 132
    assert LaunchStats.read([]) is None


def test_a_serialized_graph_replay_runs_its_registered_twin_until_its_executable_is_destroyed(fake, tmp_path):
    stats = tmp_path / "s.json"
    (row,), err = launch(fake, "twin", 8, 200, CCOVERLAP_STATS=stats)
    assert err == ""
    assert row["registered"] == 0 and row["refused"] == 5  # taken exec or twin, NULL either side, itself
    assert row["plain"] == 1  # not serialized: the graph itself
    assert row["twin_runs"] == 1 and row["graph_runs"] == 1  # serialized: the twin, not the graph again
    assert row["failing_registered"] == 0 and row["failing_rc"] == 0 and row["failing_graph_runs"] == 1  # fallback
    assert row["destroyed"] == 2  # the executable and its twin
    assert row["after_destroy"] == 1  # a later executable at that address replays itself, no stale twin
    assert row["threads_wrong"] == 0  # 8 threads x 200 rounds of register, replay, destroy: each its own twin
    assert row["table"] == 256  # every slot free again, and a full table refuses
    assert json.loads(stats.read_text())["serial"]["serialized_twins"] == 1 + 8 * 200


def test_an_armed_hold_is_placed_once_before_the_next_launch_of_any_thread_and_never_in_a_capture(fake, tmp_path):
    """The doctor's hold (doctor/hold.py): armed as a step ends, placed by whichever of 8 threads launches first (a
    kernel or a graph replay), on the held stream with the round's value, exactly once a round, and on the first
    launch's own stream where that is another (a stream that synchronized with the held one before the wait went in
    would run ahead of the hold); a hold disarmed before any launch is never placed, and none is placed on a
    capturing stream (it would join the graph)."""
    stats = tmp_path / "s.json"
    (row,), err = launch(fake, "hold", 8, 200, CCOVERLAP_STATS=stats)
    assert err == ""
    launch_stream = row.pop("on_launch_stream")  # the rounds a communication thread launched first: not fixed
    assert row == {"rounds": 200, "wrong": 0, "both": 1, "after_disarm": 0, "in_capture": 0, "capturing_launch": 0}
    assert json.loads(stats.read_text())["hold"] == {"holds": 202, "holds_capturing": 1,
                                                     "holds_launch_stream": launch_stream + 1}


def test_without_the_interposer_no_hold_can_be_armed(fake):
    (row,), _ = launch(fake, "hold", 1, 1, preload=False)
    assert row == {"path": "no_hold"}
