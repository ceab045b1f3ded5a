#!/usr/bin/env node
// Test peer: a real OAuth 2.1 authorization server (oidc-provider 9.x) on 127.0.0.1, for the
// edge's per-tool scopes and step-up. See README.md for the contract.
//   --resource URL     the protected resource its tokens are for (RFC 8707; the token's `aud`).
//                      Repeatable. A token request without `resource` gets the first one.
//   --scopes "a b c"   the scopes it may grant for that resource (default "read deploy prod")
//   --client-id ID  --client-secret SECRET   the one confidential client (client_credentials;
//                      client_secret_basic or client_secret_post, either works)
//   --jwks-out PATH    write the PUBLIC JWKS of the signing key there (for `[identity.jwt] jwks_file`)
//   [--alg ES256|RS256] signing algorithm of the key generated at start (default ES256)
//   [--port N]          default 0 (ephemeral)
//   [--ttl SECONDS]     access-token lifetime (default 600)
// Issuer `http://127.0.0.1:<port>` (no trailing slash). Discovery: /.well-known/openid-configuration
// and the same document at /.well-known/oauth-authorization-server (RFC 8414). Token endpoint /token,
// keys /jwks. Access tokens are JWTs (typ at+jwt): iss, sub = client_id, client_id, aud = the
// resource, scope = the granted scopes (those asked for that the resource has, space-separated).
// stdout: `READY <port>` once listening, then one JSON line per token request:
//   {"token":{"grant_type":…,"scope":<granted or null>,"requested":<asked or null>,"resource":…,"client_id":…,"auth":"basic"|"post"}}
//   {"token_error":{"grant_type":…,"error":…,"error_description":…,"requested":…,"resource":…}}
// stderr: diagnostics (oidc-provider notices included). Exits on SIGTERM/SIGINT, and when stdin
// is a pipe that closes (a stdin of /dev/null is ignored).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { fstatSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { parseArgs } from 'node:util';
import Provider, { errors } from 'oidc-provider';

const { values: args } = parseArgs({
    options: {
        resource: { type: 'string', multiple: true, default: [] },
        scopes: { type: 'string', default: 'read deploy prod' },
        'client-id': { type: 'string' },
        'client-secret': { type: 'string' },
        'jwks-out': { type: 'string' },
        alg: { type: 'string', default: 'ES256' },
        port: { type: 'string', default: '0' },
        ttl: { type: 'string', default: '600' }
    }
});
const die = msg => {
    process.stderr.write(`${msg}\n`);
    process.exit(2);
};
if (args.resource.length === 0) die('--resource URL is required');
if (!args['client-id'] || !args['client-secret']) die('--client-id and --client-secret are required');
if (!['ES256', 'RS256'].includes(args.alg)) die(`--alg ${args.alg}: want ES256 or RS256`);
const resources = args.resource.map(r => {
    try {
        return { given: r, href: new URL(r).href };
    } catch {
        return die(`--resource ${r}: not an absolute URL`);
    }
});
const scopes = args.scopes.split(/\s+/).filter(Boolean);
const ttl = Number(args.ttl);

// oidc-provider prints its NOTICEs with console.info (stdout); stdout is this peer's protocol.
console.info = console.log = (...a) => console.error(...a);
const out = obj => process.stdout.write(`${JSON.stringify(obj)}\n`);

// The signing key, made now; only its public half leaves the process (--jwks-out, /jwks).
const kid = randomUUID();
const { publicKey, privateKey } = args.alg === 'ES256'
    ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : generateKeyPairSync('rsa', { modulusLength: 2048 });
const keyMeta = { kid, alg: args.alg, use: 'sig' };
const privateJwk = { ...privateKey.export({ format: 'jwk' }), ...keyMeta };
const publicJwks = { keys: [{ ...publicKey.export({ format: 'jwk' }), ...keyMeta }] };
if (args['jwks-out']) writeFileSync(args['jwks-out'], `${JSON.stringify(publicJwks)}\n`);

const resourceFor = indicator => {
    let href;
    try {
        href = new URL(indicator).href;
    } catch {
        return undefined;
    }
    return resources.find(r => r.href === href);
};

// Bind first: the issuer names the port.
const server = http.createServer();
await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(args.port), '127.0.0.1', resolve);
});
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
    clients: [{
        client_id: args['client-id'],
        client_secret: args['client-secret'],
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
        // Either way is accepted for a client registered with a secret method (oidc-provider
        // lib/shared/client_auth.js: basic and post are interchangeable).
        token_endpoint_auth_method: 'client_secret_basic'
    }],
    clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
    clientDefaults: { id_token_signed_response_alg: args.alg },
    jwks: { keys: [privateJwk] },
    // Listed in discovery's scopes_supported (the resource's scopes are what is granted).
    scopes: ['openid', ...scopes],
    responseTypes: ['code'],
    features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        introspection: { enabled: false },
        revocation: { enabled: false },
        resourceIndicators: {
            enabled: true,
            // No `resource` in the request: the (first) resource, so the token is still a JWT for it.
            defaultResource: async () => resources[0].given,
            useGrantedResource: async () => true,
            getResourceServerInfo: async (_ctx, indicator) => {
                const r = resourceFor(indicator);
                if (!r) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
                return {
                    scope: scopes.join(' '),
                    audience: r.given,
                    accessTokenTTL: ttl,
                    accessTokenFormat: 'jwt',
                    jwt: { sign: { alg: args.alg } }
                };
            }
        }
    },
    ttl: {
        AccessToken: ttl,
        ClientCredentials: ttl,
        AuthorizationCode: 60,
        IdToken: ttl,
        Grant: ttl,
        Session: ttl,
        Interaction: ttl,
        RefreshToken: ttl
    }
});
// Plain HTTP on loopback: nothing to do for the issuer (oidc-provider only needs a web URI);
// `proxy` stays false, so urlFor() builds endpoint URLs from the issuer itself.

const authOf = ctx => (ctx.headers.authorization?.toLowerCase().startsWith('basic ') ? 'basic'
    : ctx.oidc?.params?.client_secret ? 'post' : 'none');
provider.on('grant.success', ctx => {
    const p = ctx.oidc.params ?? {};
    out({
        token: {
            grant_type: p.grant_type ?? null,
            scope: ctx.body?.scope ?? null,
            requested: p.scope ?? null,
            resource: p.resource ?? null,
            client_id: ctx.oidc.client?.clientId ?? null,
            auth: authOf(ctx)
        }
    });
});
const onTokenError = (ctx, err) => {
    if (ctx.oidc?.route !== 'token') return process.stderr.write(`ERROR ${ctx.path}: ${err?.message ?? err}\n`);
    const p = ctx.oidc.params ?? {};
    out({
        token_error: {
            grant_type: p.grant_type ?? null,
            error: err?.error ?? err?.message ?? String(err),
            error_description: err?.error_description ?? null,
            requested: p.scope ?? null,
            resource: p.resource ?? null
        }
    });
};
provider.on('grant.error', onTokenError);
provider.on('server_error', onTokenError);

const handle = provider.callback();
server.on('request', (req, res) => {
    // RFC 8414 discovery at the same document as OIDC discovery (clients try this one first).
    const [path, query] = req.url.split('?');
    if (path === '/.well-known/oauth-authorization-server') {
        req.url = `/.well-known/openid-configuration${query !== undefined ? `?${query}` : ''}`;
    }
    process.stderr.write(`REQ ${req.method} ${path}\n`);
    handle(req, res);
});

const stop = () => {
    server.closeAllConnections?.();
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 500).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// Stdin closing ends the server only when stdin is a pipe (a parent holding it); /dev/null ends at once.
try {
    const st = fstatSync(0);
    if (st.isFIFO() || st.isSocket()) {
        process.stdin.on('end', stop);
        process.stdin.on('error', stop);
        process.stdin.resume();
    }
} catch {}

process.stdout.write(`READY ${port}\n`);
