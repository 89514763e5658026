export {
  type ConfigGaugeValues,
  createEdgeMetrics,
  createGatewayMetrics,
  type EdgeMetrics,
  type GatewayMetrics,
  metricsText,
  type RequestSeries,
} from './metrics.js';
export { type ProcessMetrics, registerProcessMetrics } from './process-metrics.js';
export { startTelemetry, type Telemetry, type TelemetryOptions } from './sdk.js';
export {
  Attr,
  addSpanEvent,
  endSpan,
  SpanEvents,
  SpanKind,
  SpanNames,
  startChildSpan,
  startServerSpan,
  traceHeaders,
} from './spans.js';
