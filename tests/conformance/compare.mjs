// Compare two conformance result files (checks.json written by `conformance server -o DIR`):
//   node compare.mjs SCENARIO DIRECT_CHECKS_JSON DIRECT_CLI_LOG EDGE_CHECKS_JSON EDGE_CLI_LOG
// Prints one count line per run, then the checks that pass direct but fail through the edge,
// the ones that fail direct too, and any that fail direct but pass through the edge.
// Counts are the suite's own: passed = SUCCESS, denominator = SUCCESS + FAILURE (WARNING and
// SKIPPED count in neither), cross-checked against the CLI's "Passed: X/Y" line.
// Exit: 0 edge passes >= direct, 1 edge passes fewer checks, 2 unparsable input.
import { readFileSync } from 'node:fs';

const [scenario, directJson, directLog, edgeJson, edgeLog] = process.argv.slice(2);
const die = msg => {
    console.error(`conformance: ${msg}`);
    process.exit(2);
};

function load(label, jsonPath, logPath) {
    let checks;
    try {
        checks = JSON.parse(readFileSync(jsonPath, 'utf8'));
    } catch (e) {
        die(`${label}: cannot read ${jsonPath}: ${e.message}`);
    }
    if (!Array.isArray(checks) || checks.length === 0) die(`${label}: ${jsonPath} holds no checks`);
    const passed = checks.filter(c => c.status === 'SUCCESS').length;
    const denominator = checks.filter(c => c.status === 'SUCCESS' || c.status === 'FAILURE').length;
    // The CLI's own summary must agree (guards against a changed checks.json format).
    const log = readFileSync(logPath, 'utf8').replace(/\x1b\[[0-9;]*m/g, '');
    const m = log.match(/^Passed: (\d+)\/(\d+),/m);
    if (!m) die(`${label}: no "Passed: X/Y" line in the CLI output (${logPath})`);
    if (Number(m[1]) !== passed || Number(m[2]) !== denominator) {
        die(`${label}: CLI says ${m[1]}/${m[2]} but ${jsonPath} counts ${passed}/${denominator}`);
    }
    // A check id can repeat (one per probed variant): key = id + occurrence number.
    const seen = new Map();
    const byKey = new Map();
    for (const c of checks) {
        const n = (seen.get(c.id) ?? 0) + 1;
        seen.set(c.id, n);
        byKey.set(n === 1 ? c.id : `${c.id}#${n}`, c);
    }
    return { passed, denominator, byKey };
}

const direct = load('direct', directJson, directLog);
const edge = load('edge', edgeJson, edgeLog);
console.log(`conformance ${scenario} direct: ${direct.passed}/${direct.denominator} passed`);
console.log(`conformance ${scenario} edge: ${edge.passed}/${edge.denominator} passed`);

const oneLine = v => {
    const s = JSON.stringify(v);
    return s && s.length > 400 ? `${s.slice(0, 400)}…` : s;
};
const variant = c => (c.details?.fieldIssue ? ` (${c.details.fieldIssue})` : '');
const regressions = [];
const directFailures = [];
for (const [key, d] of direct.byKey) {
    const e = edge.byKey.get(key);
    if (d.status === 'SUCCESS' && e?.status !== 'SUCCESS') regressions.push([key, d, e]);
    if (d.status === 'FAILURE') directFailures.push([key, d, e]);
}
for (const [key, e] of edge.byKey) {
    if (!direct.byKey.has(key) && e.status === 'FAILURE') regressions.push([key, undefined, e]);
}

if (regressions.length) {
    console.log(`${scenario}: passes direct, fails through the edge:`);
    for (const [key, d, e] of regressions) {
        console.log(`  - ${key}${variant(e ?? d)}: ${e ? e.status : 'MISSING'}: ${e?.errorMessage ?? '(no message)'}`);
        if (e?.details?.response !== undefined) console.log(`      edge response:   ${oneLine(e.details.response)}`);
        if (d?.details?.response !== undefined) console.log(`      direct response: ${oneLine(d.details.response)}`);
    }
}
if (directFailures.length) {
    console.log(`${scenario}: fails direct too (the server's, not the edge's):`);
    for (const [key, d, e] of directFailures) {
        console.log(`  - ${key}: ${d.errorMessage ?? '(no message)'}${e?.status === 'SUCCESS' ? ' [passes through the edge]' : ''}`);
    }
}
// The requirement is on the count: through the edge, not fewer passes than direct.
process.exit(edge.passed < direct.passed ? 1 : 0);
