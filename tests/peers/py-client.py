#!/usr/bin/env python3
"""Test peer: a Python `mcp` SDK client that runs a fixed script and prints ONE JSON line.

    --url URL  [--mode auto|2026-07-28|legacy]  [--transport sse]  [--timeout S]
    [--hang-ms N]  instead of the script: call `hang`, cancel it after N ms, print {"ok":true,"aborted":true}
"""

import argparse
import json
import sys

import anyio
from mcp import Client
from mcp.client.sse import sse_client
from mcp_types import ElicitResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--mode", default="auto", help="auto (default) | 2026-07-28 (pin) | legacy")
p.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
p.add_argument("--timeout", type=float, default=30.0)
p.add_argument("--hang-ms", type=int)
args = p.parse_args()
mode = "2026-07-28" if args.mode == "pin" else args.mode


def text_of(result) -> str | None:
    return next((c.text for c in result.content if c.type == "text"), None)


async def accept(_context, _params) -> ElicitResult:
    # Used for legacy push-style elicitation AND MRTR auto-fulfilment of input_required results.
    return ElicitResult(action="accept", content={"ok": True})


async def run() -> dict:
    server = sse_client(args.url) if args.transport == "sse" else args.url
    async with Client(server, mode=mode, elicitation_callback=accept) as client:
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
    print(json.dumps(out), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(anyio.run(main))
