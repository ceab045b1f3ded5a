#!/usr/bin/env node
// Test peer: an official-TS-SDK MCP client that runs a fixed script and prints ONE JSON line.
//   --url URL  --mode auto|pin|legacy  [--transport sse]  [--sdk v1]  [--timeout-ms N]
//   [--hang-ms N]  instead of the script: call `hang`, abort it after N ms, print {"ok":true,"aborted":true}
import { parseArgs } from 'node:util';
import * as v2 from '@modelcontextprotocol/client';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport as V1SSE } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport as V1HTTP } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const { values: args } = parseArgs({
    options: {
        url: { type: 'string' },
        mode: { type: 'string', default: 'auto' },
        transport: { type: 'string', default: 'streamable-http' },
        sdk: { type: 'string', default: 'v2' },
        'timeout-ms': { type: 'string', default: '30000' },
        'hang-ms': { type: 'string' }
    }
});

const emit = (obj, code) => {
    process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(code));
};
const fail = e => emit({ ok: false, error: String(e?.stack ?? e) }, 1);
setTimeout(() => fail(`timeout after ${args['timeout-ms']} ms`), Number(args['timeout-ms'])).unref();

const textOf = r => r?.content?.find(c => c.type === 'text')?.text ?? null;
const info = { name: 'ts-peer-client', version: '1.0.0' };
const capabilities = { elicitation: { form: {} } };
const accept = async () => ({ action: 'accept', content: { ok: true } });

async function main() {
    if (!args.url) throw new Error('--url is required');
    const url = new URL(args.url);
    const sse = args.transport === 'sse';
    const isV1 = args.sdk === 'v1';
    let client, transport;
    if (isV1) {
        client = new V1Client(info, { capabilities });
        client.setRequestHandler(ElicitRequestSchema, accept);
        transport = sse ? new V1SSE(url) : new V1HTTP(url);
    } else {
        const versionNegotiation = { auto: { mode: 'auto' }, pin: { mode: { pin: '2026-07-28' } }, legacy: undefined }[args.mode];
        if (!(args.mode in { auto: 1, pin: 1, legacy: 1 })) throw new Error(`unknown --mode ${args.mode}`);
        client = new v2.Client(info, { capabilities, versionNegotiation });
        // Used for legacy push-style elicitation AND for MRTR auto-fulfilment of input_required results.
        client.setRequestHandler('elicitation/create', accept);
        transport = sse ? new v2.SSEClientTransport(url) : new v2.StreamableHTTPClientTransport(url);
    }
    await client.connect(transport);
    const protocolVersion = isV1
        ? (transport.protocolVersion ?? transport._protocolVersion ?? null)
        : (client.getNegotiatedProtocolVersion() ?? null);
    const era = isV1 ? 'legacy' : (client.getProtocolEra() ?? null);
    const modern = era === 'modern';

    if (args['hang-ms']) {
        // Legacy era: the SDK sends notifications/cancelled; modern era: it closes the POST's stream.
        const signal = AbortSignal.timeout(Number(args['hang-ms']));
        const call = { name: 'hang', arguments: {} };
        const err = await (isV1 ? client.callTool(call, undefined, { signal }) : client.callTool(call, { signal })).then(
            () => null, e => e);
        if (!err) throw new Error('hang returned a result');
        await new Promise(r => setTimeout(r, 200)); // let the cancellation reach the server before we exit
        await client.close().catch(() => {});
        return emit({ ok: true, protocolVersion, era, aborted: true, error: String(err?.message ?? err) }, 0);
    }
    const tools = (await client.listTools()).tools.map(t => t.name);
    const echo = textOf(await client.callTool({ name: 'echo', arguments: { text: 'hi' } }));
    let progress = 0;
    const onprogress = () => { progress++; };
    const slowRes = isV1
        ? await client.callTool({ name: 'slow', arguments: { steps: 3 } }, undefined, { onprogress })
        : await client.callTool({ name: 'slow', arguments: { steps: 3 } }, { onprogress });
    const resource = (await client.readResource({ uri: 'mem://info' })).contents[0]?.text ?? null;
    const prompt = (await client.getPrompt({ name: 'greet', arguments: { name: 'edge' } })).messages[0]?.content?.text ?? null;
    let confirm = null;
    if (modern && tools.includes('confirm')) confirm = textOf(await client.callTool({ name: 'confirm', arguments: {} }));
    await client.close().catch(() => {});
    emit({ ok: true, protocolVersion, era, tools, echo, progress, slow: textOf(slowRes), resource, prompt, confirm }, 0);
}

main().catch(fail);
