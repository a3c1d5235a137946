"""A fake OpenAI-compatible inference API (Starlette) that decides its
heavy calls itself, with capgate's decision service and the inference
policy (../policy.yaml): `uvicorn server:app`.

POST /v1/chat/completions, /v1/completions and /v1/embeddings are heavy
(the policy's routes chat, completions and embeddings, each of the model
its JSON body names; an embeddings call's inputs are its "input" texts);
GET /v1/models is light. Callers send `Authorization: Bearer <token>` of
../tokens.json (fay, free; pat, pro). Every call "runs" for
INFERENCE_SECONDS (default 1) or the X-Demo-Seconds it sends.

From the environment: CAPGATE_URL (default unix:/run/capgate/decide.sock),
CAPGATE_TIMEOUT (seconds), INFERENCE_TOKENS (default ../tokens.json),
INFERENCE_RECORD (a file every run is appended to, for the end-to-end test).
"""
import asyncio
import json
import os
import time
import uuid

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from capgate.asgi import CapacityMiddleware

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.environ.get("INFERENCE_TOKENS", os.path.join(HERE, "..", "tokens.json"))) as f:
    TOKENS = {t["token"]: t for t in json.load(f)}
RECORD = os.environ.get("INFERENCE_RECORD")
ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/embeddings": "embeddings"}


def identify(request):
    """The caller of a request (the app's own authentication): its user
    and groups, or None."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    t = TOKENS.get(token.strip()) if scheme.lower() == "bearer" else None
    if t is None:
        return None
    return {"user": t["username"], "groups": list(t.get("auth_groups", []))}


def classify(request):
    """The call of a heavy request, named by the policy's route and fields;
    None for a light one, or one the app refuses itself (no valid token)."""
    route = ROUTES.get(request.path) if request.method == "POST" else None
    if route is None:
        return None
    who = identify(request)
    if who is None:
        return None  # the app answers 401
    try:
        body = request.json()
    except ValueError:
        body = None  # still heavy: counted as a call of no model, as the gateway counts it
    body = body if isinstance(body, dict) else {}
    model = body.get("model")
    fields = {"model": model if isinstance(model, str) else ""}
    if route == "embeddings":
        inputs = body.get("input")
        fields["inputs"] = len(inputs) if isinstance(inputs, list) else 0
    return dict(who, route=route, fields=fields, request_id=request.headers.get("x-request-id"))


def _record(line):
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(json.dumps(line) + "\n")


async def infer(request):
    who = identify(request)
    if who is None:
        return JSONResponse({"error": {"message": "invalid token"}}, status_code=401)
    try:
        body = json.loads(await request.body())
    except ValueError:
        return JSONResponse({"error": {"message": "the body is not JSON"}}, status_code=400)
    d = request.scope.get("state", {}).get("capgate_decision")
    seconds = float(request.headers.get("x-demo-seconds", os.environ.get("INFERENCE_SECONDS", "1")))
    run = {"run": uuid.uuid4().hex, "user": who["user"], "model": body.get("model"),
           "decision": d.decision if d is not None else None}
    _record(dict(run, ev="start", t=time.monotonic()))
    try:
        await asyncio.sleep(min(max(seconds, 0.0), 30.0))  # the model thinks, holding no thread
    finally:
        _record(dict(run, ev="end", t=time.monotonic()))
    return JSONResponse({"object": "chat.completion", "model": body.get("model"),
                         "choices": [{"message": {"role": "assistant", "content": "…"}}]})


async def models(request):
    return JSONResponse({"object": "list", "data": [{"id": "small"}, {"id": "large"}]})


app = CapacityMiddleware(
    Starlette(routes=[Route(path, infer, methods=["POST"]) for path in ROUTES] + [Route("/v1/models", models)]),
    url=os.environ.get("CAPGATE_URL", "unix:/run/capgate/decide.sock"),
    timeout=float(os.environ.get("CAPGATE_TIMEOUT", "0.25")),
    classify=classify,
    identify=identify,
    paths=("/v1/",),
)
