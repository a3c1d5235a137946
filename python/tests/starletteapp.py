"""A Starlette app gated by capgate.asgi.CapacityMiddleware, for
tests/test_asgi_starlette.py (served by uvicorn; CAPGATE_TEST_STUB is the
decision stub). POST /v1/chat is a "chat" call of the model its JSON body
names, of the caller "Bearer u-<name>" names; GET /v1/models and
everything outside /v1/ is light. X-Test-Hold-Ms holds the call,
X-Test-Stream: n streams the answer in n chunks, X-Test-Raise makes the
classifier raise."""
import asyncio
import json
import os

from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from capgate.asgi import CapacityMiddleware

RUNS = os.environ.get("CAPGATE_TEST_RUNS", "")


def identify(request):
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer u-"):
        return None
    return {"user": auth[len("Bearer u-"):], "groups": []}


def classify(request):
    if request.method != "POST" or request.path != "/v1/chat":
        return None
    if request.headers.get("x-test-raise"):
        raise RecursionError("the classifier failed")
    who = identify(request)
    if who is None:
        return None
    body = request.json()
    model = body.get("model") if isinstance(body, dict) else None
    return dict(who, route="chat", fields={"model": model if isinstance(model, str) else ""})


async def chat(request):
    hold = int(request.headers.get("x-test-hold-ms", "0")) / 1000
    body = await request.body()
    d = request.scope.get("state", {}).get("capgate_decision")
    if RUNS:
        with open(RUNS, "a") as f:
            f.write(json.dumps({"decision": d.decision if d else None, "size": len(body)}) + "\n")
    chunks = int(request.headers.get("x-test-stream", "0"))
    if chunks:
        async def stream():
            for i in range(chunks):
                yield (json.dumps({"chunk": i}) + "\n").encode()
                await asyncio.sleep(hold / chunks)
        return StreamingResponse(stream(), media_type="application/x-ndjson")
    await asyncio.sleep(hold)
    return JSONResponse({"ran": True, "size": len(body)})


async def models(request):
    return JSONResponse({"data": [{"id": "small"}]})


app = CapacityMiddleware(
    Starlette(routes=[Route("/v1/chat", chat, methods=["POST"]), Route("/v1/models", models)]),
    url=os.environ.get("CAPGATE_TEST_STUB", "unix:/nonexistent/stub.sock"), classify=classify, identify=identify,
    paths=("/v1/",), max_body=64 << 10, timeout=1.0)
