"""ConfGuard: answers a seglake DAG trigger whose conf breaks the DAG's contract with
HTTP 400 and one plain sentence per problem, before Airflow creates the run (a root
middleware of the API server, installed by the `seglake_ui` plugin).

Airflow 3.3 validates a trigger's conf in `trigger_dag_run` -> `dag.create_dagrun` ->
`params.deep_merge(conf).validate()`: each Param on its own through jsonschema, and a
failure becomes HTTP 400 with `str(jsonschema.ValidationError)` -- the message plus the
schema and the instance ("Failed validating 'pattern' in schema: ... (?!\\n)"). It also
accepts keys it does not know (no strict mode) and cannot compare two params (a GC
tolerance below the floor unless `force`). So the REST trigger route (`POST
.../api/v2/dags/{dag_id}/dagRuns`, which the UI's trigger form uses too) is checked
here first against the whole contract (seglake.contract.check_conf, and for gc the floor
from the settings the runs resolve: environment + the `seglake_config` Variable): an
unknown key names the closest valid one; a bad value names the key, the value and what
is allowed. A conf that passes goes on to Airflow's own Param validation unchanged, and
the DAG's first task `check_conf` stays the backstop for runs made any other way. A
backfill of gc (`POST .../api/v2/backfills`, and its dry run: the UI's backfill form) is
refused here too (GC has no past intervals to replay), before any run exists. Only
a caller Airflow would let trigger the DAG gets our 400; anyone else gets Airflow's
401/403. Pure ASGI: importing it costs nothing in processes that only load plugins.

Issue 27 (the run's state is the lifecycle's outcome, decided by its run_note teardown):
marking a seglake run success by hand, or its run_note success or skipped, or any task with
its downstream (PATCH on the run, a task, a task group, the bulk task and run doors) is refused with a 400 before
any change; a clear of some of a seglake run's tasks gets its run_note added, so it
decides again.
"""

from __future__ import annotations

import asyncio
import json
import re

TRIGGER_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?\Z")
BACKFILL_PATH = re.compile(r"/api/v2/backfills(/dry_run)?/?\Z")   # the UI's backfill form posts here
NO_BACKFILL = {"gc"}   # seglake DAGs a backfill is refused for (seglake.contract.refuse_gc_backfill)
# marking a run, or its deciding task, success by hand (the run_note decides the state: issue 27)
RUN_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/?\Z")
TASK_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskInstances/(?P<task_id>[^/]+)"
                       r"(?:/-?\d+)?(?:/dry_run)?/?\Z")
GROUP_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskGroupInstances/"
                        r"(?P<task_id>[^/]+)(?:/dry_run)?/?\Z")   # a group marked: only its downstream matters here
BULK_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskInstances/?\Z")
RUNS_BULK_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?\Z")   # PATCH: the bulk run update
NOTE_TASK = "run_note"
CLEAR_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/clearTaskInstances/?\Z")


def with_run_note(dag_id: str, doc):
    """A clear of some of a seglake run's tasks, with its run_note added (None: unchanged).
    Airflow clears a teardown only with its setups' scope or with the downstream: clearing
    the failed task alone left the failed run_note, and the re-run that did the work still
    ended failed under the old note (or a run_note that had passed stayed green whatever the
    re-run did). Cleared with it, the run_note decides again from what the run did."""
    if not _seglake_dag(dag_id) or not isinstance(doc, dict) or not isinstance(doc.get("task_ids"), list):
        return None
    ids = doc["task_ids"]
    if not ids or any((t[0] if isinstance(t, list) and t else t) == NOTE_TASK for t in ids):
        return None
    return {**doc, "task_ids": [*ids, NOTE_TASK]}
MAX_BODY = 4 << 20


def marked_success_error(dag_id: str, doc, query: str, task_id: str | None = None) -> str | None:
    """The 400 for marking a seglake run success by hand: the whole run (every unfinished
    task becomes success, the run_note included, so the outcome is never read), the
    run_note itself, or any task with its downstream (the run_note is downstream of every
    task). None for anything else (marking failed, a note, another DAG, another task)."""
    found = marked_success(dag_id, doc, query, task_id)
    return found[1] if found else None


def marked_success(dag_id: str, doc, query: str, task_id: str | None = None) -> tuple[str, str] | None:
    """(the seglake DAG whose run would be marked, the 400) or None. `task_id` "*bulk*":
    the bulk task door (PATCH .../dagRuns/{run}/taskInstances), "*runs*": the bulk run door
    (PATCH .../dags/{id}/dagRuns); each entity of those may name its own dag_id (and
    dag_run_id), which Airflow takes over the path's (a wildcard "~" or another DAG's)."""
    from urllib.parse import parse_qs

    if not isinstance(doc, dict):
        return None
    if task_id in ("*bulk*", "*runs*"):   # {"actions": [{"action": "update", "entities": [...]}]}
        for action in doc.get("actions") or []:
            if not isinstance(action, dict) or action.get("action") != "update":
                continue
            mask = action.get("update_mask")
            mask = "update_mask=" + ",".join(map(str, mask)) if isinstance(mask, list) and mask else ""
            for entity in action.get("entities") or []:
                if not isinstance(entity, dict):
                    continue
                owner = entity.get("dag_id") if isinstance(entity.get("dag_id"), str) and entity["dag_id"] else dag_id
                if task_id == "*runs*":
                    said = marked_success(owner, entity, mask, None)
                elif isinstance(entity.get("task_id"), str):
                    said = marked_success(owner, entity, mask, entity["task_id"])
                else:
                    said = None
                if said:
                    return said
        return None
    if not _seglake_dag(dag_id):
        return None
    why = ("its state is the lifecycle's outcome, which its run_note task reads from what the run did "
           "(a run marked success skips that, and would show green work that never ran); to stop it mark it "
           "failed; to decide again clear the tasks that did not run")
    if task_id is None:
        mask = [m for v in parse_qs(query).get("update_mask", []) for m in v.split(",")]
        if str(doc.get("state", "")).lower() == "success" and (not mask or "state" in mask):
            return dag_id, f"{dag_id}: a run is not marked success by hand: {why}"
        return None
    state = str(doc.get("new_state", "")).lower()
    if state not in ("success", "skipped"):   # a run whose only leaf is success or skipped is green
        return None
    if task_id == NOTE_TASK or doc.get("include_downstream"):
        what = "its run_note task" if task_id == NOTE_TASK else f"task {task_id} with its downstream (the run_note)"
        return dag_id, f"{dag_id}: {what} is not marked {state} by hand: the run_note decides the run's state: {why}"
    return None


def deleted_note(dag_id: str, doc, task_id: str | None) -> tuple[str, str] | None:
    """(the seglake DAG, the 400) for deleting a run's run_note task instance: the run then
    has no leaf that counts and Airflow ends it success whatever its tasks did (atk s20 F3).
    `task_id`: the DELETE door's task, or "*bulk*" (the bulk task door's "delete" action,
    whose entities are task ids or objects naming their own dag_id and task_id)."""
    why = ("the run_note decides the run's state (the only leaf Airflow counts); without it a run whose "
           "tasks failed ends success; to stop a run mark it failed, to decide again clear its run_note")
    if task_id != "*bulk*":
        if task_id == NOTE_TASK and _seglake_dag(dag_id):
            return dag_id, f"{dag_id}: its run_note task is not deleted by hand: {why}"
        return None
    if not isinstance(doc, dict):
        return None
    for action in doc.get("actions") or []:
        if not isinstance(action, dict) or action.get("action") != "delete":
            continue
        for entity in action.get("entities") or []:
            owner, tid = dag_id, entity
            if isinstance(entity, dict):
                owner = entity.get("dag_id") if isinstance(entity.get("dag_id"), str) and entity["dag_id"] else dag_id
                tid = entity.get("task_id")
            if tid == NOTE_TASK and _seglake_dag(owner):
                return owner, f"{owner}: its run_note task is not deleted by hand: {why}"
    return None


def conf_error(dag_id: str, conf, gc_floor=None) -> str | None:
    """The 400 message for a conf that breaks `dag_id`'s contract, else None (also for a
    DAG that is not seglake's). `gc_floor`: a callable giving the floor in seconds."""
    from seglake.errors import ValidationError
    from seglake.contract import SPECS, check_conf, check_gc_floor

    if dag_id not in SPECS:
        return None
    if conf is not None and not isinstance(conf, dict):
        return None   # Airflow answers a conf that is not an object itself (422)
    try:
        checked = check_conf(dag_id, conf)
        if dag_id == "gc" and gc_floor is not None and not checked.get("force"):
            check_gc_floor(checked, gc_floor())
    except ValidationError as e:
        return str(e).replace("refused conf before any change", "refused conf before any run", 1)
    return None


def gc_floor() -> float:
    """The tolerance floor a gc run would check (environment, then the Variable), read in
    the API server; a settings error is itself a refusal (the run would fail on it)."""
    from airflow.models.variable import Variable
    from seglake.config import VARIABLE_NAME, Settings

    return Settings.load(variable=Variable.get(VARIABLE_NAME, default_var=None)).tolerance_floor


class ConfGuard:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        m = TRIGGER_PATH.search(path)
        backfill = m is None and BACKFILL_PATH.search(path) is not None
        marked = clear = None
        if scope.get("method") == "POST" and m is None and not backfill:
            clear = CLEAR_PATH.search(path)
            if clear is None:
                await self.app(scope, receive, send)
                return
        if scope.get("method") == "PATCH":
            marked = TASK_PATH.search(path) or GROUP_PATH.search(path) or RUN_PATH.search(path)
            if marked is None:
                marked = BULK_PATH.search(path) or RUNS_BULK_PATH.search(path)
            m = backfill = None
        if scope.get("method") == "DELETE":   # the run_note's task instance deleted: the run would end green
            found = TASK_PATH.search(path)
            found = found and deleted_note(found.group("dag_id"), None, found.group("task_id"))
            if found and await _may_trigger(scope, found[0], "DELETE"):
                await _answer(send, 400, found[1])
                return
            await self.app(scope, receive, send)
            return
        if marked is None and clear is None and ((m is None and not backfill) or scope.get("method") != "POST"):
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                await _answer(send, 413, "request body too large")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None   # Airflow answers malformed JSON itself
        error, status = None, 400
        if clear is not None:
            rewritten = with_run_note(clear.group("dag_id"), doc)
            if rewritten is not None:
                body = json.dumps(rewritten).encode()
                scope = {**scope, "headers": [(k, str(len(body)).encode() if k.lower() == b"content-length" else v)
                                              for k, v in scope.get("headers", [])]}
        elif marked is not None:
            dag_id = marked.group("dag_id")
            task_id = marked.groupdict().get("task_id") or {BULK_PATH: "*bulk*", RUNS_BULK_PATH: "*runs*"}.get(marked.re)
            query = scope.get("query_string", b"").decode("latin-1")
            found = marked_success(dag_id, doc, query, task_id)
            if not found and task_id == "*bulk*":
                found = deleted_note(dag_id, doc, "*bulk*")
            if found and await _may_trigger(scope, found[0], "PUT"):   # the DAG whose run it is (a bulk entity's)
                error = found[1]
        elif backfill:
            dag_id = doc.get("dag_id") if isinstance(doc, dict) else None
            if isinstance(dag_id, str) and dag_id in NO_BACKFILL and await _may_trigger(scope, dag_id):
                from seglake.contract import GC_BACKFILL_REFUSED

                error = GC_BACKFILL_REFUSED
        elif isinstance(doc, dict) and _seglake_dag(m.group("dag_id")) and await _may_trigger(scope, m.group("dag_id")):
            error = _duplicate(m.group("dag_id"), body) or await asyncio.to_thread(_check, m.group("dag_id"),
                                                                                   doc.get("conf"))
            if not error:   # what the run's first step would not find: 404 (409/400) here, before the run
                status, error = await asyncio.to_thread(_preflight, m.group("dag_id"), doc.get("conf")) or (400, None)
        if error:
            await _answer(send, status, error)
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _seglake_dag(dag_id: str) -> bool:
    from seglake.contract import SPECS

    return dag_id in SPECS


def _duplicate(dag_id: str, body: bytes) -> str | None:
    """The 400 for a trigger whose JSON gives a key twice (Airflow's parser keeps the last
    one: `{"dry_run": true, "dry_run": false}` would be a REAL gc)."""
    from seglake.config import duplicate_key

    key = duplicate_key(body)
    return None if key is None else (f"{dag_id}: refused conf before any run: key {key!r} is given more than "
                                     f"once; each key may appear once")


def _check(dag_id: str, conf) -> str | None:
    from seglake.errors import ValidationError

    try:
        return conf_error(dag_id, conf, gc_floor)
    except ValidationError as e:   # the settings themselves (a bad Variable): what the run would fail on
        return f"{dag_id}: refused before any run: the settings are invalid: {e}"


def _preflight(dag_id: str, conf) -> tuple[int, str] | None:
    """(HTTP status, one sentence) when the run would not find what its conf names (an
    unknown collection, snapshot, job, bundle, Milvus source: 404; an undrop or a restore
    to a time its first step would refuse: 409/400), as the seglake REST API answers it;
    None otherwise, and when the store cannot be asked (etcd down: the run says it)."""
    from seglake.contract import check_conf
    from seglake.errors import Conflict, NotFound, StateError, ValidationError
    from seglake.lifecycle import preflight
    from seglake_airflow.hooks.engine import SeglakeHook, has_connection

    try:
        checked = check_conf(dag_id, conf)
        hook = SeglakeHook(quiet=True)
    except Exception:  # noqa: BLE001 - the conf check above already answered; settings: the run says
        return None
    try:
        preflight.missing(hook.meta, dag_id, checked, store=hook.store, backup=hook.backup_target,
                          settings=hook.settings, connection=has_connection)
    except NotFound as e:
        return 404, f"{dag_id}: refused before any run: {e}"
    except (Conflict, StateError) as e:
        return 409, f"{dag_id}: refused before any run: {e}"
    except ValidationError as e:
        return 400, f"{dag_id}: refused before any run: {e}"
    except Exception:  # noqa: BLE001 - etcd or the target did not answer: not a refusal
        return None
    finally:
        hook.close()
    return None


async def _may_trigger(scope, dag_id: str, method: str = "POST") -> bool:
    """True only for a caller Airflow would let trigger this DAG (bearer token, else the
    session cookie). Anyone else goes on to Airflow unchanged and gets its 401/403: an
    anonymous caller learns nothing about the DAG's keys from us."""
    from http.cookies import SimpleCookie

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    from airflow.configuration import conf

    manager = get_auth_manager()
    if type(manager).__name__ == "SimpleAuthManager" and conf.getboolean(
            "core", "simple_auth_manager_all_admins", fallback=False):
        return True   # development mode: Airflow makes every caller an admin (its middleware may run after us)
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header: no session
            return False
        token = cookie[COOKIE_NAME_JWT_TOKEN].value if COOKIE_NAME_JWT_TOKEN in cookie else ""
    if not token.strip():
        return False
    try:
        user = await manager.get_user_from_token(token.strip())
        return bool(manager.is_authorized_dag(method=method, access_entity=DagAccessEntity.RUN,
                                              details=DagDetails(id=dag_id), user=user))
    except Exception:  # noqa: BLE001 - expired, forged, unknown: Airflow answers it
        return False


async def _answer(send, status: int, detail: str) -> None:
    payload = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
