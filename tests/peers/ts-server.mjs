#!/usr/bin/env node
// Test peer: an official-TS-SDK MCP server on 127.0.0.1. See README.md for the contract.
//   --mode modern|dual|v2-session|legacy-session|legacy-sse  --instance NAME  --port N (0 = ephemeral)
//   [--max-body BYTES]  (v2 modes only; SDK default 4 MiB)
//   [--tls-cert FILE --tls-key FILE]  serve HTTPS (HTTP/1.1) instead of HTTP
//   [--identity-jwks URL --identity-audience AUD --identity-issuer ISS]  verify the edge's
//       identity assertion (X-MCP-Edge-Identity) of every POST /mcp against that JWKS (jose)
//   [--bearer-jwks URL --bearer-audience AUD [--bearer-issuer ISS]]  verify every POST /mcp's
//       Authorization: Bearer token (e.g. an authz-server.mjs JWT) against that JWKS (jose); only
//       recorded, never refused
//   GET /__seen: every POST /mcp's headers (and, with --identity-jwks, its assertion checked;
//       with --bearer-jwks, its bearer token checked)
//   POST /__verify (body: a token): that token checked against the JWKS as it is now
import { createHash, randomUUID } from 'node:crypto';
import { appendFileSync, readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { parseArgs } from 'node:util';
import * as z from 'zod';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import * as v2 from '@modelcontextprotocol/server';
import { McpServer as V1McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { StdioServerTransport as V1Stdio } from '@modelcontextprotocol/sdk/server/stdio.js';
import { serveStdio } from '@modelcontextprotocol/server/stdio';

const { values: args } = parseArgs({
    options: {
        mode: { type: 'string', default: 'modern' },
        instance: { type: 'string', default: 'ts' },
        port: { type: 'string', default: '0' },
        'max-body': { type: 'string' },
        'tls-cert': { type: 'string' },
        'tls-key': { type: 'string' },
        'identity-jwks': { type: 'string' },
        'identity-audience': { type: 'string' },
        'identity-issuer': { type: 'string', default: 'mcp-edge' },
        'bearer-jwks': { type: 'string' },
        'bearer-audience': { type: 'string' },
        'bearer-issuer': { type: 'string' },
        // stdio: stay up after stdin ends (a server holding timers); SIGTERM still ends it.
        linger: { type: 'boolean', default: false },
        // stdio: append this process's id to FILE when SIGTERM arrives (tests see who got it).
        'term-log': { type: 'string' }
    }
});
// stdio: v2 `serveStdio` (the era of the first message); stdio-v1: v1 over stdio.
const MODES = ['modern', 'dual', 'v2-session', 'legacy-session', 'legacy-sse', 'stdio', 'stdio-v1'];
if (!MODES.includes(args.mode)) {
    console.error(`unknown --mode ${args.mode} (want ${MODES.join('|')})`);
    process.exit(2);
}
if (!args['tls-cert'] !== !args['tls-key']) {
    console.error('--tls-cert and --tls-key go together');
    process.exit(2);
}
if (!args['bearer-jwks'] !== !args['bearer-audience']) {
    console.error('--bearer-jwks and --bearer-audience go together');
    process.exit(2);
}
const instance = args.instance;
const isV2 = args.mode === 'modern' || args.mode === 'dual' || args.mode === 'v2-session' || args.mode === 'stdio';
const isStdio = args.mode.startsWith('stdio');
// Process-wide state, to show which process (and so which tenant's) a call reached.
const notes = [];
const hogged = [];
const maxBody = args['max-body'] ? { maxRequestBodySize: Number(args['max-body']) } : {};
const onerror = e => process.stderr.write(`ONERROR ${e?.message ?? e}\n`);
const sleep = ms => new Promise(r => setTimeout(r, ms));
// Load control for the balancing tests and benchmark (`/__load`): how slow this server's
// `work` tool is (factor), whether every POST /mcp gets 500 (fail) or no answer (hang), and
// how many POSTs to /mcp it holds at once (counted here, where the work happens).
const load = { factor: 1, fail: false, hang: false, inFlight: 0, maxInFlight: 0, calls: 0 };
const text = t => ({ content: [{ type: 'text', text: t }] });

// v1 handlers get `extra`, v2 handlers get `ctx` (ctx.mcpReq.*): normalise the bits we use.
function reqInfo(x) {
    if (x.mcpReq) {
        const r = x.mcpReq;
        return { signal: r.signal, token: r._meta?.progressToken, notify: n => r.notify(n), inputResponses: r.inputResponses };
    }
    return { signal: x.signal, token: x._meta?.progressToken, notify: n => x.sendNotification(n) };
}

function buildServer() {
    const server = isV2
        ? new v2.McpServer({ name: `ts-peer-${instance}`, version: '1.0.0' })
        : new V1McpServer({ name: `ts-peer-${instance}`, version: '1.0.0' });
    // Every tool run is logged (`TOOL <name>`): tests check what reached the server.
    const register = server.registerTool.bind(server);
    server.registerTool = (name, config, handler) => register(name, config, (...args) => {
        process.stderr.write(`TOOL ${name}\n`);
        return handler(...args);
    });

    server.registerTool('echo', { description: 'echo text', inputSchema: z.object({ text: z.string() }) },
        async ({ text: t }) => text(`${instance}:${t}`));
    server.registerTool('whoami', { description: 'instance name' }, async () => text(instance));
    if (isStdio) {
        // Only over stdio (the HTTP modes' tool lists are what other tests count).
        server.registerTool('note', { description: 'remember text in this process; all remembered', inputSchema: z.object({ text: z.string() }) },
            async ({ text: t }) => { notes.push(t); return text(notes.join(',')); });
        server.registerTool('pid', { description: 'this process id' }, async () => text(String(process.pid)));
        // A server that hangs: its event loop blocked, it reads and writes nothing more.
        server.registerTool('freeze', { description: 'stop reading and writing, for good' }, async () => {
            // eslint-disable-next-line no-constant-condition
            while (true) { /* spin */ }
        });
        // A server that still reads but never writes again.
        server.registerTool('mute', { description: 'stop writing, for good' }, async () => {
            process.stdout.write = () => true;
            return text('muted');
        });
        // Memory held until the process ends.
        server.registerTool('hog', { description: 'hold MB of memory', inputSchema: z.object({ mb: z.number().int() }) },
            async ({ mb }) => {
                for (let i = 0; i < mb; i++) { const b = Buffer.alloc(1 << 20, 1); hogged.push(b); }
                return text(`${instance}:holding ${hogged.length} MB`);
            });
        // A stderr flood.
        server.registerTool('shout', { description: 'write KB to stderr', inputSchema: z.object({ kb: z.number().int() }) },
            async ({ kb }) => {
                const line = 'x'.repeat(1023) + '\n';
                for (let i = 0; i < kb; i++) process.stderr.write(line);
                return text('shouted');
            });
        // The request's `_meta` as this process read it off its pipe (the trace context the edge put there).
        server.registerTool('meta', { description: "this request's _meta" }, async extra =>
            text(JSON.stringify((extra.mcpReq ? extra.mcpReq._meta : extra._meta) ?? {})));
        // A server-to-client request (2025 revisions): the client's answer comes back in the result.
        server.registerTool('ask', { description: 'ask the client (elicitation)' }, async extra => {
            const params = { mode: 'form', message: 'ok?', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } } } };
            const r = extra.mcpReq ? await extra.mcpReq.elicitInput(params) : await server.server.elicitInput(params);
            return text(`asked:${r.action}:${JSON.stringify(r.content ?? null)}`);
        });
    }
    server.registerTool('slow', { description: 'progress then done', inputSchema: z.object({ steps: z.number().int() }) },
        async ({ steps }, extra) => {
            const r = reqInfo(extra);
            // progress i, then ~100 ms; the result thus trails the last progress (SDK clients drop a
            // progress notification that arrives in the same read as the result).
            for (let i = 1; i <= steps; i++) {
                if (r.token !== undefined) {
                    await r.notify({ method: 'notifications/progress', params: { progressToken: r.token, progress: i, total: steps } });
                }
                await sleep(100);
            }
            return text(`${instance}:done`);
        });
    server.registerTool('work', { description: 'sleep ms (times the load factor)', inputSchema: z.object({ ms: z.number().int() }) },
        async ({ ms }) => { await sleep(ms * load.factor); return text(`${instance}:worked`); });
    server.registerTool('digest', { description: 'sha256 hex of data', inputSchema: z.object({ data: z.string() }) },
        async ({ data }) => text(createHash('sha256').update(data, 'utf8').digest('hex')));
    server.registerTool('hang', { description: 'never returns until aborted' }, async (extra) => {
        const { signal } = reqInfo(extra);
        await new Promise((_, reject) => {
            const onAbort = () => {
                process.stderr.write('ABORTED hang\n');
                reject(new Error('aborted'));
            };
            if (signal.aborted) onAbort();
            else signal.addEventListener('abort', onAbort, { once: true });
        });
    });
    if (isV2 && !isStdio) {
        // MRTR (2026-07-28): first round returns input_required, the retry carries inputResponses.
        server.registerTool('confirm', { description: 'MRTR elicitation round trip' }, async extra => {
            const answer = v2.inputResponse(reqInfo(extra).inputResponses, 'confirm');
            if (answer.kind === 'elicit') return text(`${instance}:${answer.action === 'accept' ? 'confirmed' : answer.action}`);
            return v2.inputRequired({
                inputRequests: {
                    confirm: v2.inputRequired.elicit({
                        message: `Confirm on ${instance}?`,
                        requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } } }
                    })
                }
            });
        });
    }
    server.registerResource('info', 'mem://info', { mimeType: 'text/plain', description: 'instance name' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: instance }] }));
    const nameArg = { name: z.string() };
    server.registerPrompt('greet', { description: 'greeting', argsSchema: isV2 ? z.object(nameArg) : nameArg },
        async ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello ${name} from ${instance}` } }] }));
    return server;
}

const jsonError = (res, status, code, message) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
};

async function readBody(req) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    return Buffer.concat(chunks);
}

// ---- v2: fetch-style handler behind a minimal node:http adapter ------------------------------
function v2Fetch() {
    const handler = v2.createMcpHandler(() => buildServer(), {
        legacy: args.mode === 'dual' ? 'stateless' : 'reject', ...maxBody, onerror
    });
    if (args.mode !== 'v2-session') return handler.fetch;
    // v2-session: 2026-07-28 -> the strict modern handler; 2025-era -> sessionful v2 transports.
    const sessions = new Map();
    const fetchError = (status, code, message) =>
        Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });
    const legacy = async request => {
        const sid = request.headers.get('mcp-session-id');
        if (sid) {
            const t = sessions.get(sid);
            return t ? t.handleRequest(request) : fetchError(404, -32001, 'Session not found');
        }
        if (request.method === 'POST') {
            let body;
            try { body = await request.clone().json(); } catch { body = undefined; }
            if (v2.isInitializeRequest(body)) {
                const t = new v2.WebStandardStreamableHTTPServerTransport({
                    sessionIdGenerator: randomUUID, ...maxBody,
                    onsessioninitialized: id => { sessions.set(id, t); },
                    onsessionclosed: id => { sessions.delete(id); }
                });
                t.onclose = () => { if (t.sessionId) sessions.delete(t.sessionId); };
                t.onerror = onerror;
                await buildServer().connect(t);
                return t.handleRequest(request);
            }
            if (body === undefined) return fetchError(400, -32700, 'Parse error');
        }
        return fetchError(400, -32000, 'Bad Request: No valid session ID provided');
    };
    // isLegacyRequest reads a clone (the Request stays readable); oversized bodies classify
    // non-legacy, so the modern handler answers them 413.
    return async request =>
        (await v2.isLegacyRequest(request, undefined, maxBody)) ? legacy(request) : handler.fetch(request);
}

function v2Listener() {
    const fetchFn = v2Fetch();
    return async (req, res) => {
        const url = new URL(req.url, 'http://127.0.0.1');
        if (url.pathname !== '/mcp') return jsonError(res, 404, -32000, 'Not found');
        // Client disconnect (socket closed before we finished) => abort the Request => SDK cancels.
        const abort = new AbortController();
        res.on('close', () => { if (!res.writableFinished) abort.abort(); });
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) {
            for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
        }
        const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
        const request = new Request(url, {
            method: req.method, headers, signal: abort.signal,
            body: hasBody ? await readBody(req) : undefined
        });
        let response;
        try {
            response = await fetchFn(request);
        } catch (e) {
            return jsonError(res, 500, -32603, `handler threw: ${e?.message ?? e}`);
        }
        const out = {};
        response.headers.forEach((v, k) => { out[k] = v; });
        res.writeHead(response.status, out);
        res.flushHeaders(); // silent SSE streams must still send their headers
        if (!response.body) return res.end();
        const reader = response.body.getReader();
        abort.signal.addEventListener('abort', () => reader.cancel().catch(() => {}), { once: true });
        try {
            for (;;) {
                const { done, value } = await reader.read();
                if (done) break;
                res.write(value);
            }
        } catch { /* stream cancelled */ }
        res.end();
    };
}

// ---- v1: sessionful Streamable HTTP (2025-era) -----------------------------------------------
function legacySessionListener() {
    const transports = new Map();
    return async (req, res) => {
        if (new URL(req.url, 'http://127.0.0.1').pathname !== '/mcp') return jsonError(res, 404, -32000, 'Not found');
        const sid = req.headers['mcp-session-id'];
        if (sid) {
            const t = transports.get(sid);
            if (!t) return jsonError(res, 404, -32001, 'Session not found');
            return t.handleRequest(req, res);
        }
        if (req.method === 'POST') {
            const raw = await readBody(req);
            let body;
            try { body = JSON.parse(raw.toString('utf8')); } catch { return jsonError(res, 400, -32700, 'Parse error'); }
            if (isInitializeRequest(body)) {
                const t = new StreamableHTTPServerTransport({
                    sessionIdGenerator: randomUUID,
                    onsessioninitialized: id => transports.set(id, t)
                });
                t.onclose = () => { if (t.sessionId) transports.delete(t.sessionId); };
                await buildServer().connect(t);
                return t.handleRequest(req, res, body);
            }
        }
        return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
    };
}

// ---- v1: HTTP+SSE (2024-11-05) -------------------------------------------------------------
function legacySseListener() {
    const transports = new Map();
    return async (req, res) => {
        const url = new URL(req.url, 'http://127.0.0.1');
        if (req.method === 'GET' && url.pathname === '/sse') {
            const t = new SSEServerTransport('/messages', res);
            transports.set(t.sessionId, t);
            res.on('close', () => transports.delete(t.sessionId));
            await buildServer().connect(t);
            return;
        }
        if (req.method === 'POST' && url.pathname === '/messages') {
            const t = transports.get(url.searchParams.get('sessionId') ?? '');
            if (!t) return jsonError(res, 404, -32001, 'Session not found');
            return t.handlePostMessage(req, res);
        }
        return jsonError(res, 404, -32000, 'Not found');
    };
}

if (isStdio) {
    if (args.mode === 'stdio') serveStdio(() => buildServer(), { legacy: 'serve', onerror });
    else await buildServer().connect(new V1Stdio());
    process.stderr.write(`STDIO ${process.pid}\n`);
    if (args.linger) setInterval(() => {}, 1 << 30);
    process.on('SIGTERM', () => {
        if (args['term-log']) appendFileSync(args['term-log'], `${process.pid}\n`);
        process.exit(0);
    });
} else {
const listener = isV2 ? v2Listener() : args.mode === 'legacy-session' ? legacySessionListener() : legacySseListener();
// GET /__load: the counts; POST /__load?factor=N&fail=0|1&hang=0|1&reset=1: set them.
function loadControl(req, res) {
    const q = new URL(req.url, 'http://127.0.0.1').searchParams;
    if (req.method === 'POST') {
        if (q.has('factor')) load.factor = Number(q.get('factor'));
        if (q.has('fail')) load.fail = q.get('fail') === '1';
        if (q.has('hang')) load.hang = q.get('hang') === '1';
        if (q.get('reset') === '1') { load.maxInFlight = load.inFlight; load.calls = 0; }
    }
    const body = JSON.stringify(load);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
}
// What each POST /mcp came with: its headers, and the identity assertion as jose verifies it
// against the edge's JWKS ({ claims, kid } or { error }); GET /__seen lists them.
const seen = [];
// Fetched afresh for every check: a test sees the key set the edge publishes now.
const jwks = args['identity-jwks']
    ? createRemoteJWKSet(new URL(args['identity-jwks']), { cooldownDuration: 0, cacheMaxAge: 0 })
    : null;
async function verifyIdentity(token) {
    if (!jwks || token === undefined) return null;
    try {
        const { payload, protectedHeader } = await jwtVerify(token, jwks, {
            issuer: args['identity-issuer'], audience: args['identity-audience'], algorithms: ['EdDSA']
        });
        return { claims: payload, kid: protectedHeader.kid };
    } catch (e) {
        return { error: `${e.code ?? ''} ${e.message}` };
    }
}
// The bearer token each POST /mcp carried, as jose verifies it against the authorization server's
// JWKS: { ok: true, claims, kid, typ } or { ok: false, error } (also when there is none).
const bearerJwks = args['bearer-jwks'] ? createRemoteJWKSet(new URL(args['bearer-jwks'])) : null;
async function verifyBearer(authorization) {
    if (!bearerJwks) return null;
    const m = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization ?? '');
    if (!m) return { ok: false, error: authorization === undefined ? 'no Authorization header' : 'not a Bearer token' };
    try {
        const { payload, protectedHeader } = await jwtVerify(m[1], bearerJwks, {
            audience: args['bearer-audience'],
            ...(args['bearer-issuer'] !== undefined ? { issuer: args['bearer-issuer'] } : {})
        });
        return { ok: true, claims: payload, kid: protectedHeader.kid ?? null, typ: protectedHeader.typ ?? null };
    } catch (e) {
        return { ok: false, error: `${e.code ?? ''} ${e.message}` };
    }
}
function seenControl(res) {
    const body = JSON.stringify(seen);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
}
const handle = async (req, res) => {
    if (req.url.startsWith('/__load')) return loadControl(req, res);
    if (req.url.startsWith('/__seen')) return seenControl(res);
    if (req.url.startsWith('/__verify')) {
        const body = JSON.stringify(await verifyIdentity((await readBody(req)).toString('utf8')));
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        return res.end(body);
    }
    process.stderr.write(`REQ ${req.method} ${req.url}\n`);
    if (req.method === 'POST' && req.url.split('?')[0] === '/mcp') {
        const entry = { headers: req.headers, identity: null, bearer: null };
        seen.push(entry);
        // Before the request goes on: the member decides who calls before it serves.
        entry.identity = await verifyIdentity(req.headers['x-mcp-edge-identity']);
        entry.bearer = await verifyBearer(req.headers.authorization);
    }
    if (req.method === 'POST' && req.url.split('?')[0] === '/mcp') {
        load.calls++;
        load.inFlight++;
        load.maxInFlight = Math.max(load.maxInFlight, load.inFlight);
        let done = false;
        const end = () => { if (!done) { done = true; load.inFlight--; } };
        res.on('finish', end);
        res.on('close', end);
        if (load.hang) return;
        if (load.fail) return jsonError(res, 500, -32603, 'Internal error (load control: fail)');
    }
    listener(req, res).catch(e => {
        process.stderr.write(`ERROR ${e?.stack ?? e}\n`);
        if (!res.headersSent) jsonError(res, 500, -32603, 'Internal error');
        else res.end();
    });
};
const httpServer = args['tls-cert']
    ? https.createServer({ cert: readFileSync(args['tls-cert']), key: readFileSync(args['tls-key']) }, handle)
    : http.createServer(handle);
httpServer.listen(Number(args.port), '127.0.0.1', () => {
    process.stdout.write(`LISTENING ${httpServer.address().port}\n`);
});
const stop = () => { httpServer.close(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
}
