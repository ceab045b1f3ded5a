#!/usr/bin/env node
// Test peer: an official-SDK MCP client with OAuth client_credentials (machine to machine) that
// runs into the edge's per-tool scopes and lets the SDK step up. Prints ONE JSON line.
//   --url URL                         the edge's MCP URL (a route with auth)
//   --client-id ID --client-secret S  the confidential client at the authorization server
//   [--scope "read"]   the first token's scope. Given: the 401 of a bare POST (`ping`, no token) names
//                      the metadata (resource_metadata), then the SDK's own auth() gets a token with
//                      exactly this scope before connecting. Not given: nothing is done before
//                      connecting; the SDK's transport meets the 401 itself and picks the scope as
//                      SEP-835 says: the 401's scope=, else the metadata's scopes_supported (which
//                      on the edge lists every scope a [[routes.scopes]] rule requires, so without
//                      `[identity] scopes` the first token already has them all: no step-up).
//   [--call NAME]...   tools to call, repeatable or comma-separated; arguments: each required
//                      property of the tool's inputSchema (string "hi", number 1, boolean true)
//   [--issuer URL]     the expected authorization server (`expectedIssuer`); default: the first
//                      `authorization_servers` entry of the edge's metadata document
//   [--sdk v2|v1]      v2: @modelcontextprotocol/client 2.4.0 (default); v1: @modelcontextprotocol/sdk 1.32.2
//   [--mode auto|pin|legacy]   v2 version negotiation (default auto; legacy = 2025 initialize)
//   [--no-step-up]     v2: onInsufficientScope 'throw' (the 403 surfaces as InsufficientScopeError)
//   [--timeout-ms N]   default 30000
// Output: {"ok":true,"tools":[names],"calls":[{"name","ok",("text"|"error"),["status"]}],
//   "tokens":[the `scope` claim of each distinct access token sent to the edge, in order of first use],
//   "tokenRequests":[{"grant_type","scope":<asked>,"resource","status"}],
//   "mcp":[{"http","rpc","status","scope"}] (every request to --url: HTTP method, JSON-RPC method(s) of a
//   POST, HTTP status, scope of the bearer sent or null), "challenges":[{"status","wwwAuthenticate"}] (401/403s),
//   "issuer":…, "protocolVersion":…}
// On a failure before the calls: {"ok":false,"error":…, plus what was recorded}.
//
// Step-up is the SDK's own: v2 StreamableHTTPClientTransport._send → on 403 with
// error="insufficient_scope" → _stepUpAuthorize → auth(provider, {scope: union of the scopes asked
// before, the token's and the challenge's, forceReauthorization}) → for ClientCredentialsProvider a
// new client_credentials token request → the same request again (maxStepUpRetries, default 1).
// v1 (1.32.2) re-runs auth() on the 403 too (StreamableHTTPClientTransport.send, once per
// WWW-Authenticate value), but its fetchToken() asks for provider.clientMetadata.scope (the
// constructor's `scope`), never the challenge's: a client_credentials token cannot widen there,
// the retry gets 403 again ("Server returned 403 after trying upscoping").
import { parseArgs } from 'node:util';
import * as v2 from '@modelcontextprotocol/client';
import { auth as v1Auth, extractWWWAuthenticateParams as v1Extract } from '@modelcontextprotocol/sdk/client/auth.js';
import { ClientCredentialsProvider as V1ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1HTTP } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { values: args } = parseArgs({
    options: {
        url: { type: 'string' },
        'client-id': { type: 'string' },
        'client-secret': { type: 'string' },
        scope: { type: 'string' },
        call: { type: 'string', multiple: true, default: [] },
        issuer: { type: 'string' },
        sdk: { type: 'string', default: 'v2' },
        mode: { type: 'string', default: 'auto' },
        'no-step-up': { type: 'boolean', default: false },
        'timeout-ms': { type: 'string', default: '30000' }
    }
});

// v2 logs some notices with console.debug/console.log; stdout carries the one JSON line only.
console.log = console.info = console.debug = (...a) => console.error(...a);
const record = { tokens: [], tokenRequests: [], mcp: [], challenges: [] };
const emit = (obj, code) => {
    process.stdout.write(`${JSON.stringify({ ...obj, ...record })}\n`, () => process.exit(code));
};
const fail = e => emit({ ok: false, error: String(e?.stack ?? e) }, 1);
setTimeout(() => fail(`timeout after ${args['timeout-ms']} ms`), Number(args['timeout-ms'])).unref();

const calls = [].concat(args.call).flatMap(s => s.split(',')).map(s => s.trim()).filter(Boolean);
const textOf = r => r?.content?.find(c => c.type === 'text')?.text ?? null;
const info = { name: 'step-up-client', version: '1.0.0' };

// The payload of a JWT, or null (no verification: the client only reports what it sent).
const jwtPayload = token => {
    try {
        return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8'));
    } catch {
        return null;
    }
};
const seenTokens = new Set();
const headerOf = (input, init, name) => {
    const h = init?.headers ?? (input instanceof Request ? input.headers : undefined);
    if (!h) return null;
    if (h instanceof Headers) return h.get(name);
    if (Array.isArray(h)) return h.find(([k]) => k.toLowerCase() === name)?.[1] ?? null;
    const key = Object.keys(h).find(k => k.toLowerCase() === name);
    return key === undefined ? null : h[key];
};
const rpcOf = body => {
    try {
        const m = JSON.parse(typeof body === 'string' ? body : '');
        return Array.isArray(m) ? m.map(x => x.method ?? 'response').join(',') : (m.method ?? 'response');
    } catch {
        return null;
    }
};
let mcpUrl;
// Every HTTP request the SDK makes (MCP requests and OAuth ones) goes through this fetch.
const recordingFetch = async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    const isMcp = mcpUrl !== undefined && url === mcpUrl.href;
    let entry = null;
    if (isMcp) {
        const bearer = headerOf(input, init, 'authorization')?.match(/^Bearer\s+(.+)$/i)?.[1] ?? null;
        const scope = bearer ? (jwtPayload(bearer)?.scope ?? null) : null;
        if (bearer && !seenTokens.has(bearer)) {
            seenTokens.add(bearer);
            record.tokens.push(scope);
        }
        entry = { http: method, rpc: method === 'POST' ? rpcOf(init?.body) : null, status: null, scope };
        record.mcp.push(entry);
    } else if (method === 'POST' && init?.body instanceof URLSearchParams && init.body.get('grant_type')) {
        entry = { grant_type: init.body.get('grant_type'), scope: init.body.get('scope'), resource: init.body.get('resource'), status: null };
        record.tokenRequests.push(entry);
    }
    const res = await fetch(input, init);
    if (entry) entry.status = res.status;
    if (isMcp && (res.status === 401 || res.status === 403)) {
        record.challenges.push({ status: res.status, wwwAuthenticate: res.headers.get('www-authenticate') });
    }
    return res;
};

// The edge's 401 to a bare POST: its WWW-Authenticate names the metadata document.
async function challenge() {
    const res = await recordingFetch(mcpUrl.href, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'ping' })
    });
    await res.text().catch(() => {});
    // Not a 401 (an `auth = "optional"` route): auth() finds the metadata at its well-known path.
    if (res.status !== 401) return {};
    return (args.sdk === 'v1' ? v1Extract : v2.extractWWWAuthenticateParams)(res);
}

// The authorization server, from the edge's metadata document (when --issuer is not given; at
// the URL the 401 named, else at its well-known path for --url).
async function issuerOf(resourceMetadataUrl) {
    if (args.issuer) return args.issuer;
    const meta = await v2.discoverOAuthProtectedResourceMetadata(mcpUrl, { resourceMetadataUrl }, recordingFetch);
    const as = meta.authorization_servers?.[0];
    if (!as) throw new Error('the metadata document names no authorization server');
    return as;
}

// Arguments for a tool from its inputSchema: each required property gets a plain value.
const argsFor = tool => {
    const schema = tool?.inputSchema ?? {};
    const out = {};
    for (const name of schema.required ?? []) {
        const type = schema.properties?.[name]?.type;
        out[name] = type === 'number' || type === 'integer' ? 1
            : type === 'boolean' ? true
            : type === 'object' ? {}
            : type === 'array' ? [] : 'hi';
    }
    return out;
};

const errStatus = e => (typeof e?.status === 'number' ? e.status
    : typeof e?.code === 'number' && e.code >= 400 && e.code < 600 ? e.code : undefined);

async function main() {
    if (!args.url) throw new Error('--url is required');
    if (!args['client-id'] || !args['client-secret']) throw new Error('--client-id and --client-secret are required');
    if (!['v1', 'v2'].includes(args.sdk)) throw new Error(`unknown --sdk ${args.sdk}`);
    mcpUrl = new URL(args.url);
    const isV1 = args.sdk === 'v1';

    let resourceMetadataUrl;
    if (args.scope !== undefined) ({ resourceMetadataUrl } = await challenge());
    const issuer = await issuerOf(resourceMetadataUrl);
    const providerOpts = {
        clientId: args['client-id'],
        clientSecret: args['client-secret'],
        expectedIssuer: issuer,
        ...(args.scope !== undefined ? { scope: args.scope } : {})
    };
    const provider = isV1 ? new V1ClientCredentialsProvider(providerOpts) : new v2.ClientCredentialsProvider(providerOpts);

    if (args.scope !== undefined) {
        // The first token with exactly --scope, through the SDK's public auth() (what the transport
        // itself runs on a 401, with the 401's scope= or scopes_supported instead of this one).
        const result = await (isV1 ? v1Auth : v2.auth)(provider, {
            serverUrl: mcpUrl,
            resourceMetadataUrl,
            scope: args.scope,
            fetchFn: recordingFetch
        });
        if (result !== 'AUTHORIZED') throw new Error(`auth() gave ${result}`);
    }

    let client, transport;
    if (isV1) {
        client = new V1Client(info, { capabilities: {} });
        transport = new V1HTTP(mcpUrl, { authProvider: provider, fetch: recordingFetch });
    } else {
        const versionNegotiation = { auto: { mode: 'auto' }, pin: { mode: { pin: '2026-07-28' } }, legacy: undefined }[args.mode];
        if (!(args.mode in { auto: 1, pin: 1, legacy: 1 })) throw new Error(`unknown --mode ${args.mode}`);
        client = new v2.Client(info, { capabilities: {}, versionNegotiation });
        transport = new v2.StreamableHTTPClientTransport(mcpUrl, {
            authProvider: provider,
            fetch: recordingFetch,
            ...(args['no-step-up'] ? { onInsufficientScope: 'throw' } : {})
        });
    }
    await client.connect(transport);
    const protocolVersion = isV1
        ? (transport.protocolVersion ?? null)
        : (client.getNegotiatedProtocolVersion?.() ?? null);

    const listed = (await client.listTools()).tools;
    const tools = listed.map(t => t.name);
    const results = [];
    for (const name of calls) {
        try {
            const r = await client.callTool({ name, arguments: argsFor(listed.find(t => t.name === name)) });
            results.push(r?.isError ? { name, ok: false, error: textOf(r) } : { name, ok: true, text: textOf(r) });
        } catch (e) {
            const status = errStatus(e);
            results.push({ name, ok: false, error: String(e?.message ?? e), ...(status !== undefined ? { status } : {}) });
        }
    }
    await client.close().catch(() => {});
    emit({ ok: true, issuer, protocolVersion, tools, calls: results }, 0);
}

main().catch(fail);
