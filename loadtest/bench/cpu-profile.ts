/**
 * A V8 CPU profile (the `Profiler.stop` result of the DevTools protocol, or a
 * `--cpu-prof` file) summarised as where a process spends its time: self time grouped by
 * the part of the stack that spent it (Node's HTTP server, undici, ioredis, the gateway's
 * own code, GC...). bench/profile.ts prints these per request; docs/performance-history.md
 * keeps the before/after tables.
 */
export interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string; lineNumber?: number };
    children?: number[];
  }>;
  samples: number[];
  timeDeltas: number[];
}

/** Microseconds of self time per category, idle excluded; `busy` is their sum. */
export interface ProfileSummary {
  busy: number;
  byCategory: Map<string, number>;
  /** Self time per function (`name file:line`). */
  byFunction: Map<string, number>;
}

const CATEGORIES: Array<[string, (url: string, fn: string) => boolean]> = [
  ['GC', (url, fn) => url === '' && fn === '(garbage collector)'],
  [
    'socket writes and reads (syscalls)',
    (url, fn) =>
      url === '' &&
      /^(writev|writeBuffer|write\w*String|readStart|readStop|onStreamRead)$/.test(fn),
  ],
  ['native builtins', (url, fn) => url === '' && fn !== '(program)'],
  ['V8 (program)', (url, fn) => url === '' && fn === '(program)'],
  ['ioredis', (url) => /node_modules\/(ioredis|redis-parser|denque|cluster-key-slot)\//.test(url)],
  ['undici (pod client)', (url) => /node_modules\/undici\/|node:internal\/deps\/undici/.test(url)],
  ['hono', (url) => /node_modules\/(@hono|hono)\//.test(url)],
  ['prom-client', (url) => url.includes('node_modules/prom-client/')],
  ['zod', (url) => url.includes('node_modules/zod/')],
  ['OpenTelemetry', (url) => url.includes('node_modules/@opentelemetry/')],
  ['Node HTTP server', (url) => /node:(_http|internal\/http|http\b)/.test(url)],
  [
    'Node sockets, streams',
    (url) => /node:(net|internal\/stream_base_commons|internal\/streams|stream)\b/.test(url),
  ],
  [
    'Node event loop, timers, events',
    (url) => /node:(events|internal\/process\/task_queues|internal\/timers|timers)\b/.test(url),
  ],
  ['gateway (apps/gateway)', (url) => url.includes('apps/gateway/')],
  ['scheduler (packages/scheduler)', (url) => url.includes('packages/scheduler/')],
  ['other fairgate packages', (url) => url.includes('/packages/')],
  ['Node other', (url) => url.startsWith('node:')],
];

export function categoryOf(url: string, functionName: string): string {
  for (const [name, test] of CATEGORIES) if (test(url, functionName)) return name;
  return 'other';
}

export function summarizeProfile(profile: CpuProfile): ProfileSummary {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const byCategory = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = nodes.get(profile.samples[i]!);
    const micros = profile.timeDeltas[i] ?? 0;
    if (!node || node.callFrame.functionName === '(idle)') continue;
    const category = categoryOf(node.callFrame.url, node.callFrame.functionName);
    byCategory.set(category, (byCategory.get(category) ?? 0) + micros);
    const { functionName, url } = node.callFrame;
    const where = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(apps|packages|node_modules)\//, '$1/')}`;
    byFunction.set(where, (byFunction.get(where) ?? 0) + micros);
    busy += micros;
  }
  return { busy, byCategory, byFunction };
}

/** Category names in display order. */
export const CATEGORY_NAMES = [...CATEGORIES.map(([name]) => name), 'other'];
