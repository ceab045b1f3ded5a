#!/usr/bin/env python3
"""Test peer: a Python `mcp` SDK client that runs a fixed script and prints ONE JSON line.

    --url URL  [--mode auto|2026-07-28|legacy]  [--transport sse]  [--timeout S]  [--confirm]
    [--hang-ms N]  instead of the script: call `hang`, cancel it after N ms, print {"ok":true,"aborted":true}
    [--ca FILE]  trust this PEM CA (plus the system store) for https URLs
    [--http2]    offer HTTP/2 via ALPN (h2 package); HTTP/1.1 stays the fallback
    With --ca or --http2 the output also carries "httpVersion" (the versions the responses came back on).
    [--bearer TOKEN]  send `Authorization: Bearer TOKEN` on every HTTP request
    [--bearer-after-list TOKEN2]  after the listing step switch the same session to TOKEN2 (adds "sessionKept")
    [--policy-probe [--call NAME]...]  instead of the script: list tools/prompts/resources (all pages),
                      call each NAME with {"text":"x"}, print {"ok":true,"tools":[...],"calls":{...},...}
    See README.md for the output of each mode.
"""

import argparse
import json
import ssl
import sys
from contextlib import AsyncExitStack
from urllib.parse import parse_qs

import anyio
import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--mode", default="auto", help="auto (default) | 2026-07-28 (pin) | legacy")
p.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
p.add_argument("--confirm", action="store_true", help="call confirm in the legacy era too (a bridged client answering the server's elicitation)")
p.add_argument("--timeout", type=float, default=30.0)
p.add_argument("--hang-ms", type=int)
p.add_argument("--ca", help="PEM CA bundle to trust (added to the system store)")
p.add_argument("--http2", action="store_true", help="offer h2 via ALPN (TLS only; h2c is not attempted)")
p.add_argument("--bearer", help="send Authorization: Bearer TOKEN on every request")
p.add_argument("--bearer-after-list", help="switch to this bearer token after the listing step")
p.add_argument("--policy-probe", action="store_true", help="list everything, call each --call tool, report")
p.add_argument("--call", action="append", default=[], help="tool to call in --policy-probe (repeatable, or a,b,c)")
args = p.parse_args()
mode = "2026-07-28" if args.mode == "pin" else args.mode
custom_http = args.ca is not None or args.http2
use_bearer = args.bearer is not None or args.bearer_after_list is not None
# --bearer / --bearer-after-list / --policy-probe: our own httpx2 client (SDK default timeouts) with a request
# log; without them the unchanged default path is taken.
extended = args.policy_probe or use_bearer
own_http = custom_http or extended
call_names = [n.strip() for c in args.call for n in c.split(",") if n.strip()]
http_versions: list[str] = []  # response.http_version of every response, in order
http_log: list[dict] = []  # every request: {"method", "session", "status"} (status filled in on the response)


class SwitchableBearer(httpx2.Auth):
    """Sets `Authorization: Bearer <token>` on every request; `token` may be changed mid-session."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def auth_flow(self, request: httpx2.Request):
        if self.token is not None:
            request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


bearer_auth = SwitchableBearer(args.bearer) if use_bearer else None


async def record_version(response: httpx2.Response) -> None:
    http_versions.append(response.http_version)


def session_of(request: httpx2.Request) -> str | None:
    """The session a request belongs to: Mcp-Session-Id (Streamable HTTP) or the SSE endpoint's session query."""
    sid = request.headers.get("mcp-session-id")
    if sid:
        return sid
    q = parse_qs(request.url.query.decode() if isinstance(request.url.query, bytes) else str(request.url.query))
    return (q.get("session_id") or q.get("sessionId") or [None])[0]


async def log_request(request: httpx2.Request) -> None:
    request.extensions["peer_log"] = entry = {"method": request.method, "session": session_of(request), "status": None}
    http_log.append(entry)


# Set on every logged response: what watched() waits on instead of polling.
status_waiters: list = []


async def log_response(response: httpx2.Response) -> None:
    entry = response.request.extensions.get("peer_log")
    if entry is not None:
        entry["status"] = response.status_code
    for waiter in status_waiters:
        waiter.set()


def last_post_session() -> str | None:
    """Session id carried by the most recent POST (= what the transport holds), None if none/sessionless."""
    return next((e["session"] for e in reversed(http_log) if e["method"] == "POST"), None)


def logged_error_status(mark: int, any_method: bool = False) -> int | None:
    """The last >= 400 status since http_log[mark] (POSTs only unless any_method: a background GET may 405)."""
    for e in reversed(http_log[mark:]):
        if e["status"] is not None and e["status"] >= 400 and (any_method or e["method"] == "POST"):
            return e["status"]
    return None


def err_info(e: BaseException, mark: int, any_method: bool = False) -> dict:
    """{code, message[, status]}: code = JSON-RPC error code (MCPError), else None; status = HTTP status if seen."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    status = e.response.status_code if isinstance(e, httpx2.HTTPStatusError) else logged_error_status(mark, any_method)
    if isinstance(e, MCPError):
        out = {"code": e.code, "message": e.message}
    else:
        out = {"code": None, "message": f"{type(e).__name__}: {e}"}
    if status is not None:
        out["status"] = status
    return out


def http_client_factory(headers=None, timeout=None, auth=None) -> httpx2.AsyncClient:
    """Same shape and defaults as mcp's create_mcp_http_client, plus --ca / --http2 / the version hook."""
    kwargs = {
        "timeout": timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        "http2": args.http2,
        "event_hooks": {"response": [record_version]},
    }
    if extended:
        kwargs["event_hooks"] = {"request": [log_request], "response": [record_version, log_response]}
    if args.ca:
        ctx = ssl.create_default_context()
        ctx.load_verify_locations(cafile=args.ca)
        kwargs["verify"] = ctx
    if headers is not None:
        kwargs["headers"] = headers
    if auth is not None:
        kwargs["auth"] = auth
    return httpx2.AsyncClient(**kwargs)


async def transport(stack: AsyncExitStack):
    if args.transport == "sse":
        if not own_http:
            return sse_client(args.url)
        return sse_client(args.url, httpx_client_factory=http_client_factory, auth=bearer_auth)
    if not own_http:
        return args.url  # Client builds its own streamable_http_client (the unchanged default path)
    # streamable_http_client does not close a client it was handed: the stack does, after the session.
    http_client = await stack.enter_async_context(http_client_factory(auth=bearer_auth))
    return streamable_http_client(args.url, http_client=http_client)


def http_version() -> str | None:
    """"HTTP/2", "HTTP/1.1", or e.g. "HTTP/1.1,HTTP/2" when responses came back on different versions."""
    return ",".join(sorted(set(http_versions))) or None


def text_of(result) -> str | None:
    return next((c.text for c in result.content if c.type == "text"), None)


async def accept(_context, _params) -> ElicitResult:
    # Used for legacy push-style elicitation AND MRTR auto-fulfilment of input_required results.
    return ElicitResult(action="accept", content={"ok": True})


connected = False
probe_result: dict | None = None  # set once --policy-probe has its answer (a failing close does not lose it)


async def run() -> dict:
    global connected
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            Client(await transport(stack), mode=mode, elicitation_callback=accept)
        )
        connected = True
        return await script(client)


GIVE_UP_S = 5.0


async def watched(fn) -> dict:
    """{"value": await fn()} or {"error": {code, message[, status]}}. The SDK's SSE transport never answers a
    request whose POST got a non-2xx status (its post_writer logs the error and stops), so when a POST made
    since the start got >= 400 and fn() is still pending GIVE_UP_S later, give up on it with that status (an
    answer that does come ends the wait at once; the grace is long so that a busy machine is not misread)."""
    mark = len(http_log)
    box: dict = {}
    done = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def run_fn() -> None:
            try:
                box["value"] = await fn()
            except Exception as e:  # noqa: BLE001 - record, do not abort the probe
                box["error"] = err_info(e, mark)
            done.set()
            tg.cancel_scope.cancel()

        async def watch() -> None:
            while (status := logged_error_status(mark)) is None:
                waiter = anyio.Event()
                status_waiters.append(waiter)
                try:
                    if logged_error_status(mark) is None:
                        await waiter.wait()
                finally:
                    status_waiters.remove(waiter)
            with anyio.move_on_after(GIVE_UP_S):
                await done.wait()
            if not box:
                box["error"] = {
                    "code": None,
                    "message": f"HTTP {status} on POST and no JSON-RPC response (the SDK dropped the request)",
                    "status": status,
                }
            tg.cancel_scope.cancel()

        tg.start_soon(run_fn)
        tg.start_soon(watch)
    return box


async def list_all(out: dict, key: str, list_page, pick) -> None:
    """out[key] = every item over all nextCursor pages, or out[key + "Error"] = {code, message[, status]}."""

    async def pages() -> list:
        names: list = []
        cursor = None
        for _ in range(1000):
            page = await list_page(cursor=cursor)
            names.extend(pick(x) for x in getattr(page, key))
            cursor = page.next_cursor
            if not cursor:
                break
        return names

    box = await watched(pages)
    if "error" in box:
        out[f"{key}Error"] = box["error"]
    else:
        out[key] = box["value"]


async def policy_probe(client: Client, version: str, era: str) -> dict:
    global probe_result
    out: dict = {"ok": True, "protocolVersion": version, "era": era}
    await list_all(out, "tools", client.list_tools, lambda t: t.name)
    await list_all(out, "prompts", client.list_prompts, lambda p: p.name)
    await list_all(out, "resources", client.list_resources, lambda r: str(r.uri))
    before = last_post_session()
    if args.bearer_after_list is not None:
        bearer_auth.token = args.bearer_after_list
    calls: dict = {}
    for name in call_names:
        box = await watched(lambda: client.call_tool(name, {"text": "x"}))
        if "error" in box:
            calls[name] = {"error": box["error"]}
        else:
            calls[name] = {"isError": bool(box["value"].is_error), "text": text_of(box["value"])}
    out["calls"] = calls
    after = last_post_session()
    out["sessionKept"] = before == after
    out["hadSession"] = before is not None
    probe_result = out
    return out


async def script(client: Client) -> dict:
    version = client.protocol_version
    era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
    if args.hang_ms is not None:
        # Legacy era: the SDK sends notifications/cancelled; modern era: it aborts the POST.
        with anyio.move_on_after(args.hang_ms / 1000) as scope:
            await client.call_tool("hang", {})
        if not scope.cancelled_caught:
            raise RuntimeError("hang returned a result")
        await anyio.sleep(0.2)  # let the cancellation reach the server before we exit
        return {"ok": True, "protocolVersion": version, "era": era, "aborted": True}
    if args.policy_probe:
        return await policy_probe(client, version, era)

    tools = [t.name for t in (await client.list_tools()).tools]
    session_before = last_post_session()
    if args.bearer_after_list is not None:
        bearer_auth.token = args.bearer_after_list
    echo = text_of(await client.call_tool("echo", {"text": "hi"}))
    progress = 0

    async def on_progress(_progress, _total, _message) -> None:
        nonlocal progress
        progress += 1

    slow = text_of(await client.call_tool("slow", {"steps": 3}, progress_callback=on_progress))
    resource = (await client.read_resource("mem://info")).contents[0].text
    prompt = (await client.get_prompt("greet", {"name": "edge"})).messages[0].content.text
    confirm = None
    if (era == "modern" or args.confirm) and "confirm" in tools:
        confirm = text_of(await client.call_tool("confirm", {}))
    switched = {}
    if args.bearer_after_list is not None:
        session_after = last_post_session()
        switched = {"sessionKept": session_before == session_after, "hadSession": session_before is not None}
    return {
        "ok": True,
        "protocolVersion": version,
        "era": era,
        "tools": tools,
        "echo": echo,
        "progress": progress,
        "slow": slow,
        "resource": resource,
        "prompt": prompt,
        "confirm": confirm,
        **switched,
    }


async def main() -> int:
    try:
        with anyio.fail_after(args.timeout):
            out = await run()
        code = 0
    except BaseException as e:  # noqa: BLE001 - report everything (incl. ExceptionGroup) as one JSON line
        if isinstance(e, KeyboardInterrupt):
            raise
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]  # unwrap anyio task-group wrappers to the real error
        out, code = {"ok": False, "error": f"{type(e).__name__}: {e}"}, 1
        if extended:
            if probe_result is not None:  # the probe finished; only closing the session failed
                out, code = dict(probe_result, closeError=out["error"]), 0
            elif not connected:
                status = e.response.status_code if isinstance(e, httpx2.HTTPStatusError) else None
                status = status if status is not None else logged_error_status(0, any_method=True)
                if status is not None:
                    out["status"] = status
    if custom_http:
        out["httpVersion"] = http_version()
    print(json.dumps(out), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(anyio.run(main))
