#!/usr/bin/env node
// Test peer: an official-TS-SDK MCP client that runs a fixed script and prints ONE JSON line.
//   --url URL  --mode auto|pin|legacy  [--transport sse]  [--sdk v1]  [--timeout-ms N]  [--confirm]
//   [--hang-ms N]  instead of the script: call `hang`, abort it after N ms, print {"ok":true,"aborted":true}
//   [--bearer TOKEN]  send `Authorization: Bearer TOKEN` on every HTTP request
//   [--bearer-after-list TOKEN2]  after the listing step switch the same session to TOKEN2 (adds "sessionKept")
//   [--policy-probe [--call NAME]...]  instead of the script: list tools/prompts/resources (all pages),
//                     call each NAME with {text:"x"}, print {"ok":true,"tools":[…],"calls":{…},…}
//   [--auth-flow]     v2 Streamable HTTP + an in-memory OAuth provider; report the discovery/redirect steps
// See README.md for the output of each mode.
import { parseArgs } from 'node:util';
import * as v2 from '@modelcontextprotocol/client';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport as V1SSE, SseError as V1SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import {
    StreamableHTTPClientTransport as V1HTTP,
    StreamableHTTPError as V1HTTPError
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const { values: args } = parseArgs({
    options: {
        url: { type: 'string' },
        mode: { type: 'string', default: 'auto' },
        transport: { type: 'string', default: 'streamable-http' },
        sdk: { type: 'string', default: 'v2' },
        'timeout-ms': { type: 'string', default: '30000' },
        'hang-ms': { type: 'string' },
        bearer: { type: 'string' },
        'bearer-after-list': { type: 'string' },
        'policy-probe': { type: 'boolean', default: false },
        call: { type: 'string', multiple: true, default: [] },
        'auth-flow': { type: 'boolean', default: false },
        confirm: { type: 'boolean', default: false }
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

// ---- --bearer / --bearer-after-list / --policy-probe plumbing (inactive without those options) ----
const probe = args['policy-probe'];
const switchToken = args['bearer-after-list'];
const useBearer = args.bearer !== undefined || switchToken !== undefined;
// Only with the new options do the transports get extra options; without them they are built exactly as before.
const extended = probe || useBearer;
let currentToken = args.bearer; // undefined → no Authorization header (until --bearer-after-list switches)
const v1Headers = {}; // v1 transports re-read requestInit.headers on every request, so mutating it switches tokens
if (currentToken !== undefined) v1Headers.Authorization = `Bearer ${currentToken}`;
const setToken = t => {
    currentToken = t;
    v1Headers.Authorization = `Bearer ${t}`;
};
const httpLog = []; // every request the transport made: { method, url, status }
const recordingFetch = async (input, init) => {
    const entry = {
        method: (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase(),
        url: String(input instanceof Request ? input.url : input),
        status: null
    };
    httpLog.push(entry);
    const res = await fetch(input, init);
    entry.status = res.status;
    return res;
};
const calls = [].concat(args.call).flatMap(s => s.split(',')).map(s => s.trim()).filter(Boolean);

// HTTP status carried by the error itself (v2 SdkHttpError.status; v1 StreamableHTTPError/SseError and v2 SseError .code).
const errorHttpStatus = e => {
    if (typeof e?.status === 'number') return e.status;
    if ((e instanceof V1HTTPError || e instanceof V1SseError || e instanceof v2.SseError) && typeof e.code === 'number') return e.code;
    return undefined;
};
// The last >= 400 status in httpLog since index `mark` (POSTs only unless anyMethod: a background GET may 405).
const loggedErrorStatus = (mark, anyMethod) => {
    for (let i = httpLog.length - 1; i >= mark; i--) {
        const { method, status } = httpLog[i];
        if (status >= 400 && (anyMethod || method === 'POST')) return status;
    }
    return undefined;
};
// {code, message[, status]}: code = the JSON-RPC error code (numeric .code of ProtocolError/McpError), null for
// HTTP/transport errors; status = the HTTP status when the error or the requests it made show one.
const errInfo = (e, mark, anyMethod = false) => {
    let status = errorHttpStatus(e);
    const code = status === undefined && typeof e?.code === 'number' ? e.code : null;
    status ??= loggedErrorStatus(mark, anyMethod);
    const out = { code, message: String(e?.message ?? e) };
    if (status !== undefined) out.status = status;
    return out;
};
// Session identity the transport holds: Mcp-Session-Id (Streamable HTTP) or the SSE message endpoint URL.
const sessionOf = t => t?.sessionId ?? t?._endpoint?.href ?? null;

async function listAll(out, key, list, pick) {
    const names = [];
    const mark = httpLog.length;
    let cursor;
    try {
        for (let page = 0; page < 1000; page++) {
            const r = await list(cursor === undefined ? undefined : { cursor });
            names.push(...(r?.[key] ?? []).map(pick));
            cursor = r?.nextCursor;
            if (!cursor) break;
        }
        out[key] = names;
    } catch (e) {
        out[`${key}Error`] = errInfo(e, mark);
    }
}

async function policyProbe(client, transport, head) {
    const out = { ok: true, ...head };
    await listAll(out, 'tools', p => client.listTools(p), t => t.name);
    await listAll(out, 'prompts', p => client.listPrompts(p), p => p.name);
    await listAll(out, 'resources', p => client.listResources(p), r => r.uri);
    const before = sessionOf(transport);
    if (switchToken !== undefined) setToken(switchToken);
    out.calls = {};
    for (const name of calls) {
        const mark = httpLog.length;
        try {
            const r = await client.callTool({ name, arguments: { text: 'x' } });
            out.calls[name] = { isError: r?.isError === true, text: textOf(r) };
        } catch (e) {
            out.calls[name] = { error: errInfo(e, mark) };
        }
    }
    const after = sessionOf(transport);
    out.sessionKept = before === after;
    out.hadSession = before !== null;
    await client.close().catch(() => {});
    return emit(out, 0);
}

async function authFlow() {
    // v2 Streamable HTTP + in-memory OAuth provider; connect() is expected to end in UnauthorizedError after
    // redirectToAuthorization(). Reports provider method calls and every URL fetched, in order.
    const redirectUrl = 'http://127.0.0.1:9/callback';
    const calls = [];
    const fetched = [];
    const store = {};
    let redirect = null;
    const realFetch = globalThis.fetch;
    globalThis.fetch = (input, init) => {
        const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
        fetched.push(`${method} ${input instanceof Request ? input.url : String(input)}`);
        return realFetch(input, init);
    };
    const methods = {
        clientInformation: () => store.clientInformation,
        saveClientInformation: ci => { store.clientInformation = ci; },
        tokens: () => undefined,
        saveTokens: t => { store.tokens = t; },
        redirectToAuthorization: u => { redirect = u.href; },
        saveCodeVerifier: v => { store.codeVerifier = v; },
        codeVerifier: () => store.codeVerifier
    };
    const provider = {
        get redirectUrl() { return redirectUrl; },
        get clientMetadata() {
            return {
                redirect_uris: [redirectUrl],
                client_name: 'mcp-edge-test',
                grant_types: ['authorization_code', 'refresh_token'],
                response_types: ['code'],
                token_endpoint_auth_method: 'none'
            };
        }
    };
    for (const [name, fn] of Object.entries(methods)) {
        provider[name] = (...a) => { calls.push(name); return fn(...a); };
    }
    const versionNegotiation = { auto: { mode: 'auto' }, pin: { mode: { pin: '2026-07-28' } }, legacy: undefined }[args.mode];
    if (!(args.mode in { auto: 1, pin: 1, legacy: 1 })) throw new Error(`unknown --mode ${args.mode}`);
    const client = new v2.Client(info, { capabilities, versionNegotiation });
    client.setRequestHandler('elicitation/create', accept);
    const transport = new v2.StreamableHTTPClientTransport(new URL(args.url), { authProvider: provider });
    let error = null;
    try {
        await client.connect(transport);
    } catch (e) {
        error = String(e?.message ?? e);
    }
    if (error === null) await client.close().catch(() => {});
    const out = { ok: error === null, authFlow: { redirect, calls, fetched } };
    if (error !== null) out.error = error;
    return emit(out, redirect !== null ? 0 : 1);
}

async function main() {
    if (!args.url) throw new Error('--url is required');
    if (args['auth-flow']) return authFlow();
    const url = new URL(args.url);
    const sse = args.transport === 'sse';
    const isV1 = args.sdk === 'v1';
    let client, transport;
    if (isV1) {
        client = new V1Client(info, { capabilities });
        client.setRequestHandler(ElicitRequestSchema, accept);
        const opts = extended ? { fetch: recordingFetch, ...(useBearer ? { requestInit: { headers: v1Headers } } : {}) } : undefined;
        transport = sse ? new V1SSE(url, opts) : new V1HTTP(url, opts);
    } else {
        const versionNegotiation = { auto: { mode: 'auto' }, pin: { mode: { pin: '2026-07-28' } }, legacy: undefined }[args.mode];
        if (!(args.mode in { auto: 1, pin: 1, legacy: 1 })) throw new Error(`unknown --mode ${args.mode}`);
        client = new v2.Client(info, { capabilities, versionNegotiation });
        // Used for legacy push-style elicitation AND for MRTR auto-fulfilment of input_required results.
        client.setRequestHandler('elicitation/create', accept);
        // v2: a minimal AuthProvider; token() is asked on every request, so switching currentToken switches the header.
        const opts = extended ? { fetch: recordingFetch, ...(useBearer ? { authProvider: { token: async () => currentToken } } : {}) } : undefined;
        transport = sse ? new v2.SSEClientTransport(url, opts) : new v2.StreamableHTTPClientTransport(url, opts);
    }
    if (probe) console.debug = (...a) => console.error(...a); // v2 logs "capability not advertised" to stdout
    if (extended) {
        try {
            await client.connect(transport);
        } catch (e) {
            const status = errorHttpStatus(e) ?? loggedErrorStatus(0, true);
            return emit({ ok: false, error: String(e?.stack ?? e), ...(status !== undefined ? { status } : {}) }, 1);
        }
    } else {
        await client.connect(transport);
    }
    const protocolVersion = isV1
        ? (transport.protocolVersion ?? transport._protocolVersion ?? null)
        : (client.getNegotiatedProtocolVersion() ?? null);
    const era = isV1 ? 'legacy' : (client.getProtocolEra() ?? null);
    const modern = era === 'modern';

    if (probe) return policyProbe(client, transport, { protocolVersion, era });
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
    const sessionBefore = sessionOf(transport);
    if (switchToken !== undefined) setToken(switchToken);
    const echo = textOf(await client.callTool({ name: 'echo', arguments: { text: 'hi' } }));
    let progress = 0;
    const onprogress = () => { progress++; };
    const slowRes = isV1
        ? await client.callTool({ name: 'slow', arguments: { steps: 3 } }, undefined, { onprogress })
        : await client.callTool({ name: 'slow', arguments: { steps: 3 } }, { onprogress });
    const resource = (await client.readResource({ uri: 'mem://info' })).contents[0]?.text ?? null;
    const prompt = (await client.getPrompt({ name: 'greet', arguments: { name: 'edge' } })).messages[0]?.content?.text ?? null;
    let confirm = null;
    if ((modern || args.confirm) && tools.includes('confirm')) confirm = textOf(await client.callTool({ name: 'confirm', arguments: {} }));
    const sessionAfter = sessionOf(transport);
    await client.close().catch(() => {});
    const switched = switchToken !== undefined
        ? { sessionKept: sessionBefore === sessionAfter, hadSession: sessionBefore !== null }
        : {};
    emit({ ok: true, protocolVersion, era, tools, echo, progress, slow: textOf(slowRes), resource, prompt, confirm, ...switched }, 0);
}

main().catch(fail);
