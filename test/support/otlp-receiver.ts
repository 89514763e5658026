import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import protobuf from 'protobufjs';

/**
 * An OTLP/HTTP trace receiver on 127.0.0.1 for tests and benches (loadtest/test/otlp-receiver.test.ts,
 * bench:overhead, bench:waiting): it takes what a gateway's
 * OpenTelemetry SDK exports (`POST /v1/traces`, JSON or protobuf, gzip or not) and keeps the
 * spans' names, kinds, times and attributes, parsed when read rather than while a bench
 * measures. With `keepSpans: false` it only counts the bytes (bench:overhead's traced replica:
 * what exporting costs the replica, with no decoding here). bench:waiting reads the gateway's
 * own release and grant times from the spans (`releaseToGrantMs`).
 */
/** OTLP's SpanKind numbers (opentelemetry-proto trace.proto). */
export const OtlpSpanKind = { internal: 1, server: 2, client: 3 } as const;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  name: string;
  kind: number;
  /** Unix time in ms, with the export's sub-millisecond part. */
  startMs: number;
  endMs: number;
  attributes: Record<string, string | number | boolean>;
}

export interface OtlpReceiver {
  /** The OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT). */
  readonly url: string;
  /**
   * Spans received since the start, in arrival order. The exports are parsed when this is
   * read, not as they arrive (a bench reads it once the phase it measures is over); one
   * that does not parse throws here.
   */
  readonly spans: readonly ReceivedSpan[];
  /**
   * OTEL_* variables that send a process's spans here. `batching`: `every-span` (default:
   * every 200 ms, a queue of 65,536, no drops) or `sdk-default` (none set: batches of 128,
   * the SDK's queue of 2,048, what an operator who only names the endpoint gets).
   */
  exportEnv(options?: {
    batching?: ExportBatching;
    /** The exporter's encoding (a protobuf body's bytes also count in `protobufBytes`). */
    protocol?: 'http/json' | 'http/protobuf';
  }): Record<string, string>;
  /** Bytes of protobuf exports taken so far. */
  readonly protobufBytes: number;
  close(): Promise<void>;
}

const PROTOBUF = 'application/x-protobuf';

type ExportBatching = 'every-span' | 'sdk-default';

const BATCHING: Record<ExportBatching, Record<string, string>> = {
  'every-span': {
    OTEL_BSP_SCHEDULE_DELAY: '200',
    OTEL_BSP_MAX_QUEUE_SIZE: '65536',
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4096',
  },
  'sdk-default': {},
};

export async function startOtlpReceiver({ keepSpans = true } = {}): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const unparsed: Array<{ body: Buffer; protobuf: boolean }> = [];
  const parseTaken = () => {
    for (const { body, protobuf } of unparsed.splice(0)) {
      spans.push(
        ...(protobuf ? parseProtobufExport(body) : parseExport(JSON.parse(body.toString('utf8')))),
      );
    }
    return spans;
  };
  let protobufBytes = 0;
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      res.statusCode = 404;
      res.end();
      return;
    }
    readBody(req)
      .then((body) => {
        const protobuf = req.headers['content-type'] === PROTOBUF;
        if (protobuf) protobufBytes += body.length;
        if (keepSpans) unparsed.push({ body, protobuf });
        res.setHeader('content-type', protobuf ? PROTOBUF : 'application/json');
        res.end(protobuf ? undefined : '{}');
      })
      .catch((error: unknown) => {
        res.statusCode = 400;
        res.end(String(error));
      });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    get spans() {
      return parseTaken();
    },
    get protobufBytes() {
      return protobufBytes;
    },
    exportEnv: ({ batching = 'every-span', protocol = 'http/json' } = {}) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: url,
      OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
      ...BATCHING[batching],
    }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  return req.headers['content-encoding'] === 'gzip' ? gunzipSync(body) : body;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}

interface OtlpSpan {
  traceId?: string;
  spanId?: string;
  name?: string;
  kind?: number;
  startTimeUnixNano?: string | number | { low: number; high: number };
  endTimeUnixNano?: string | number | { low: number; high: number };
  attributes?: Array<{ key: string; value?: OtlpValue }>;
}

/** The spans of one ExportTraceServiceRequest in its JSON encoding. */
export function parseExport(request: {
  resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: OtlpSpan[] }> }>;
}): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const resource of request.resourceSpans ?? []) {
    for (const scope of resource.scopeSpans ?? []) {
      for (const span of scope.spans ?? []) {
        const attributes: ReceivedSpan['attributes'] = {};
        for (const { key, value } of span.attributes ?? []) {
          const v = attributeValue(value);
          if (v !== undefined) attributes[key] = v;
        }
        out.push({
          traceId: span.traceId ?? '',
          spanId: span.spanId ?? '',
          name: span.name ?? '',
          kind: span.kind ?? 0,
          startMs: nanosToMs(span.startTimeUnixNano),
          endMs: nanosToMs(span.endTimeUnixNano),
          attributes,
        });
      }
    }
  }
  return out;
}

/** The part of opentelemetry-proto's ExportTraceServiceRequest that `parseExport` reads. */
const EXPORT_TRACE_REQUEST = protobuf
  .parse(`
    syntax = "proto3";
    package otlp;
    message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
    message ResourceSpans { repeated ScopeSpans scope_spans = 2; }
    message ScopeSpans { repeated Span spans = 2; }
    message Span {
      bytes trace_id = 1;
      bytes span_id = 2;
      string name = 5;
      int32 kind = 6;
      fixed64 start_time_unix_nano = 7;
      fixed64 end_time_unix_nano = 8;
      repeated KeyValue attributes = 9;
    }
    message KeyValue { string key = 1; AnyValue value = 2; }
    message AnyValue {
      oneof value { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4; }
    }
  `)
  .root.lookupType('otlp.ExportTraceServiceRequest');

/** The spans of one ExportTraceServiceRequest in its protobuf encoding (ids as hex, as JSON has them). */
export function parseProtobufExport(body: Uint8Array): ReceivedSpan[] {
  const request = EXPORT_TRACE_REQUEST.toObject(EXPORT_TRACE_REQUEST.decode(body), {
    longs: String,
    bytes: String,
  }) as Parameters<typeof parseExport>[0];
  const hex = (base64: string | undefined) => Buffer.from(base64 ?? '', 'base64').toString('hex');
  for (const resource of request.resourceSpans ?? []) {
    for (const scope of resource.scopeSpans ?? []) {
      for (const span of scope.spans ?? []) {
        span.traceId = hex(span.traceId);
        span.spanId = hex(span.spanId);
      }
    }
  }
  return parseExport(request);
}

function attributeValue(value: OtlpValue | undefined): string | number | boolean | undefined {
  if (!value) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  return value.boolValue;
}

/**
 * Unix nanoseconds, as the JSON encoding carries them (a decimal string: past 2^53, so read
 * as a BigInt; a number; or the {low, high} halves of older exporters), in ms.
 */
export function nanosToMs(nanos: OtlpSpan['startTimeUnixNano']): number {
  if (nanos === undefined) return Number.NaN;
  const big =
    typeof nanos === 'object'
      ? (BigInt(nanos.high >>> 0) << 32n) | BigInt(nanos.low >>> 0)
      : BigInt(nanos);
  return Number(big / 1_000n) / 1_000;
}

/**
 * Release -> next grant on the gateway's own clock: the j-th release (the end of a CLIENT
 * span: the relay releases the slot right before it ends that span) against the j-th grant
 * (the end of a `fairgate.queue` span), both sorted by time. While the budget is full and
 * requests wait, each release's dispatch pass makes one grant, FIFO. Times in ms.
 */
export function releaseToGrantMs(releases: readonly number[], grants: readonly number[]): number[] {
  const r = [...releases].sort((a, b) => a - b);
  const g = [...grants].sort((a, b) => a - b);
  const pairs = Math.min(r.length, g.length);
  const gaps: number[] = [];
  for (let j = 0; j < pairs; j++) gaps.push(g[j]! - r[j]!);
  return gaps;
}
