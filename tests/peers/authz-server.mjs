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
// RFC 8693 token exchange (all optional; see README.md):
//   --exchange          serve grant_type urn:ietf:params:oauth:grant-type:token-exchange; the
//                       --client-id client may use it too
//   --client-jwks PATH  a second client (--exchange-client-id, default "edge-pk") authenticating with
//                       private_key_jwt against that PUBLIC JWKS (Ed25519/EdDSA); implies --exchange
//   --exchange-audience VALUE  another audience (any string) an exchange may ask for. Repeatable;
//                       every --resource may be asked for too
//   --exchange-ttl SECONDS     lifetime of an exchanged token (default 300)
//   --exchange-wrong-audience  fault: exchanged tokens carry aud "https://somewhere-else.test"
// Issuer `http://127.0.0.1:<port>` (no trailing slash). Discovery: /.well-known/openid-configuration
// and the same document at /.well-known/oauth-authorization-server (RFC 8414). Token endpoint /token,
// keys /jwks. Access tokens are JWTs (typ at+jwt): iss, sub = client_id, client_id, aud = the
// resource, scope = the granted scopes (those asked for that the resource has, space-separated).
// stdout: `READY <port>` once listening, then one JSON line per token request:
//   {"token":{"grant_type":…,"scope":<granted or null>,"requested":<asked or null>,"resource":…,"client_id":…,"auth":"basic"|"post"}}
//   {"exchange":{"sub":…,"audience":…,"scope":…,"client_id":…,"auth":"basic"|"post"|"private_key_jwt",…}}
//   {"token_error":{"grant_type":…,"error":…,"error_description":…,"requested":…,"resource":…,…}}
// stderr: diagnostics (oidc-provider notices included). Exits on SIGTERM/SIGINT, and when stdin
// is a pipe that closes (a stdin of /dev/null is ignored).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { fstatSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { parseArgs } from 'node:util';
import { jwtVerify, SignJWT } from 'jose';
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
        ttl: { type: 'string', default: '600' },
        exchange: { type: 'boolean', default: false },
        'client-jwks': { type: 'string' },
        'exchange-client-id': { type: 'string', default: 'edge-pk' },
        'exchange-audience': { type: 'string', multiple: true, default: [] },
        'exchange-ttl': { type: 'string', default: '300' },
        'exchange-wrong-audience': { type: 'boolean', default: false }
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

// RFC 8693 token exchange.
const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const WRONG_AUDIENCE = 'https://somewhere-else.test';
const exchange = args.exchange || args['client-jwks'] !== undefined;
const exchangeTtl = Number(args['exchange-ttl']);
if (!Number.isInteger(exchangeTtl) || exchangeTtl <= 0) die(`--exchange-ttl ${args['exchange-ttl']}: want whole seconds > 0`);
let clientJwks;
if (args['client-jwks']) {
    try {
        const parsed = JSON.parse(readFileSync(args['client-jwks'], 'utf8'));
        clientJwks = { keys: Array.isArray(parsed.keys) ? parsed.keys : [parsed] };
    } catch (e) {
        die(`--client-jwks ${args['client-jwks']}: ${e.message}`);
    }
    if (clientJwks.keys.some(k => k.d !== undefined)) die(`--client-jwks ${args['client-jwks']}: holds a private key`);
    if (args['exchange-client-id'] === args['client-id']) die('--exchange-client-id must differ from --client-id');
}

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

const clients = [{
    client_id: args['client-id'],
    client_secret: args['client-secret'],
    grant_types: exchange ? ['client_credentials', EXCHANGE] : ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    // Either way is accepted for a client registered with a secret method (oidc-provider
    // lib/shared/client_auth.js: basic and post are interchangeable).
    token_endpoint_auth_method: 'client_secret_basic'
}];
if (clientJwks) {
    clients.push({
        client_id: args['exchange-client-id'],
        grant_types: [EXCHANGE],
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: 'private_key_jwt',
        // No token_endpoint_auth_signing_alg: any of clientAuthSigningAlgValues below
        // (EdDSA, or the fully-specified Ed25519) that the key verifies.
        jwks: clientJwks
    });
}

const provider = new Provider(issuer, {
    clients,
    clientAuthMethods: clientJwks
        ? ['client_secret_basic', 'client_secret_post', 'private_key_jwt']
        : ['client_secret_basic', 'client_secret_post'],
    // The client assertion's algorithms (private_key_jwt); HS* is dropped anyway without
    // client_secret_jwt. EdDSA is in oidc-provider's default list too; named here on purpose.
    enabledJWA: { clientAuthSigningAlgValues: ['EdDSA', 'Ed25519', 'ES256', 'RS256', 'PS256'] },
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
    : ctx.oidc?.params?.client_secret ? 'post'
        : ctx.oidc?.params?.client_assertion ? 'private_key_jwt' : 'none');

// RFC 8693 token exchange: the subject token must be one of ours (our key, our issuer, unexpired);
// the new token is for the asked audience (`audience`, else `resource`, else the first --resource).
const one = (v, name) => {
    if (Array.isArray(v)) throw new errors.InvalidTarget(`only one ${name} value is supported`);
    return v;
};
const audienceFor = asked => {
    if (args['exchange-audience'].includes(asked)) return asked;
    return resourceFor(asked)?.given;
};
async function exchangeHandler(ctx) {
    const p = ctx.oidc.params;
    for (const name of ['subject_token', 'subject_token_type']) {
        if (!p[name]) throw new errors.InvalidRequest(`missing required parameter '${name}'`);
    }
    if (p.subject_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest(`unsupported subject_token_type ${p.subject_token_type}`);
    }
    if (p.requested_token_type !== undefined && p.requested_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest(`unsupported requested_token_type ${p.requested_token_type}`);
    }
    if (p.actor_token !== undefined) throw new errors.InvalidRequest('actor_token is not supported');
    let subject;
    try {
        ({ payload: subject } = await jwtVerify(p.subject_token, publicKey, {
            issuer, algorithms: [args.alg], requiredClaims: ['exp', 'sub']
        }));
    } catch (e) {
        const err = new errors.InvalidGrant(`subject_token: ${e.code ?? ''} ${e.message}`);
        err.error_description = `subject_token is invalid (${e.code ?? e.message})`;
        throw err;
    }
    const asked = one(p.audience, 'audience') ?? one(p.resource, 'resource');
    const audience = asked === undefined ? resources[0].given : audienceFor(asked);
    if (audience === undefined) throw new errors.InvalidTarget(`unknown audience ${asked}`);
    const scope = (p.scope !== undefined
        ? p.scope.split(' ').filter(s => scopes.includes(s))
        : String(subject.scope ?? '').split(' ').filter(Boolean)).join(' ');
    const clientId = ctx.oidc.client.clientId;
    const now = Math.floor(Date.now() / 1000);
    const aud = args['exchange-wrong-audience'] ? WRONG_AUDIENCE : audience;
    // A subject token that was itself exchanged keeps its actor chain (RFC 8693 section 4.1).
    const act = subject.act ? { sub: clientId, act: subject.act } : { sub: clientId };
    const accessToken = await new SignJWT({
        ...(scope ? { scope } : {}), client_id: clientId, act
    })
        .setProtectedHeader({ alg: args.alg, kid, typ: 'at+jwt' })
        .setIssuer(issuer)
        .setSubject(subject.sub)
        .setAudience(aud)
        .setIssuedAt(now)
        .setExpirationTime(now + exchangeTtl)
        .setJti(randomUUID())
        .sign(privateKey);
    ctx.body = {
        access_token: accessToken,
        issued_token_type: ACCESS_TOKEN_TYPE,
        token_type: 'Bearer',
        expires_in: exchangeTtl,
        ...(scope ? { scope } : {})
    };
    ctx.state.exchange = {
        sub: subject.sub, audience, scope: scope || null, client_id: clientId, auth: authOf(ctx),
        requested: p.scope ?? null, token_aud: aud
    };
}
if (exchange) {
    provider.registerGrantType(EXCHANGE, exchangeHandler, [
        'subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope',
        'actor_token', 'actor_token_type'
    ], ['audience', 'resource']);
}

provider.on('grant.success', ctx => {
    if (ctx.state.exchange) return out({ exchange: ctx.state.exchange });
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
            resource: p.resource ?? null,
            ...(p.grant_type === EXCHANGE ? {
                audience: p.audience ?? null, client_id: ctx.oidc.client?.clientId ?? null,
                auth: authOf(ctx), error_detail: err?.error_detail ?? null
            } : {})
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
