export {
  type ConfigGaugeValues,
  createGatewayMetrics,
  type GatewayMetrics,
  LATENCY_BUCKETS,
  REDIS_CALL_BUCKETS,
} from './metrics.js';
export { exportRequested, startTelemetry, type Telemetry, type TelemetryOptions } from './sdk.js';
export {
  Attr,
  addSpanEvent,
  endSpan,
  PropagationOnlyTracer,
  SpanEvents,
  SpanKind,
  SpanNames,
  startChildSpan,
  startServerSpan,
  traceHeaders,
} from './spans.js';
