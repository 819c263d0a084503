"""`make milvus-up` printed the Milvus's address, etcd and bucket but not how to reach its
bucket: `seglake milvus backup|restore` read the keys from SEGLAKE_MILVUS_S3_* only, and
the keys were only in the 0600 stack.json. The stack now writes `.dev/milvus/env` (0600)
to source; every variable in it is one the config knows."""

from __future__ import annotations

import os
import stat
import subprocess
from types import SimpleNamespace

from seglake.config import Settings
from seglake.dev.milvus import MilvusStack


def test_env_file_holds_what_the_cli_reads_and_only_its_owner_may_read_it(tmp_path):
    stack = MilvusStack(tmp_path / "milvus", "127.0.0.1:2379")
    weed = SimpleNamespace(endpoint="http://127.0.0.1:18333", access_key="seglake-test", secret_key="s'e cr$et")
    milvus = SimpleNamespace(etcd_endpoint="127.0.0.1:2379", etcd_root="seglake-dev-milvus", address="127.0.0.1:19530")
    path = stack.write_env(weed, milvus)
    assert path == tmp_path / "milvus" / "env" and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    out = subprocess.run(["bash", "-c", f"set -e; source {path}; env -0"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"]}, check=True).stdout
    env = dict(kv.split("=", 1) for kv in out.split("\0") if kv.startswith("SEGLAKE_"))
    assert env == {"SEGLAKE_MILVUS_S3_ENDPOINT": "http://127.0.0.1:18333",
                   "SEGLAKE_MILVUS_S3_ACCESS_KEY": "seglake-test", "SEGLAKE_MILVUS_S3_SECRET_KEY": "s'e cr$et"}
    s = Settings.load(env=env)   # every variable known: an unknown SEGLAKE_* would be refused
    assert s.milvus_s3_endpoint == "http://127.0.0.1:18333" and s.milvus_s3_secret_key == "s'e cr$et"
    text = path.read_text()
    assert "--milvus-etcd 127.0.0.1:2379 --milvus-root seglake-dev-milvus" in text and "--address 127.0.0.1:19530" in text
