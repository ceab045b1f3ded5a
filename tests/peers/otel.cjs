// OpenTelemetry for a test peer, loaded first (`node --require ./otel.cjs ts-server.mjs …`)
// when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names a collector: the official JS SDK traces the
// server's HTTP requests (a SERVER span per request, its parent from the W3C `traceparent`
// header) and exports each span as it ends (OTLP/HTTP, protobuf). Without the variable it
// does nothing.
const endpoint = process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
if (endpoint) {
    const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
    const { SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
    const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');
    const { W3CTraceContextPropagator } = require('@opentelemetry/core');
    const { resourceFromAttributes } = require('@opentelemetry/resources');
    const { registerInstrumentations } = require('@opentelemetry/instrumentation');
    const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');
    const provider = new NodeTracerProvider({
        resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME || 'ts-peer' }),
        spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: endpoint }))]
    });
    provider.register({ propagator: new W3CTraceContextPropagator() });
    registerInstrumentations({ instrumentations: [new HttpInstrumentation()] });
    // The instrumentation patches `http` when it is required; the server imports it as an ES
    // module, which shares the built-in's objects: require it here so the patch is in place.
    require('http');
    require('https');
}
