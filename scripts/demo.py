"""`make demo`: the example DAG end to end on the embedded mini cluster; prints where the results are."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_provider_melon import minicluster as mc  # noqa: E402

DAG_ID = "melon_mnist_pipeline"


def main() -> int:
    work_dir = REPO / ".melon-minicluster"
    t0 = time.monotonic()
    details = mc.start(work_dir)
    print(f"[demo] mini cluster up in {time.monotonic() - t0:.1f}s: RM {details.rm_web_url}, "
          f"WebHDFS {details.webhdfs_url}")
    for node in mc.status(work_dir)["nodes"]:
        print(f"[demo]   node {node['id']}: {node['total']}")
    airflow_home = REPO / ".airflow"
    env = mc.airflow_env(details, airflow_home, REPO / "dags", sys.executable)
    airflow = str(Path(sys.executable).parent / "airflow")
    try:
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        log_file = airflow_home / f"{DAG_ID}.log"
        print(f"[demo] airflow dags test {DAG_ID} (log: {log_file})")
        t1 = time.monotonic()
        with open(log_file, "w") as log:
            proc = subprocess.run([airflow, "dags", "test", DAG_ID], env=env, stdout=log, stderr=subprocess.STDOUT)
        text = log_file.read_text(errors="replace")
        results = [json.loads(line.split("MELON_RESULT ", 1)[1]) for line in text.splitlines()
                   if "MELON_RESULT " in line and "{" in line.split("MELON_RESULT ", 1)[1]]
        ok = proc.returncode == 0 and results
        print(f"[demo] DAG {'succeeded' if ok else 'FAILED'} in {time.monotonic() - t1:.0f}s")
        if not ok:
            print("\n".join(text.splitlines()[-60:]))
            return 1
        result = results[-1]
        print(f"[demo] accuracy {result['accuracy']:.3f} (threshold {result['threshold']})")
        print(f"[demo] model published at: {result['published']}")
        print(f"[demo] browse it: {details.webhdfs_url.rsplit('/webhdfs', 1)[0]}/explorer.html — RM UI: "
              f"{details.rm_web_url}/cluster/apps — task logs: {airflow_home}/logs")
        return 0
    finally:
        mc.stop(work_dir)
        print("[demo] mini cluster stopped")


if __name__ == "__main__":
    raise SystemExit(main())
