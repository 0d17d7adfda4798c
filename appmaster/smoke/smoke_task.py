"""Task used by appmaster/smoke.sh: checks the secret, registers with the AM (gang), heartbeats, exits SMOKE_EXIT."""
import json
import os
import sys
import time
import urllib.error
import urllib.request

def am_secret():
    """The AM's secret from this container's token file (Hadoop credentials, Writable or protobuf format): the
    bytes after the alias "melon.am.secret", behind their length (protobuf: a field tag first)."""
    data = open(os.environ["HADOOP_TOKEN_FILE_LOCATION"], "rb").read()
    at = data.index(b"melon.am.secret") + len(b"melon.am.secret")
    at += data[at] == 0x1A  # protobuf: the secret field's tag
    return data[at + 1 : at + 1 + data[at]].decode()


am, secret = os.environ["MELON_AM_URL"], am_secret()
role, index = os.environ["MELON_ROLE"], int(os.environ["MELON_INDEX"])


def post(path, body, with_secret=True):
    req = urllib.request.Request(am + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if with_secret:
        req.add_header("X-Melon-Secret", secret)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None


code, _ = post("/heartbeat", {"role": role, "index": index}, with_secret=False)
if code != 403:
    print(f"smoke: expected 403 without secret, got {code}", file=sys.stderr)
    sys.exit(3)
deadline = time.time() + 120
while True:
    code, reply = post("/register", {"role": role, "index": index, "host": "127.0.0.1", "port": 40000 + index,
                                     "gpu": None, "gpu_memory_mb": 0, "pid": os.getpid()})
    if code == 200:
        break
    if time.time() > deadline:
        sys.exit(4)
    time.sleep(0.5)
print("smoke: cluster", json.dumps(reply["cluster"]), "attempt", os.environ["MELON_TASK_ATTEMPT"])
post("/heartbeat", {"role": role, "index": index, "step": 1, "loss": 0.5, "message": "smoke"})
exit_code = int(os.environ.get("SMOKE_EXIT", "0"))
if exit_code:
    print(f"smoke: {role}:{index} failing on purpose with {exit_code}", file=sys.stderr)
sys.exit(exit_code)
