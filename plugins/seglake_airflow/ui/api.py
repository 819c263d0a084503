"""The typed REST API of seglake (issue 20 item 5): `/seglake/api/v1/...` in Airflow's API
server, behind Airflow's authentication, with its OpenAPI document at
`/seglake/api/v1/openapi.json` and its docs at `/seglake/api/v1/docs` (a page rendered here from
that document, no asset from the internet).

Reads come from etcd and the store through the engine (seglake.console, lifecycle).
Mutations that are lifecycles (create / drop / restore a snapshot, a GC dry run, resume
a copy job; any other seglake DAG through `POST /runs/{dag_id}` with its conf as the body)
create an Airflow DAG run -- so history, retries and logs stay in Airflow --
through Airflow's own `POST /api/v2/dags/{dag_id}/dagRuns` with the caller's own
credentials (Airflow checks the caller may trigger that DAG; the conf guard and the DAG's
Params check the conf), after checking the conf against the DAG's contract here
(seglake.contract.check_conf); they answer with the run and a link to it. Pin and unpin
are one guarded etcd transaction each and run here directly (they need DAG run rights).

Every refusal is HTTP 4xx with {"detail": one sentence naming the field, the value and
what is allowed}. A browser's session cookie authorises only requests that carry the
header `X-Seglake-Request: 1` for mutations (a cross-site form cannot set it: no CSRF);
a caller with `Authorization: Bearer <token>` needs no such header.

A run's answer says when its DAG is paused (Airflow creates DAGs paused: the run would sit
queued, silently) and whether the caller may unpause it (`POST /dags/{dag_id}/unpause`).

One file over 400 lines on purpose: every route is a closure of `create_api` sharing its
auth dependencies, its error handlers and `trigger`; the models above are its contract.
"""


import time
from typing import Annotated, Any, Optional, Union
from urllib.parse import quote

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from seglake.contract import SPECS
from seglake.names import NAME_PATTERN as JSON_SCHEMA_PATTERN
from seglake.names import NAME_RULE

API_PREFIX = "/api/v1"
HOUR_S = 3600.0
CSRF_HEADER = "x-seglake-request"
# pydantic's (Rust) regex has no look-ahead; its '$' is the end of the text (no newline)
NAME_PATTERN = JSON_SCHEMA_PATTERN.removesuffix("(?!\\n)")
assert NAME_PATTERN.endswith("$") and "(?" not in NAME_PATTERN


def _plain_decimal(value: Any) -> Any:
    """A number in a path or query is text: plain decimal digits only, as the CLI reads
    numbers (limits.Limit.parse). Python's and pydantic's int() also take '5_000', '+5',
    ' 5', '05', '5.0' and '5\n': `DELETE /pins/1_0` removed pin 10."""
    import re

    if isinstance(value, str) and not re.fullmatch(r"0|[1-9][0-9]*", value, re.ASCII):
        raise ValueError("not an integer written in plain decimal digits")
    return value


# an integer in a path or query string (ids, counts): plain decimal, then pydantic's bounds
PlainInt = Annotated[int, BeforeValidator(_plain_decimal)]


def _name(description: str = "a seglake name, e.g. demo_1"):
    return Field(pattern=NAME_PATTERN, max_length=255, description=description)


class Strict(BaseModel):
    # strict: a number is a JSON number (true is not 1 hour, "2" is not 2 hours)
    model_config = ConfigDict(extra="forbid", strict=True)


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- request bodies ------------------------------------------------------------------
class SnapshotCreate(Strict):
    collection: str = _name()
    name: str = _name()
    description: str = Field("", max_length=1024)
    ttl_hours: float = Field(0, description="0: kept until dropped")
    db: str = Field("default", pattern=NAME_PATTERN)
    engine: str = Field("auto", description="auto | inline | spark")


class RestoreRequest(Strict):
    target: str = Field(pattern=NAME_PATTERN, max_length=255, description="the new collection")
    db: str = Field("default", pattern=NAME_PATTERN)
    engine: str = "auto"
    timeout_hours: Optional[float] = None
    max_mib_per_second: float = 0
    max_requests_per_second: float = 0


class RestoreAsOfRequest(RestoreRequest):
    as_of: Union[str, int] = Field(description="ISO-8601 with a time zone (2026-11-27T12:00:00Z) or a TSO timestamp")


class UndropRequest(Strict):
    target: str = Field(pattern=NAME_PATTERN, max_length=255, description="the new collection")
    db: str = Field("default", pattern=NAME_PATTERN)
    engine: str = "auto"
    timeout_hours: Optional[float] = None
    from_target: bool = Field(False, description="when this store cannot give it: from the backup target alone")
    bundle: Optional[str] = Field(None, pattern=NAME_PATTERN, max_length=255,
                                  description="with from_target: start from this bundle (null: the latest one)")
    backup_uri: Optional[str] = Field(None, max_length=1024, description="the backup target (null: config "
                                                                         "backup_uri)")


class WindowRequest(Strict):
    window: Union[str, float] = Field(description="how far back restores reach: 3d, 12h, 90m or seconds")
    db: str = Field("default", pattern=NAME_PATTERN)


class PinRequest(Strict):
    ttl_hours: float = Field(description="how long the pin holds (hours; at most 8760)")
    by: str = Field("", max_length=256)
    db: str = Field("default", pattern=NAME_PATTERN)


class GCDryRun(Strict):
    collection: Optional[str] = Field(None, pattern=NAME_PATTERN, description="empty: the whole store")
    db: str = Field("default", pattern=NAME_PATTERN)
    engine: str = "auto"


class CompactionPolicyBody(Strict):
    """A collection's compaction policy: the keys given replace the stored policy; null or
    absent keys come from config."""
    min_segment_rows: Optional[int] = Field(None, description="merge segments below this many rows")
    min_segment_bytes: Optional[int] = Field(None, description="merge segments below this many stored bytes too")
    target_rows: Optional[int] = Field(None, description="merged segments hold about this many rows")
    target_bytes: Optional[int] = Field(None, description="merged segments hold about this many bytes")
    delete_ratio: Optional[float] = Field(None, description="rewrite a segment alone above this deleted fraction")
    l0_age_seconds: Optional[float] = Field(None, description="fold L0 delete segments older than this")
    protection_seconds: Optional[float] = Field(None, description="skip a collection snapshotted within this long")
    scheduled: Optional[bool] = Field(None, description="the scheduled compaction run compacts this collection "
                                                        "(null: keep the recorded flag)")


class CompactionRun(Strict):
    collection: str = _name()
    db: str = Field("default", pattern=NAME_PATTERN)
    dry_run: bool = False
    engine: str = Field("auto", description="auto | inline | spark")


class ResumeRequest(Strict):
    engine: Optional[str] = Field(None, description="empty: the engine the job was created with")


# -- responses -----------------------------------------------------------------------
class Run(BaseModel):
    dag_id: str
    dag_run_id: str
    state: Optional[str] = None
    dag_paused: Optional[bool] = Field(None, description="the DAG is paused: the run stays queued until it is "
                                                         "unpaused (null: Airflow did not say)")
    can_unpause: bool = Field(False, description="the caller may unpause the DAG (POST /dags/{dag_id}/unpause)")
    message: str = Field("", description="one sentence for the operator: started, or queued behind a paused DAG")
    waits: Optional[str] = Field(None, description="why a run of an unpaused DAG sits queued (its DAG already runs "
                                                   "max_active_runs runs), else null")
    run_url: str = Field(description="the run's page in Airflow (a path on this server)")
    conf: dict[str, Any]
    object: dict[str, Any] = Field(default_factory=dict, description="what the run acts on")


class Collection(Open):
    collection_id: int
    name: str
    db: str
    state: str
    segments: int
    rows: int
    bytes: int


class Snapshot(Open):
    snapshot_id: int
    collection: str
    name: str
    state: str
    segments: int
    rows: int
    bytes: int


class Job(Open):
    job_id: int
    state: str
    source_collection: str
    snapshot: str
    target_collection: str
    progress: dict[str, Any]
    rate_bps: Optional[float] = Field(None, description="while it runs: the current rate (the last 10 s); "
                                                        "finished: the average")
    eta_s: Optional[float] = Field(None, description="at the current rate; null while stalled")
    health: str = Field("running", description="running | stalled | finished")
    stalled_s: Optional[float] = Field(None, description="seconds the done count has not moved (>= 30), else null")


class Pin(Open):
    pin_id: int
    collection: str
    snapshot: str
    expires_at: float


class Channel(Open):
    vchannel: str


class CompactionPolicy(Open):
    collection_id: int
    collection: str
    db: str
    scheduled: bool
    policy: dict[str, Any] = Field(description="the keys set for this collection (the others: config)")
    effective: dict[str, Any] = Field(default_factory=dict, description="the policy a run uses (with config)")


class MilvusSource(Open):
    name: str
    milvus_etcd: str = Field(description="Milvus's etcd endpoints (host:port,...)")
    milvus_root: str
    bucket: str
    bucket_root: str
    db: str
    collections: list[str]
    conn_id: str = Field(description="the Airflow connection with the bucket's credentials (never stored here)")
    verify: bool
    max_mib_per_second: Optional[float] = Field(None, description="each scheduled capture's rate (0: unlimited)")
    keep_last: int
    keep_hourly: int
    keep_daily: int
    keep_weekly: int
    keep_monthly: int


class MilvusCapture(Open):
    db: str
    collection: str
    bundle: str
    source: Optional[str] = Field(None, description="the registered source it came from (null: none matches)")
    scheduled: bool
    created_at: Optional[float] = None
    finished_at: Optional[float] = None
    rows: Optional[int] = None
    bytes: Optional[int] = None
    files: Optional[int] = None
    copied_bytes: Optional[int] = None
    verified_ok: Optional[bool] = Field(None, description="the last verification (null: never verified)")
    verified_at: Optional[float] = None
    pinned_until: Optional[float] = None


class MilvusRestore(Open):
    restore_id: str
    state: Optional[str] = None
    bundle: Optional[str] = None
    name: Optional[str] = Field(None, description="the collection created in Milvus")
    address: str
    count: Optional[int] = None
    visible_rows: Optional[int] = None
    created_at: Optional[float] = None
    verified_at: Optional[float] = None
    segments_total: int = Field(0, description="segments of the bundle this restore imports (0: not planned yet)")
    segments_imported: int = Field(0, description="of those, imported into Milvus so far")
    segments_failed: int = Field(0, description="of those, failed (a re-run retries them)")
    running: bool = Field(False, description="a milvus_restore run holds it now (its leased claim)")
    stopped: bool = Field(False, description="not verified and no run holds it: its run stopped (re-run the "
                                             "same conf to resume)")


class MilvusOverview(BaseModel):
    sources: list[MilvusSource]
    captures: list[MilvusCapture]
    restores: list[MilvusRestore]


class DagState(BaseModel):
    dag_id: str
    is_paused: bool
    message: str = Field("", description="what the unpause starts: a DAG with a schedule starts its latest "
                                         "interval's scheduled run at once (gc: what that run does)")


# the DAGs this API creates runs of: the only ones its unpause route acts on
# every seglake DAG may be run through POST /runs/{dag_id} (its conf checked first), except
# gc, whose door here is POST /gc/dry-run (always a dry run); all of them may be unpaused
GENERIC_RUN_DAGS = tuple(d for d in sorted(SPECS) if d != "gc")
RUN_DAGS = tuple(sorted(SPECS))




def create_api():
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
    from fastapi import Body, Depends, FastAPI, Path, Query, Request
    from fastapi.dependencies.utils import get_flat_dependant
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from seglake.errors import ConfigError, Conflict, NotFound, SeglakeError, StateError, Unavailable, ValidationError, redact
    from seglake.limits import ID_MAX
    from seglake_airflow.ui import _engine

    def no_unknown_query(request: Request) -> None:
        """A misspelt query parameter is refused, naming the closest valid one (a DELETE
        with `?bd=x` must not act on db 'default')."""
        from seglake.contract import closest

        route = request.scope.get("route")
        if route is None or not hasattr(route, "dependant"):
            return
        valid = [p.alias for p in get_flat_dependant(route.dependant).query_params]
        for key in request.query_params:
            if key not in valid:
                hint = closest(key, valid) if valid else "; this route takes no query parameters"
                raise ValidationError(f"unknown query parameter {key!r}{hint}")

    async def no_duplicate_keys(request: Request) -> None:
        """A key given twice in a JSON body is refused (JSON's parser keeps the last one
        silently: `{"name": "a", "name": "b"}` created snapshot b), as config JSON is."""
        from seglake.config import duplicate_key

        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            key = duplicate_key(await request.body())
            if key is not None:
                raise ValidationError(f"the body gives key {key!r} more than once; each key may appear once")

    def name_in(kind: str):
        return Path(pattern=NAME_PATTERN, max_length=255, description=f"a {kind} name")

    def db_q():
        return Query("default", pattern=NAME_PATTERN, max_length=255, description="the database")

    def id_in(kind: str):
        return Path(ge=1, le=ID_MAX, description=f"a {kind} id")

    def remember_user(request: Request, user: GetUserDep) -> None:
        request.state.seglake_user = user   # the caller (resolved once per request): what it may do

    read = Depends(requires_access_dag(method="GET"))
    run_rights = Depends(requires_access_dag(method="POST", access_entity=DagAccessEntity.RUN))
    api = FastAPI(title="seglake API", version="1",
                  description=__doc__.split("\n\n", 1)[1].strip(), docs_url=None, redoc_url=None,
                  openapi_url=None, dependencies=[read, Depends(no_unknown_query), Depends(no_duplicate_keys),
                                                  Depends(remember_user)])

    # -- errors: one sentence each ---------------------------------------------------------
    @api.exception_handler(RequestValidationError)
    async def plain_validation(request: Request, exc: RequestValidationError):
        from seglake.contract import closest

        problems = []
        for err in exc.errors():
            loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path")]
            field = ".".join(loc) or "body"
            if err.get("type") == "extra_forbidden":
                model = _model_for(request)
                hint = closest(loc[-1], list(model.model_fields)) if model is not None and loc else ""
                problems.append(f"unknown field {field!r}{hint}")
            elif err.get("type") == "missing":
                problems.append(f"field {field!r} is required")
            elif err.get("type") == "json_invalid":
                problems.append(f"the body is not valid JSON ({(err.get('ctx') or {}).get('error', 'decode error')})")
            elif field == "body" and err.get("type") in ("model_type", "model_attributes_type", "dict_type"):
                ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
                if isinstance(err.get("input"), (bytes, str)) and not ctype.endswith("json"):
                    # FastAPI reads a body as JSON only under a JSON content type (curl -d sends a form's)
                    problems.append("send the body as JSON with the header Content-Type: application/json "
                                    f"(got {ctype or 'no Content-Type'})")
                else:
                    problems.append(f"the body must be a JSON object, got {_short(err.get('input'))}")
            else:
                why = (f"allowed: {NAME_RULE}" if err.get("type") == "string_pattern_mismatch"
                       else "allowed: a JSON integer (no fraction, no exponent)"
                       if err.get("type") in ("int_type", "int_from_float", "int_parsing")
                       else "allowed: a JSON number" if err.get("type") == "float_type"
                       else str(err.get("msg")))
                problems.append(f"field {field!r}: {_short(err.get('input'))} is not allowed; {why}")
        return JSONResponse({"detail": "; ".join(problems) or "invalid request"}, status_code=400)

    @api.exception_handler(SeglakeError)
    async def plain_engine_error(request: Request, exc: SeglakeError):
        status = (503 if isinstance(exc, ConfigError)   # the server's config, not the request
                  else 404 if isinstance(exc, NotFound) else 400 if isinstance(exc, ValidationError)
                  else 409 if isinstance(exc, (Conflict, StateError)) else 503 if isinstance(exc, Unavailable)
                  else 500)
        return JSONResponse({"detail": redact(str(exc))}, status_code=status)

    def _short(value) -> str:
        """The refused input, short (never the whole body echoed back, nor a URI's credential)."""
        from seglake.contract import show
        text = show(value) if isinstance(value, float) else redact(repr(value))
        return text if len(text) <= 40 else text[:37] + "..."

    def _model_for(request: Request):
        route = request.scope.get("route")   # the matched operation: its body's model
        for param in getattr(getattr(route, "dependant", None), "body_params", None) or ():
            model = getattr(param.field_info, "annotation", None) or getattr(param, "type_", None)
            if isinstance(model, type) and issubclass(model, BaseModel):
                return model
        return None

    # -- the docs (behind the same login) --------------------------------------------------
    @api.get("/openapi.json", include_in_schema=False)
    def openapi() -> JSONResponse:
        return JSONResponse(api.openapi())

    @api.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        from seglake_airflow.ui.docs import render_docs

        # rendered here: no asset from a CDN (a machine without internet saw a blank page)
        return HTMLResponse(render_docs(api.openapi(), str(request.url.path).rsplit("/", 1)[0] + "/openapi.json"),
                            headers={"Cache-Control": "no-store"})

    # -- reads -----------------------------------------------------------------------------
    @api.get("/collections", response_model=list[Collection], summary="Collections with their totals")
    def collections() -> list[dict]:
        from seglake import console
        with _engine() as (meta, _):
            return console.collections(meta)

    @api.get("/collections/{name}", response_model=Collection, summary="One collection")
    def collection(name: str = name_in("collection"), db: str = db_q()) -> dict:
        from seglake import console
        with _engine() as (meta, _):
            for c in console.collections(meta):
                if (c["name"], c["db"]) == (name, db):
                    return c
        raise NotFound(f"collection {name!r} not found in db {db!r}")

    @api.get("/snapshots", response_model=list[Snapshot], summary="COMMITTED snapshots (all=true: every record)")
    def snapshots(collection: Optional[str] = Query(None, pattern=NAME_PATTERN, max_length=255),
                  db: str = db_q(), all: bool = False) -> list[dict]:
        from seglake.lifecycle import snapshot
        with _engine() as (meta, _):
            return snapshot.list_snapshots(meta, collection, db=db, include_all=all)

    @api.get("/snapshots/{collection}/{name}", response_model=Snapshot,
             summary="One snapshot, its manifests verified")
    def snapshot_describe(collection: str = name_in("collection"), name: str = name_in("snapshot"),
                          db: str = db_q()) -> dict:
        from seglake.lifecycle import snapshot
        with _engine() as (meta, store):
            return snapshot.describe(meta, store, collection, name, db=db)

    @api.get("/pins", response_model=list[Pin], summary="Unexpired pins")
    def pins(collection: Optional[str] = Query(None, pattern=NAME_PATTERN, max_length=255),
             db: str = db_q()) -> list[dict]:
        from seglake.lifecycle import snapshot
        with _engine() as (meta, _):
            return snapshot.list_pins(meta, collection, db=db)

    @api.get("/jobs", response_model=list[Job], summary="Copy jobs with progress, rate and ETA")
    def jobs() -> list[dict]:
        from seglake import console
        with _engine() as (meta, _):
            return console.copy_jobs(meta, time.time())

    @api.get("/jobs/{job_id}", response_model=Job, summary="One copy job with progress, rate and ETA")
    def job(job_id: Annotated[PlainInt, id_in("copy job")]) -> dict:
        from seglake import console
        with _engine() as (meta, _):
            for d in console.copy_jobs(meta, time.time()):
                if d["job_id"] == job_id:
                    return d
        raise NotFound(f"copy job {job_id} not found (finished jobs are removed after copy_job_retention)")

    @api.get("/gc/report", summary="The latest GC run: candidates, what was kept and deleted")
    def gc_report() -> dict:
        from seglake import console
        with _engine() as (meta, store):
            return {"latest": console.gc_latest(store), "pause": console.gc_pause(meta)}

    @api.get("/wal/status", response_model=list[Channel], summary="WAL channels: term, ticks, lag, pause")
    def wal_status() -> list[dict]:
        from seglake import console
        with _engine() as (meta, _):
            return console.wal_channels(meta)

    @api.get("/milvus", response_model=MilvusOverview,
             summary="Milvus: registered sources, their captures (rows, bytes, verified) and restores into Milvus")
    def milvus_overview() -> dict:
        from seglake import console
        with _engine() as (meta, _):
            m = console.milvus(meta, time.time())
            m["sources"] = [d for d in m["sources"] if "error" not in d]   # an unreadable record: the page says so
            return m

    # -- mutations -------------------------------------------------------------------------
    def trigger(request: Request, dag_id: str, conf: dict, obj: dict) -> dict:
        """Check the conf here (one sentence), then create the run through Airflow's API
        with the caller's credentials: Airflow's rights, history and logs apply."""
        import httpx

        from airflow.configuration import conf as airflow_conf
        from seglake.contract import check_conf

        token = _caller_token(request)
        checked = check_conf(dag_id, conf)   # ValidationError -> 400, before any run exists
        base = (airflow_conf.get("api", "base_url", fallback="") or _own_address(request)).rstrip("/")
        try:
            r = httpx.post(f"{base}/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf},
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
        except httpx.HTTPError as e:
            raise Unavailable(f"{dag_id}: Airflow's API did not answer the request to create the run "
                              f"({type(e).__name__}); check [api] base_url and retry") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text[:300]
            detail = detail if isinstance(detail, str) else str(detail)[:500]
            raise StarletteHTTPException(r.status_code, f"{dag_id}: Airflow refused the run: {detail}")
        run = r.json()
        run_id = run["dag_run_id"]
        paused, schedule = _is_paused(base, dag_id, token, with_schedule=True)
        waits = None
        may = bool(paused) and _may_unpause(request, dag_id)
        if paused:
            message = (f"queued: the DAG {dag_id} is paused, so the run waits until it is unpaused"
                       + (" (POST /dags/%s/unpause, or the toggle on the DAG's page)" % dag_id if may
                          else "; ask an operator who may edit the DAG to unpause it"))
            if schedule:   # unpausing also starts the schedule's latest interval at once (issue 27, atk s20 F1)
                message += (f"; unpausing it also starts its schedule ({schedule}): the latest interval's "
                            f"scheduled run starts at once{_scheduled_does(dag_id)}")
        elif paused is None:   # Airflow did not say: never claim the run is under way
            message = (f"created: run {run_id} of {dag_id} is {run.get('state') or 'created'}; whether the DAG "
                       f"{dag_id} is paused is unknown (Airflow did not answer): check its page")
        else:
            message = f"started: run {run_id} of {dag_id} is {run.get('state') or 'created'}"
            full = _runs_at_limit(base, dag_id, token)
            if full:   # a queued run behind max_active_runs waits as silently as one of a paused DAG
                waits = (f"{full[0]} runs of {dag_id} are running, its limit (max_active_runs {full[1]}); "
                         f"it starts when one of them ends")
                message = f"queued: run {run_id} of {dag_id} waits: {waits}"
        return {"dag_id": dag_id, "dag_run_id": run_id, "state": run.get("state"), "conf": checked,
                "run_url": f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}", "object": obj,
                "dag_paused": paused, "can_unpause": may, "message": message, "waits": waits}

    def _is_paused(base: str, dag_id: str, token: str, with_schedule: bool = False):
        """Whether the DAG is paused (Airflow creates DAGs paused): a run of a paused DAG
        sits queued, silently, unless the answer says so. None when Airflow did not say.
        with_schedule: (that, the DAG's schedule summary or None when it has none)."""
        import httpx

        value = summary = None
        try:
            r = httpx.get(f"{base}/api/v2/dags/{quote(dag_id, safe='')}",
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)
            doc = r.json() if r.status_code == 200 else {}
            value, summary = doc.get("is_paused"), doc.get("timetable_summary")
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        value = value if isinstance(value, bool) else None
        if not with_schedule:
            return value
        return value, (summary if isinstance(summary, str) and summary not in ("", "None", "null") else None)

    def _runs_at_limit(base: str, dag_id: str, token: str) -> tuple[int, int] | None:
        """(running, max_active_runs) when the DAG already runs as many runs as it may (a new
        run then sits queued until one ends); None otherwise or when Airflow did not say."""
        import httpx

        headers = {"Authorization": f"Bearer {token}"}
        try:
            r = httpx.get(f"{base}/api/v2/dags/{quote(dag_id, safe='')}", headers=headers, timeout=30)
            limit = r.json().get("max_active_runs") if r.status_code == 200 else None
            if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
                return None
            r = httpx.get(f"{base}/api/v2/dags/{quote(dag_id, safe='')}/dagRuns",
                          params={"state": "running", "limit": 1}, headers=headers, timeout=30)
            running = r.json().get("total_entries") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        if isinstance(running, int) and not isinstance(running, bool) and running >= limit:
            return running, limit
        return None

    def _scheduled_does(dag_id: str) -> str:
        """What a scheduled run of `dag_id` does, when that is recorded (gc: `seglake gc
        schedule set`): a REAL gc deletes files, which a dry run's operator must be told."""
        if dag_id != "gc":
            return ""
        try:
            from seglake import console

            with _engine() as (meta, _):
                rec = console.gc_pause(meta).get("schedule")
        except Exception:  # noqa: BLE001 - unknown: say so rather than nothing
            return " (what it does could not be read: seglake gc schedule show)"
        if not rec:
            return " (no `seglake gc schedule set`: it is refused, nothing deleted)"
        c = rec.get("conf") or {}
        what = "a dry run" if c.get("dry_run") else "a REAL gc that deletes files"
        return f" and is {what} of {c.get('collection') or 'the whole store'} (seglake gc schedule show)"

    def _may_unpause(request: Request, dag_id: str) -> bool:
        """The caller's role allows editing the DAG (Airflow's PUT on a DAG: pause/unpause)."""
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        user = getattr(request.state, "seglake_user", None)
        if user is None:
            return False
        try:
            return bool(get_auth_manager().is_authorized_dag(method="PUT", details=DagDetails(id=dag_id), user=user))
        except Exception:  # noqa: BLE001 - unknown: do not offer it
            return False

    def _own_address(request: Request) -> str:
        """This server's own address (the socket the request came in on), never the Host
        header: a client must not choose where the server sends the caller's token (SSRF)."""
        server = request.scope.get("server")
        if not server or server[1] is None:
            raise Unavailable("this server's own address is unknown (a unix socket?); set [api] base_url "
                              "so runs can be created through Airflow's API")
        host = f"[{server[0]}]" if ":" in str(server[0]) else str(server[0])
        return f"{request.url.scheme}://{host}:{server[1]}"

    def _caller_token(request: Request) -> str:
        from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        if request.headers.get(CSRF_HEADER) != "1":
            raise StarletteHTTPException(403, "a change made with a browser session needs the header "
                                              "'X-Seglake-Request: 1' (a cross-site request cannot set it)")
        token = request.cookies.get(COOKIE_NAME_JWT_TOKEN, "")
        if not token:
            raise StarletteHTTPException(401, "not authenticated")
        return token

    @api.post("/snapshots", response_model=Run, status_code=201, dependencies=[run_rights],
              summary="Create a snapshot (a snapshot_create DAG run)")
    def snapshot_create(request: Request, body: SnapshotCreate) -> dict:
        from seglake.lifecycle import preflight

        conf = body.model_dump()
        with _engine() as (meta, _):   # what the run would fail on, refused now (404 / 409), before any run
            preflight.missing(meta, "snapshot_create", conf)
        return trigger(request, "snapshot_create", conf, {"collection": body.collection, "snapshot": body.name})

    @api.delete("/snapshots/{collection}/{name}", response_model=Run, status_code=202, dependencies=[run_rights],
                summary="Drop a snapshot (a snapshot_drop DAG run)")
    def snapshot_drop(request: Request, collection: str = name_in("collection"), name: str = name_in("snapshot"),
                      db: str = db_q()) -> dict:
        from seglake.lifecycle import snapshot

        with _engine() as (meta, _):
            rec, _ = snapshot.resolve(meta, collection, name, db=db)   # 404 before any run
            held = meta.snapshots.pinned_by(rec, time.time())
            if held:
                raise Conflict(f"snapshot {name!r} is held by {', '.join(held)}; unpin it or wait for the copy")
        return trigger(request, "snapshot_drop", {"collection": collection, "name": name, "db": db},
                       {"collection": collection, "snapshot": name})

    @api.post("/snapshots/{collection}/{name}/restore", response_model=Run, status_code=201,
              dependencies=[run_rights], summary="Restore a snapshot into a new collection (snapshot_restore)")
    def snapshot_restore(request: Request, body: RestoreRequest, collection: str = name_in("collection"),
                         name: str = name_in("snapshot")) -> dict:
        from seglake.lifecycle import snapshot

        with _engine() as (meta, _):
            rec, _ = snapshot.resolve(meta, collection, name, db=body.db)   # 404 before any run
            try:
                taken = meta.catalog.get_by_name(body.target, body.db)
            except NotFound:
                taken = None
            same = taken is not None and {k: taken.properties.get("restored_from", {}).get(k) for k in
                                          ("collection", "snapshot")} == {"collection": collection, "snapshot": name}
            if taken is not None and not same:   # the same restore again resumes it: allowed
                raise Conflict(f"collection {body.target!r} already exists in db {body.db!r}; choose another target")
        conf = {"collection": collection, "snapshot": name, **body.model_dump()}
        return trigger(request, "snapshot_restore", conf,
                       {"collection": collection, "snapshot": name, "target": body.target})

    @api.post("/collections/{collection}/restore", response_model=Run, status_code=201,
              dependencies=[run_rights], summary="Restore a collection as it was at an instant into a new "
                                                  "collection (snapshot_restore with as_of)")
    def restore_as_of(request: Request, body: RestoreAsOfRequest, collection: str = name_in("collection")) -> dict:
        from seglake.lifecycle import pitr

        as_of = str(body.as_of)   # the conf carries it as text (a TSO in decimal)
        with _engine() as (meta, store):   # every refusal (window, instant, log gap) before any run
            same = None
            try:
                taken = meta.catalog.get_by_name(body.target, body.db)
                same = taken.properties.get("restored_from", {})
            except NotFound:
                taken = None
            if taken is not None and not (same.get("collection") == collection
                                          and same.get("as_of") == pitr.parse_as_of(as_of)):
                raise Conflict(f"collection {body.target!r} already exists in db {body.db!r}; choose another target")
            if taken is None:
                pitr.plan(meta, store, collection, as_of, db=body.db)
        conf = {"collection": collection, "as_of": as_of, **body.model_dump(exclude={"as_of"})}
        return trigger(request, "snapshot_restore", conf, {"collection": collection, "as_of": as_of,
                                                           "target": body.target})

    @api.post("/collections/{collection}/undrop", response_model=Run, status_code=201,
              dependencies=[run_rights], summary="Bring a dropped collection back as a new collection, as it was "
                                                  "just before the drop (a collection_undrop run)")
    def undrop(request: Request, body: UndropRequest, collection: str = name_in("collection")) -> dict:
        from seglake.lifecycle import preflight
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()   # every refusal (no backup target, not dropped, outside the window, the log or
        try:                   # archive) before any run: pitr.check_undrop, as the generic door asks it
            preflight.missing(hook.meta, "collection_undrop", {"collection": collection, **body.model_dump()},
                              store=hook.store, backup=hook.backup_target, settings=hook.settings)
        finally:
            hook.close()
        return trigger(request, "collection_undrop", {"collection": collection, **body.model_dump()},
                       {"collection": collection, "target": body.target})

    @api.get("/collections/{collection}/replay", summary="The replay of a restore to a time (or an undrop) into "
                                                         "this collection: its progress while it runs")
    def replay_progress(collection: str = name_in("collection"), db: str = db_q()) -> dict:
        from seglake.lifecycle import pitr

        with _engine() as (meta, _):
            return pitr.progress(meta, meta.catalog.get_by_name(collection, db).collection_id)

    @api.get("/collections/{collection}/pitr", summary="A collection's point-in-time window and what it holds")
    def pitr_show(collection: str = name_in("collection"), db: str = db_q()) -> dict:
        from seglake.lifecycle import pitr

        with _engine() as (meta, _):
            doc = pitr.get_window(meta, collection, db=db)
            if doc is None:
                return {"collection": collection, "db": db, "window": None}
            held = [h for h in pitr.cost(meta)["windows"] if h["collection_id"] == doc["collection_id"]]
            return {**doc, "holds": held[0] if held else None}

    @api.put("/collections/{collection}/pitr", dependencies=[run_rights],
             summary="Turn a collection's point-in-time window on (or change it)")
    def pitr_set(request: Request, body: WindowRequest, collection: str = name_in("collection")) -> dict:
        from seglake.lifecycle import pitr

        _caller_token(request)
        with _engine() as (meta, _):
            return pitr.set_window(meta, collection, body.window, db=body.db)

    @api.delete("/collections/{collection}/pitr", dependencies=[run_rights],
                summary="Turn a collection's point-in-time window off (the next GC releases what it held)")
    def pitr_clear(request: Request, collection: str = name_in("collection"), db: str = db_q()) -> dict:
        from seglake.lifecycle import pitr

        _caller_token(request)
        with _engine() as (meta, _):
            return {"collection": collection, "db": db, "cleared": pitr.clear_window(meta, collection, db=db)}

    @api.post("/snapshots/{collection}/{name}/pins", response_model=Pin, status_code=201,
              dependencies=[run_rights], summary="Pin a snapshot for a while (no drop; GC keeps its files)")
    def snapshot_pin(request: Request, body: PinRequest, collection: str = name_in("collection"),
                     name: str = name_in("snapshot")) -> dict:
        from seglake.lifecycle import snapshot

        _caller_token(request)   # a browser session needs the anti-CSRF header
        with _engine() as (meta, _):
            return snapshot.pin(meta, collection, name, _pin_ttl_seconds(body.ttl_hours), db=body.db,
                                by=body.by or "rest")

    @api.delete("/pins/{pin_id}", response_model=Pin, dependencies=[run_rights], summary="Remove a pin")
    def unpin(request: Request, pin_id: Annotated[PlainInt, id_in("pin")]) -> dict:
        from seglake.lifecycle import snapshot

        _caller_token(request)
        with _engine() as (meta, _):
            return snapshot.unpin(meta, pin_id)

    @api.put("/milvus/sources/{name}", response_model=MilvusSource, dependencies=[run_rights],
             summary="Register (or replace) a Milvus source: its collections captured on the snapshot_schedule")
    def milvus_source_set(request: Request, name: str = name_in("Milvus source"),
                          source: dict[str, Any] = Body(description="milvus_etcd, bucket, collections (required); "
                                                                    "milvus_root, bucket_root, db, conn_id, verify, "
                                                                    "max_mib_per_second, keep_last/hourly/daily/"
                                                                    "weekly/monthly")) -> dict:
        from seglake.milvus import sources

        _caller_token(request)
        with _engine() as (meta, _):
            return sources.set_source(meta, name, source)

    @api.delete("/milvus/sources/{name}", dependencies=[run_rights], summary="Forget a Milvus source (its "
                "captures stay in the target)")
    def milvus_source_clear(request: Request, name: str = name_in("Milvus source")) -> dict:
        from seglake.milvus import sources

        _caller_token(request)
        with _engine() as (meta, _):
            if not sources.clear_source(meta, name):
                sources.get_source(meta, name)     # NotFound naming the registered ones
            return {"name": name, "cleared": True}

    @api.post("/gc/dry-run", response_model=Run, status_code=201, dependencies=[run_rights],
              summary="A GC dry run (a gc DAG run that deletes nothing)")
    def gc_dry_run(request: Request, body: GCDryRun = Body(default_factory=GCDryRun)) -> dict:
        if body.collection is not None:
            with _engine() as (meta, _):
                meta.catalog.get_by_name(body.collection, body.db)   # 404 before any run (prepare would fail later)
        conf = {"dry_run": True, **body.model_dump()}
        return trigger(request, "gc", conf, {"collection": body.collection})

    @api.post("/jobs/{job_id}/resume", response_model=Run, status_code=201, dependencies=[run_rights],
              summary="Resume (or re-drive) a copy job (a copy_segment_job DAG run)")
    def job_resume(request: Request, job_id: Annotated[PlainInt, id_in("copy job")],
                   body: ResumeRequest = Body(default_factory=ResumeRequest)) -> dict:
        from seglake.lifecycle import preflight

        with _engine() as (meta, _):   # NotFound -> 404, a dropped target -> 409, before any run
            preflight.missing(meta, "copy_segment_job", {"job_id": job_id})
        return trigger(request, "copy_segment_job", {"job_id": job_id, **body.model_dump()}, {"job_id": job_id})

    # -- compaction: the per-collection policy (one etcd write, here), history, a run (DAG) --
    def _with_effective(doc: dict, settings) -> dict:
        from seglake.lifecycle import compaction

        return {**doc, "effective": compaction.effective(settings, doc["policy"]).to_json()}

    @api.get("/compaction/policies", response_model=list[CompactionPolicy],
             summary="Every collection's compaction policy (the keys set, and the policy a run uses)")
    def compaction_policies() -> list[dict]:
        from seglake.lifecycle import compaction
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        try:
            return [_with_effective(d, hook.settings) for d in compaction.list_policies(hook.meta) if "error" not in d]
        finally:
            hook.close()

    @api.get("/compaction/policies/{collection}", response_model=CompactionPolicy,
             summary="A collection's compaction policy")
    def compaction_policy_get(collection: str = name_in("collection"), db: str = db_q()) -> dict:
        from seglake.lifecycle import compaction
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        try:
            doc = compaction.get_policy(hook.meta, collection, db=db)
            if doc is None:
                raise NotFound(f"collection {collection!r} has no compaction policy (config applies)")
            return _with_effective(doc, hook.settings)
        finally:
            hook.close()

    @api.put("/compaction/policies/{collection}", response_model=CompactionPolicy, dependencies=[run_rights],
             summary="Set a collection's compaction policy (every value checked before the write)")
    def compaction_policy_set(request: Request, body: CompactionPolicyBody, collection: str = name_in("collection"),
                              db: str = db_q()) -> dict:
        from seglake.lifecycle import compaction
        from seglake_airflow.hooks.engine import SeglakeHook

        _caller_token(request)
        values = body.model_dump()
        scheduled = values.pop("scheduled")
        values["l0_age"] = values.pop("l0_age_seconds")
        values["protection"] = values.pop("protection_seconds")
        user = getattr(getattr(request.state, "seglake_user", None), "username", "") or ""
        hook = SeglakeHook()
        try:
            doc = compaction.set_policy(hook.meta, hook.settings, collection,
                                        {k: v for k, v in values.items() if v is not None}, db=db,
                                        scheduled=scheduled, by=f"rest:{user}"[:256])
            return _with_effective(doc, hook.settings)
        finally:
            hook.close()

    @api.delete("/compaction/policies/{collection}", dependencies=[run_rights],
                summary="Clear a collection's compaction policy (config applies again)")
    def compaction_policy_clear(request: Request, collection: str = name_in("collection"), db: str = db_q()) -> dict:
        from seglake.lifecycle import compaction

        _caller_token(request)
        with _engine() as (meta, _):
            return {"collection": collection, "db": db, "cleared": compaction.clear_policy(meta, collection, db=db)}

    @api.get("/compaction/history", summary="The last compaction runs (newest first): segments before/after, "
                                            "rows dropped, bytes reclaimed, time")
    def compaction_history(collection: Optional[str] = Query(None, pattern=NAME_PATTERN, max_length=255),
                           db: str = db_q(), last: Annotated[PlainInt, Query(ge=1, le=1000)] = 20) -> list[dict]:
        from seglake.lifecycle import compaction

        with _engine() as (meta, _):
            cid = None if collection is None else meta.catalog.get_by_name(collection, db).collection_id
            return compaction.history(meta, cid, last=last)

    @api.post("/compaction", response_model=Run, status_code=201, dependencies=[run_rights],
              summary="Compact a collection with its policy (a compaction DAG run)")
    def compaction_run(request: Request, body: CompactionRun) -> dict:
        with _engine() as (meta, _):
            meta.catalog.get_by_name(body.collection, body.db)   # 404 before any run
        return trigger(request, "compaction", body.model_dump(), {"collection": body.collection})

    @api.post("/runs/{dag_id}", response_model=Run, status_code=201, dependencies=[run_rights],
              summary="Run any seglake DAG (but gc: POST /gc/dry-run) with a conf checked first: exports, "
                      "verifies, restores from a backup target, Milvus captures and restores, WAL flushes, drops")
    def dag_run(request: Request, dag_id: str = Path(description="one of " + ", ".join(GENERIC_RUN_DAGS)),
                conf: dict[str, Any] = Body(default_factory=dict, description="the DAG's conf (its form's keys)")
                ) -> dict:
        from seglake.contract import closest

        if dag_id not in GENERIC_RUN_DAGS:
            why = ("a manual gc run through this API is a dry run: POST /gc/dry-run" if dag_id == "gc" else
                   f"allowed: {', '.join(GENERIC_RUN_DAGS)}{closest(dag_id, list(GENERIC_RUN_DAGS))}")
            raise NotFound(f"dag {dag_id!r} is not one this API runs; {why}")
        from seglake.contract import check_conf
        from seglake.lifecycle import preflight
        from seglake_airflow.hooks.engine import SeglakeHook, has_connection

        _caller_token(request)
        checked = check_conf(dag_id, conf)   # 400, then what the run would not find: 404, before any run
        hook = SeglakeHook()
        try:
            preflight.missing(hook.meta, dag_id, checked, store=hook.store, backup=hook.backup_target,
                              settings=hook.settings, connection=has_connection)
        finally:
            hook.close()
        obj = {k: conf[k] for k in ("collection", "db", "snapshot", "name", "bundle", "target") if
               isinstance(conf, dict) and isinstance(conf.get(k), (str, int))}
        return trigger(request, dag_id, conf, obj)

    @api.post("/dags/{dag_id}/unpause", response_model=DagState,
              dependencies=[Depends(requires_access_dag(method="PUT"))],
              summary="Unpause one of the DAGs this API runs (DAGs are paused at creation)")
    def dag_unpause(request: Request, dag_id: str = Path(description="one of " + ", ".join(RUN_DAGS))) -> dict:
        import httpx

        from airflow.configuration import conf as airflow_conf

        if dag_id not in RUN_DAGS:
            from seglake.contract import closest

            raise NotFound(f"dag {dag_id!r} is not one this API runs; allowed: {', '.join(RUN_DAGS)}"
                           f"{closest(dag_id, list(RUN_DAGS))}")
        token = _caller_token(request)
        base = (airflow_conf.get("api", "base_url", fallback="") or _own_address(request)).rstrip("/")
        try:
            r = httpx.patch(f"{base}/api/v2/dags/{dag_id}", params={"update_mask": "is_paused"},
                            json={"is_paused": False}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        except httpx.HTTPError as e:
            raise Unavailable(f"{dag_id}: Airflow's API did not answer the unpause ({type(e).__name__})") from None
        if r.status_code >= 400:
            raise StarletteHTTPException(r.status_code, f"{dag_id}: Airflow refused the unpause: {r.text[:300]}")
        doc = r.json()
        summary = doc.get("timetable_summary")
        message = f"{dag_id} unpaused"
        if isinstance(summary, str) and summary not in ("", "None", "null") and not doc.get("is_paused"):
            message += (f": its schedule ({summary}) runs now, the latest interval's scheduled run starts at once"
                        f"{_scheduled_does(dag_id)}")
        return {"dag_id": dag_id, "is_paused": bool(doc.get("is_paused")), "message": message}

    def _pin_ttl_seconds(hours: float) -> float:
        """The pin's TTL, given in hours, in seconds; a refusal speaks in hours and names the field."""
        from seglake import limits
        from seglake.contract import show

        try:
            return limits.check("pin_ttl", "ttl_hours", hours, scale=HOUR_S)
        except ValidationError:
            lo, hi = limits.LIMITS["pin_ttl"].bounds(HOUR_S)
            raise ValidationError(f"field 'ttl_hours' (pin TTL, hours): {show(hours)} is not allowed; allowed: a "
                                  f"finite number of hours from {lo:.3g} (1 second) to {hi:g} (365 days)") from None

    # -- the document says what the API answers: 400 {"detail": ...}, never FastAPI's 422 --
    fastapi_openapi = api.openapi

    def openapi_with_refusals() -> dict:
        if api.openapi_schema is not None:
            return api.openapi_schema
        schema = fastapi_openapi()
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            comps.pop(name, None)
        comps["Refusal"] = {"title": "Refusal", "type": "object", "required": ["detail"],
                            "properties": {"detail": {"type": "string", "title": "Detail",
                                                      "description": "one sentence"}}}
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Refusal"}}}
        words = {"400": "Refused input: one sentence naming the field, the value and what is allowed",
                 "403": "Not allowed (no rights to trigger the DAG, or a browser session without the "
                        "'X-Seglake-Request: 1' header)",
                 "404": "Not found", "409": "Conflicts with the current state",
                 "503": "etcd or Airflow's API did not answer"}
        for path, ops in schema.get("paths", {}).items():
            for method, op in ops.items():
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                codes = ["400", *(["404"] if "{" in path else []), "503"]
                if method in ("post", "put", "delete"):
                    codes = ["400", "403", "404", "409", "503"]
                for code in codes:
                    responses.setdefault(code, {"description": words[code], "content": ref})
        return schema

    api.openapi = openapi_with_refusals
    return api
