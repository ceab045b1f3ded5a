#!/usr/bin/env python3
"""Test peer: a Python `mcp` SDK client that runs a fixed script and prints ONE JSON line.

    --url URL  [--mode auto|2026-07-28|legacy]  [--transport sse]  [--timeout S]
    [--hang-ms N]  instead of the script: call `hang`, cancel it after N ms, print {"ok":true,"aborted":true}
    [--ca FILE]  trust this PEM CA (plus the system store) for https URLs
    [--http2]    offer HTTP/2 via ALPN (h2 package); HTTP/1.1 stays the fallback
    With --ca or --http2 the output also carries "httpVersion" (the versions the responses came back on).
"""

import argparse
import json
import ssl
import sys
from contextlib import AsyncExitStack

import anyio
import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp_types import ElicitResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--mode", default="auto", help="auto (default) | 2026-07-28 (pin) | legacy")
p.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
p.add_argument("--timeout", type=float, default=30.0)
p.add_argument("--hang-ms", type=int)
p.add_argument("--ca", help="PEM CA bundle to trust (added to the system store)")
p.add_argument("--http2", action="store_true", help="offer h2 via ALPN (TLS only; h2c is not attempted)")
args = p.parse_args()
mode = "2026-07-28" if args.mode == "pin" else args.mode
custom_http = args.ca is not None or args.http2
http_versions: list[str] = []  # response.http_version of every response, in order


async def record_version(response: httpx2.Response) -> None:
    http_versions.append(response.http_version)


def http_client_factory(headers=None, timeout=None, auth=None) -> httpx2.AsyncClient:
    """Same shape and defaults as mcp's create_mcp_http_client, plus --ca / --http2 / the version hook."""
    kwargs = {
        "timeout": timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        "http2": args.http2,
        "event_hooks": {"response": [record_version]},
    }
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
        return sse_client(args.url, httpx_client_factory=http_client_factory) if custom_http else sse_client(args.url)
    if not custom_http:
        return args.url  # Client builds its own streamable_http_client (the unchanged default path)
    # streamable_http_client does not close a client it was handed: the stack does, after the session.
    http_client = await stack.enter_async_context(http_client_factory())
    return streamable_http_client(args.url, http_client=http_client)


def http_version() -> str | None:
    """"HTTP/2", "HTTP/1.1", or e.g. "HTTP/1.1,HTTP/2" when responses came back on different versions."""
    return ",".join(sorted(set(http_versions))) or None


def text_of(result) -> str | None:
    return next((c.text for c in result.content if c.type == "text"), None)


async def accept(_context, _params) -> ElicitResult:
    # Used for legacy push-style elicitation AND MRTR auto-fulfilment of input_required results.
    return ElicitResult(action="accept", content={"ok": True})


async def run() -> dict:
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            Client(await transport(stack), mode=mode, elicitation_callback=accept)
        )
        return await script(client)


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

    tools = [t.name for t in (await client.list_tools()).tools]
    echo = text_of(await client.call_tool("echo", {"text": "hi"}))
    progress = 0

    async def on_progress(_progress, _total, _message) -> None:
        nonlocal progress
        progress += 1

    slow = text_of(await client.call_tool("slow", {"steps": 3}, progress_callback=on_progress))
    resource = (await client.read_resource("mem://info")).contents[0].text
    prompt = (await client.get_prompt("greet", {"name": "edge"})).messages[0].content.text
    confirm = None
    if era == "modern" and "confirm" in tools:
        confirm = text_of(await client.call_tool("confirm", {}))
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
    if custom_http:
        out["httpVersion"] = http_version()
    print(json.dumps(out), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(anyio.run(main))
