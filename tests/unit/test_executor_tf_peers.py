"""runtime.executor, TensorFlow: a peer restarted by the AM in a new container (a new address) makes the executor
start its user's process again with the new TF_CONFIG, keeping its own address (a real subprocess against the
in-test AM)."""

import textwrap

from tests.fake_am import FakeAM
from tests.unit.test_executor import exec_env, finish, start
from tests.waits import wait_for

# Appends the peer address its TF_CONFIG names, then waits for a TF_CONFIG naming worker:1's new address: started
# with that one it exits 0; still on the old one after argv[2] seconds it exits 3.
PEER = textwrap.dedent(
    """
    import json, os, sys, time
    peer = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][1]
    with open(sys.argv[1], "a") as f:
        f.write(peer + "\\n")
    if peer.endswith(":2"):
        sys.exit(0)
    time.sleep(float(sys.argv[2]))
    sys.exit(3)
    """
)


def test_a_peer_at_a_new_address_restarts_the_users_process_with_the_new_tf_config(tmp_path):
    starts = tmp_path / "starts.txt"
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    am = FakeAM(["worker:0", "worker:1"], preregistered={"worker:1": "127.0.0.1:1"})
    try:
        proc = start(tmp_path, exec_env(tmp_path, am, "worker", 0, MELON_FRAMEWORK="tensorflow",
                                        MELON_ENTRYPOINT=f"python {script} {starts} 20"))
        wait_for(lambda: starts.exists() and starts.read_text() == "127.0.0.1:1\n", 30, "the first start")
        own = am.addresses["worker:0"]
        with am.lock:  # the AM restarted worker:1 in another container: it registered there
            am.addresses["worker:1"] = "127.0.0.1:2"
        rc, out, err = finish(proc, timeout=60)
        assert rc == 0, err
        assert starts.read_text() == "127.0.0.1:1\n127.0.0.1:2\n", err
        assert "TF_CONFIG's cluster changed (worker:1 127.0.0.1:1 -> 127.0.0.1:2)" in err, err
        # it kept its own address: every registration named the same one
        assert {f"{r['host']}:{r['port']}" for r in am.registrations if r["role"] == "worker"} == {own}
    finally:
        am.close()


def test_a_job_with_parameter_servers_keeps_its_process_when_a_worker_moves(tmp_path):
    """ParameterServerStrategy's chief goes on without a lost worker: its process is not started again."""
    starts = tmp_path / "starts.txt"
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    am = FakeAM(["chief:0", "worker:0", "worker:1", "ps:0"],
                preregistered={"worker:0": "127.0.0.1:3", "worker:1": "127.0.0.1:1", "ps:0": "127.0.0.1:4"})
    try:
        proc = start(tmp_path, exec_env(tmp_path, am, "chief", 0, MELON_FRAMEWORK="tensorflow",
                                        MELON_ENTRYPOINT=f"python {script} {starts} 3"))
        wait_for(lambda: starts.exists() and starts.read_text() == "127.0.0.1:1\n", 30, "the first start")
        with am.lock:
            am.addresses["worker:1"] = "127.0.0.1:2"
        rc, out, err = finish(proc, timeout=60)
        assert rc == 3, err
        assert starts.read_text() == "127.0.0.1:1\n" and "TF_CONFIG's cluster changed" not in err, err
    finally:
        am.close()
