"""Operating commands: config show, the local stack, the scale-out cluster."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from seglake.config import Settings
from seglake.errors import SeglakeError, ValidationError
from seglake.cli.output import emit


def cmd_config_show(args, s: Settings) -> int:
    if args.airflow:
        return _config_show_airflow(args)
    pub = s.to_public()
    emit(args, pub, [{"key": k, "value": v} for k, v in pub.items()], ["key", "value"])
    return 0


def _config_show_airflow(args) -> int:
    """The settings a DAG run would use, each key with its layer. Resolved by the Airflow
    side (plugins/seglake_airflow/config_show.py), run as a program: the engine never
    imports the plugin. Its output and exit code are passed through."""
    import importlib.util
    import subprocess

    from seglake.config import _REPO

    if importlib.util.find_spec("airflow") is None:
        raise ValidationError("--airflow needs Apache Airflow importable (run it with the project's venv)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_REPO / "plugins"), str(_REPO / "include")]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", "seglake_airflow.config_show"] + (["--json"] if args.json else []),
                          env=env).returncode


def _stack_etcd(s: Settings):
    from seglake.config import DEFAULT_HOME
    from seglake.dev.devstack import EtcdServer

    host, _, port = s.etcd_endpoint.rpartition(":")
    if host not in ("127.0.0.1", "localhost") or "," in s.etcd_endpoint:
        raise ValidationError(f"the local stack runs etcd on loopback; etcd_endpoint is {s.etcd_endpoint!r}")
    return EtcdServer(state_dir=Path(DEFAULT_HOME) / "etcd", ports={"client": int(port), "peer": int(port) + 1})


def cmd_stack(args, s: Settings) -> int:
    from seglake.dev.devstack import port_open

    etcd = _stack_etcd(s)
    pid = etcd.running_pid()
    if args.action == "up":
        if pid:
            print(f"etcd already running: pid {pid}, {etcd.endpoint}")
        elif port_open(etcd.ports["client"]):
            raise SeglakeError(f"port {etcd.ports['client']} is taken by another process; set SEGLAKE_ETCD_ENDPOINT")
        else:
            etcd.start(detach=True)
            print(f"etcd started: pid {etcd.proc.pid}, {etcd.endpoint}, data {etcd.state_dir}, log {etcd.log_file}")
        print(f"store: {s.store_uri}")
    elif args.action == "down":
        if pid:
            etcd.stop()
            print(f"etcd stopped (pid {pid})")
        else:
            print("etcd not running")
    else:
        ok = bool(pid) and etcd.healthy()
        print(f"etcd: {'up' if ok else 'down'}" + (f" pid {pid} {etcd.endpoint}" if pid else ""))
        print(f"store: {s.store_uri}")
        return 0 if ok else 3
    return 0


def cmd_cluster(args, s: Settings) -> int:
    """The scale-out profile (seglake.dev.cluster): 3 etcd members, SeaweedFS, Spark standalone."""
    from seglake.dev.cluster import ClusterError, ClusterStack
    from seglake.config import DEFAULT_HOME

    base = Path(args.base) if args.base else Path(DEFAULT_HOME) / "cluster"
    try:
        if args.action == "up":
            stack = ClusterStack(base=base, workers=args.workers)
            outcome = stack.up(detach=True, timeout=args.timeout)
            _print_cluster(stack.status(), args.json, "already running" if outcome == "running" else "started")
            return 0
        if args.action == "down":
            stopped = ClusterStack(base=base).down()
            print("stopped: " + ", ".join(stopped) if stopped else "cluster not running: nothing to stop")
            return 0
        stack = ClusterStack.attach(base)
        if args.action == "env":
            print(stack.env_file)
            return 0
        if args.action == "apps":
            apps = stack.spark_apps()
            if args.since:
                apps = [a for a in apps if a["id"] > args.since]
            rows = [{"app": a["id"], "name": a["name"], "state": a["state"],
                     "duration": f"{(a['duration_ms'] or 0) / 1000:.1f}s",
                     "executors": sorted(f"{e['executor']}@{e['host']}" for e in a["executors"])} for a in apps]
            emit(args, apps, rows, ["app", "name", "state", "duration", "executors"])
            return 0
        st = stack.status()
        _print_cluster(st, args.json, "status")
        ok = (all(m["healthy"] for m in st["etcd"]["members"]) and st["s3"]["healthy"] and st["spark"]["alive"]
              and all(w["alive"] for w in st["spark"]["workers"]))
        return 0 if ok else 3
    except ClusterError as e:
        if args.action == "status":
            print(f"cluster: down ({e})")
            return 3
        raise


def _print_cluster(st: dict, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(st, indent=2))
        return
    print(f"cluster {what} ({st['base']}):")
    for m in st["etcd"]["members"]:
        print(f"  etcd {m['member']:<3} {m['endpoint']:<22} pid {m['pid'] or '-':<8} "
              f"{'up' if m['healthy'] else 'DOWN'}{'  leader' if m['leader'] else ''}")
    s3 = st["s3"]
    print(f"  s3       {s3['endpoint']:<22} pid {s3['pid'] or '-':<8} {'up' if s3['healthy'] else 'DOWN'}"
          f"  store {s3['store_uri']}")
    sp = st["spark"]
    print(f"  spark    {sp['master']:<22} pid {sp['pid'] or '-':<8} {'up' if sp['alive'] else 'DOWN'}"
          f"  web UI {sp['webui']}")
    for w in sp["workers"]:
        print(f"  worker   {w['host']:<22} pid {w['pid'] or '-':<8} {'up' if w['alive'] else 'DOWN'}"
              f"  {w['cores']} core, {w['memory']}")
    if st.get("startup_s", {}).get("total") is not None and what == "started":
        print(f"  started in {st['startup_s']['total']:.1f} s")
    print(f"  profile: set -a; . {st['env_file']}; set +a   (Airflow connections + SEGLAKE_* for the CLI)")
