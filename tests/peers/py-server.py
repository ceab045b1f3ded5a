#!/usr/bin/env python3
"""Test peer: a Python `mcp` SDK (MCPServer) server on 127.0.0.1. See README.md for the contract.

    --transport streamable-http|sse  [--stateless]  [--json-response]  --instance NAME  --port N (0 = ephemeral)
    [--max-body BYTES]  (SDK default 4 MiB)
    [--tls-cert FILE --tls-key FILE]  serve HTTPS (HTTP/1.1) instead of HTTP
"""

import argparse
import asyncio
import hashlib
import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

p = argparse.ArgumentParser()
p.add_argument("--transport", choices=["streamable-http", "sse", "stdio"], default="streamable-http")
p.add_argument("--stateless", action="store_true", help="streamable-http: no 2025 sessions")
p.add_argument("--json-response", action="store_true", help="streamable-http: legacy leg answers JSON, not SSE")
p.add_argument("--instance", default="py")
p.add_argument("--port", type=int, default=0)
p.add_argument("--max-body", type=int, default=4 * 1024 * 1024)
p.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS")
p.add_argument("--tls-key", help="PEM private key for --tls-cert")
args = p.parse_args()
if (args.tls_cert is None) != (args.tls_key is None):
    p.error("--tls-cert and --tls-key go together")
instance = args.instance

mcp = MCPServer(f"py-peer-{instance}", version="1.0.0", log_level="WARNING")


# `TOOL <name>` on stderr for every run of echo and whoami: tests check what reached the server.
@mcp.tool(description="echo text")
def echo(text: str) -> str:
    print("TOOL echo", file=sys.stderr, flush=True)
    return f"{instance}:{text}"


@mcp.tool(description="instance name")
def whoami() -> str:
    print("TOOL whoami", file=sys.stderr, flush=True)
    return instance


NOTES: list[str] = []


def note(text: str) -> str:
    print("TOOL note", file=sys.stderr, flush=True)
    NOTES.append(text)
    return ",".join(NOTES)


def pid() -> str:
    return str(os.getpid())


if args.transport == "stdio":  # only over stdio: the HTTP modes' tool lists are counted elsewhere
    mcp.tool(description="remember text in this process; all remembered")(note)
    mcp.tool(description="this process id")(pid)


@mcp.tool(description="progress then done")
async def slow(steps: int, ctx: Context) -> str:
    # progress i, then ~100 ms, so the result trails the last progress notification
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps)
        await anyio.sleep(0.1)
    return f"{instance}:done"


@mcp.tool(description="sha256 hex of data")
def digest(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


@mcp.tool(description="never returns until aborted")
async def hang() -> str:
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        print("ABORTED hang", file=sys.stderr, flush=True)
        raise
    return "unreachable"


async def confirm(ctx: Context) -> str | InputRequiredResult:
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise ValueError("confirm needs the 2026-07-28 multi-round-trip flow")
    answer = (ctx.input_responses or {}).get("confirm")
    if isinstance(answer, ElicitResult):
        return f"{instance}:{'confirmed' if answer.action == 'accept' else answer.action}"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    return InputRequiredResult(
        input_requests={
            "confirm": ElicitRequest(
                params=ElicitRequestFormParams(message=f"Confirm on {instance}?", requested_schema=schema)
            )
        }
    )


if args.transport != "stdio":  # a stdio process speaks a 2025 revision (the edge's)
    confirm = mcp.tool(description="MRTR elicitation round trip (2026-07-28 only)")(confirm)


@mcp.resource("mem://info", name="info", mime_type="text/plain", description="instance name")
def info() -> str:
    return instance


@mcp.prompt(description="greeting")
def greet(name: str) -> str:
    return f"Hello {name} from {instance}"


class LogRequests:
    """ASGI wrapper: one `REQ <method> <path[?query]>` line on stderr per HTTP request."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            qs = scope.get("query_string", b"").decode("latin-1")
            print(f"REQ {scope['method']} {scope['path']}{'?' + qs if qs else ''}", file=sys.stderr, flush=True)
        await self.app(scope, receive, send)


async def main() -> None:
    # No Host/Origin allow-list: the edge under test may present any Host.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    if args.transport == "sse":
        app = mcp.sse_app(transport_security=security, max_request_body_size=args.max_body)
    else:
        app = mcp.streamable_http_app(
            stateless_http=args.stateless,
            json_response=args.json_response,
            max_request_body_size=args.max_body,
            transport_security=security,
        )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    config = uvicorn.Config(
        LogRequests(app),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=1,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # startup failed: surface the error
            return
        await asyncio.sleep(0.02)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    await task


if __name__ == "__main__":
    if args.transport == "stdio":
        print(f"STDIO {os.getpid()}", file=sys.stderr, flush=True)
        mcp.run("stdio")
    else:
        asyncio.run(main())
