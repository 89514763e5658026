import { decodeSseStream, type StreamChunk } from '@fairgate/openai';
import { afterEach } from 'vitest';
import type { SimConfig } from '../src/config.js';
import { createSimServer, type SimServer } from '../src/server.js';

/** HTTP helpers shared by the server and process tests. */

export interface SseResult {
  /** Raw data of every event, `[DONE]` included. */
  data: string[];
  /** Parsed chunks (every event but `[DONE]`). */
  chunks: StreamChunk[];
  /** performance.now() when each event was decoded. */
  times: number[];
}

/**
 * In-process sims (Hono's app.request(), no network) made with `defaults` under each call's
 * overrides, quiet, and closed after every test of the file that calls this.
 */
export function inProcessSims(
  defaults: Partial<SimConfig>,
): (overrides?: Partial<SimConfig>) => SimServer {
  const sims: SimServer[] = [];
  afterEach(() => {
    for (const server of sims.splice(0)) server.close();
  });
  return (overrides = {}) => {
    const server = createSimServer({ ...defaults, ...overrides }, { log: () => {} });
    sims.push(server);
    return server;
  };
}

export async function readSse(response: Response): Promise<SseResult> {
  if (!response.body) throw new Error(`no body (status ${response.status})`);
  const result: SseResult = { data: [], chunks: [], times: [] };
  for await (const event of decodeSseStream(response.body as AsyncIterable<Uint8Array>)) {
    result.data.push(event.data);
    result.times.push(performance.now());
    if (event.data !== '[DONE]') result.chunks.push(JSON.parse(event.data) as StreamChunk);
  }
  return result;
}

export function jsonPost(body: unknown, headers: Record<string, string> = {}): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  };
}

/** A distinct prompt of about `tokens` estimated tokens (4 characters each). */
export function promptText(tokens: number, salt: string): string {
  const unit = `${salt}-`.padEnd(8, 'x');
  return unit.repeat(Math.ceil((tokens * 4) / unit.length)).slice(0, tokens * 4);
}

/** Samples of a metric in Prometheus text, keyed by their label set. */
export function metricValues(text: string, name: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.length === 0) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (match?.[1] === name) values.set(match[2] ?? '', Number(match[3]));
  }
  return values;
}

/** The single sample of `name` (sums over label sets when there are several). */
export function metricValue(text: string, name: string): number {
  const values = [...metricValues(text, name).values()];
  if (values.length === 0) throw new Error(`metric ${name} not found`);
  return values.reduce((sum, value) => sum + value, 0);
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}
