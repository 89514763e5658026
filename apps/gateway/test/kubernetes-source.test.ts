import { AsyncResource, createHook } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import {
  EndpointSliceSource,
  type EndpointSliceSourceOptions,
} from '../src/discovery/kubernetes-source.js';
import type { DiscoveredPod, PodSourceListener } from '../src/discovery/pod-source.js';

/**
 * EndpointSliceSource against a stand-in API server (node:http on 127.0.0.1) that answers
 * with recorded responses (fixtures/endpointslices/README.md says what each holds). The
 * client library talks real HTTP to it: list, then watch, as against a cluster.
 */

const fixture = (name: string) =>
  readFileSync(new URL(`./fixtures/endpointslices/${name}`, import.meta.url), 'utf8');
const LIST = fixture('list.json');
const LIST_AFTER_EXPIRY = fixture('list-after-expiry.json');
const EVENTS = fixture('watch-events.ndjson').trim().split('\n');
const EXPIRED = fixture('watch-expired.ndjson').trim();
const FORBIDDEN = fixture('forbidden.json');

const PATH = '/apis/discovery.k8s.io/v1/namespaces/inference/endpointslices';
const SELECTOR = 'kubernetes.io/service-name=vllm';

/** An answer to a list or watch: a whole response, `hold` (none), or `stream` (200, open). */
type Answer = { status: number; body: string } | 'hold' | 'stream';
const ok = (body: string): Answer => ({ status: 200, body });

interface Seen {
  path: string;
  query: Record<string, string>;
  at: number;
}

class FakeApiServer {
  readonly requests: Seen[] = [];
  /** Answers to the next lists, in order; then `list`. */
  readonly lists: Answer[] = [];
  list: Answer = 'hold';
  /** Answers to the next watches, in order; then an open stream. */
  readonly watches: Answer[] = [];
  /** Watch responses streaming, oldest first (ended ones stay). */
  readonly streams: ServerResponse[] = [];
  readonly #sockets = new Set<Socket>();
  readonly #server: Server;

  private constructor() {
    this.#server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://api');
      const query = Object.fromEntries(url.searchParams);
      this.requests.push({ path: url.pathname, query, at: performance.now() });
      const watching = query.watch === 'true';
      const answer = watching
        ? (this.watches.shift() ?? 'stream')
        : (this.lists.shift() ?? this.list);
      if (answer === 'hold') return;
      if (answer === 'stream') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        this.streams.push(res);
        return;
      }
      res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
    });
    this.#server.on('connection', (socket) => {
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
    });
  }

  static async start(): Promise<FakeApiServer> {
    const api = new FakeApiServer();
    await new Promise<void>((resolve) => api.#server.listen(0, '127.0.0.1', resolve));
    return api;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  get openConnections(): number {
    return this.#sockets.size;
  }

  /** One event line on the newest watch. */
  send(line: string): void {
    this.streams.at(-1)!.write(`${line}\n`);
  }

  /** The newest watch ends as the API server ends one at its timeoutSeconds. */
  endWatch(): void {
    this.streams.at(-1)!.end();
  }

  /** The newest watch's connection breaks. */
  dropWatch(): void {
    this.streams.at(-1)!.socket!.destroy();
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function apiServer(): Promise<FakeApiServer> {
  const api = await FakeApiServer.start();
  cleanups.push(() => api.close());
  return api;
}

/** A source on `api` (no TLS, no auth) and what it reports. */
function watchService(api: FakeApiServer, options: Partial<EndpointSliceSourceOptions> = {}) {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: 'fake', server: api.url, skipTLSVerify: true }],
    users: [{ name: 'anonymous' }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'anonymous' }],
    currentContext: 'fake',
  });
  const source = new EndpointSliceSource({
    namespace: 'inference',
    service: 'vllm',
    scheme: 'http',
    kubeConfig,
    ...options,
  });
  const reports: DiscoveredPod[][] = [];
  const errors: Error[] = [];
  const listener: PodSourceListener = {
    onPods: (pods) => reports.push([...pods]),
    onError: (error) => errors.push(error),
  };
  cleanups.push(() => source.stop());
  return { source, listener, reports, errors, start: () => source.start(listener) };
}

async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = performance.now() + 3000;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const pod = (address: string, port = 8000, scheme = 'http'): DiscoveredPod => ({
  name: `${address}:${port}`,
  url: `${scheme}://${address}:${port}`,
});
const names = (pods: DiscoveredPod[]) => pods.map((p) => p.name);

/** What the API server was asked: list or watch, from which version. */
function asked(api: FakeApiServer) {
  return api.requests.map(({ path, query }) => ({
    path,
    labelSelector: query.labelSelector,
    watch: query.watch,
    resourceVersion: query.resourceVersion,
  }));
}
const listed = {
  path: PATH,
  labelSelector: SELECTOR,
  watch: undefined,
  resourceVersion: undefined,
};
const watched = (resourceVersion: string) => ({
  path: PATH,
  labelSelector: SELECTOR,
  watch: 'true',
  resourceVersion,
});

describe('EndpointSliceSource', () => {
  it('reports the ready endpoints of every slice after the list, then after each change', async () => {
    const api = await apiServer();
    api.lists.push(ok(LIST));
    const { reports, errors, start } = watchService(api);
    start();
    await until(() => reports.length === 1 && api.streams.length === 1, 'list, then watch');

    // Ready and ready: null count; not ready and terminating (though serving, or even ready)
    // do not; the endpoint listed in two slices counts once; the IPv6 slice of the same pods
    // not at all.
    expect(reports[0]).toEqual([pod('10.0.1.5'), pod('10.0.1.6'), pod('10.0.2.7')]);
    expect(asked(api)).toEqual([listed, watched('48213')]);
    const watch = api.requests[1]!.query;
    expect(watch.allowWatchBookmarks).toBe('true');
    expect(Number(watch.timeoutSeconds)).toBeGreaterThan(0);

    // ADDED, MODIFIED (not ready), MODIFIED (no pod in or out), MODIFIED (terminating),
    // DELETED, BOOKMARK: a report for each change and none otherwise.
    const changes = [1, 1, 0, 1, 1, 0];
    for (const [i, line] of EVENTS.entries()) {
      const before = reports.length;
      api.send(line);
      if (changes[i]) await until(() => reports.length === before + 1, `event ${i + 1}`);
    }

    // The server ends the watch (its timeout): watched again from the bookmark, not listed.
    api.endWatch();
    await until(() => api.streams.length === 2, 'the next watch');
    expect(asked(api)).toEqual([listed, watched('48213'), watched('48330')]);
    // Every event was handled before the end of its stream.
    expect(reports.map(names)).toEqual([
      ['10.0.1.5:8000', '10.0.1.6:8000', '10.0.2.7:8000'],
      ['10.0.1.5:8000', '10.0.1.6:8000', '10.0.2.7:8000', '10.0.3.9:8000'],
      ['10.0.1.5:8000', '10.0.2.7:8000', '10.0.3.9:8000'],
      ['10.0.1.5:8000', '10.0.3.9:8000'],
      ['10.0.1.5:8000'],
    ]);
    expect(errors).toEqual([]);
  });

  it('lists again when a watch ends with 410 Gone, as an ERROR event or as the HTTP status', async () => {
    const api = await apiServer();
    api.lists.push(ok(LIST), ok(LIST_AFTER_EXPIRY), ok(LIST_AFTER_EXPIRY));
    const gone = JSON.parse(EXPIRED).object;
    api.watches.push('stream', { status: 410, body: JSON.stringify(gone) });
    const { reports, errors, start } = watchService(api);
    start();
    await until(() => api.streams.length === 1, 'the first watch');

    // As the API server does: the Status in an ERROR event, then the end of the response.
    api.send(EXPIRED);
    api.endWatch();
    await until(() => api.streams.length === 2, 'list, 410, list, watch');

    // Each list reports the fresh set: .6 ready again, vllm-q9z4m without endpoints.
    expect(reports.map(names)).toEqual([
      ['10.0.1.5:8000', '10.0.1.6:8000', '10.0.2.7:8000'],
      ['10.0.1.5:8000', '10.0.1.6:8000'],
      ['10.0.1.5:8000', '10.0.1.6:8000'],
    ]);
    expect(asked(api)).toEqual([
      listed,
      watched('48213'),
      listed,
      watched('51002'),
      listed,
      watched('51002'),
    ]);
    // An expired version is routine, not an error.
    expect(errors).toEqual([]);
  });

  it('uses the port asked for, by name or by number, and says when a slice has none', async () => {
    const api = await apiServer();
    api.list = ok(LIST);
    const byName = watchService(api, { port: 'metrics', scheme: 'https' });
    const byNumber = watchService(api, { port: 9400 });
    const byDigits = watchService(api, { port: '9400' });
    const missing = watchService(api, { port: 'grpc' });
    for (const watcher of [byName, byNumber, byDigits, missing]) watcher.start();
    await until(
      () => [byName, byNumber, byDigits, missing].every((w) => w.reports.length === 1),
      'four lists',
    );

    expect(byName.reports[0]).toEqual([
      pod('10.0.1.5', 9400, 'https'),
      pod('10.0.1.6', 9400, 'https'),
      pod('10.0.2.7', 9400, 'https'),
    ]);
    const metricsPort = [pod('10.0.1.5', 9400), pod('10.0.1.6', 9400), pod('10.0.2.7', 9400)];
    expect(byNumber.reports[0]).toEqual(metricsPort);
    expect(byDigits.reports[0]).toEqual(metricsPort);
    expect(missing.reports[0]).toEqual([]);
    expect(missing.errors.map((e) => e.message)).toEqual([
      'EndpointSlices of Service inference/vllm: no port "grpc" in vllm-q9z4m, vllm-7xk2p',
    ]);
    for (const watcher of [byName, byNumber, byDigits]) expect(watcher.errors).toEqual([]);
  });

  it('an IPv6-only Service: its IPv6 slices, bracketed in URLs', async () => {
    const api = await apiServer();
    const list = JSON.parse(LIST);
    list.items = list.items.filter((slice: any) => slice.addressType === 'IPv6');
    api.lists.push(ok(JSON.stringify(list)));
    const { reports, start } = watchService(api);
    start();
    await until(() => reports.length === 1, 'the list');
    expect(reports[0]).toEqual([
      { name: 'fd00:10:1::5:8000', url: 'http://[fd00:10:1::5]:8000' },
      { name: 'fd00:10:1::6:8000', url: 'http://[fd00:10:1::6]:8000' },
      { name: 'fd00:10:2::7:8000', url: 'http://[fd00:10:2::7]:8000' },
    ]);
  });

  it('reports a refused list and a broken watch, and retries each after a back-off', async () => {
    const api = await apiServer();
    api.lists.push({ status: 403, body: FORBIDDEN }, ok(LIST));
    const { reports, errors, start } = watchService(api);
    start();
    await until(() => reports.length === 1 && api.streams.length === 1, 'the second list');

    // The API server's own message, which names the missing permission.
    expect(errors.map((e) => e.message)).toEqual([
      'listing EndpointSlices of Service inference/vllm: HTTP 403: endpointslices.discovery.k8s.io is forbidden: User "system:serviceaccount:fairgate:fairgate" cannot list resource "endpointslices" in API group "discovery.k8s.io" in the namespace "inference"',
    ]);
    // The first back-off is 250..500 ms.
    expect(api.requests[1]!.at - api.requests[0]!.at).toBeGreaterThanOrEqual(200);

    api.dropWatch();
    await until(() => api.streams.length === 2, 'the watch again');
    expect(errors).toHaveLength(2);
    expect(errors[1]!.message).toMatch(/^watching EndpointSlices of Service inference\/vllm: /);
    // Resumed from the version it had: no list, no report, after a back-off.
    expect(asked(api)).toEqual([listed, listed, watched('48213'), watched('48213')]);
    expect(api.requests[3]!.at - api.requests[2]!.at).toBeGreaterThanOrEqual(200);
    expect(reports).toHaveLength(1);

    // The new watch is live.
    api.send(EVENTS[0]!);
    await until(() => reports.length === 2, 'the event on the new watch');
    expect(names(reports[1]!)).toContain('10.0.3.9:8000');
  });

  describe('stop()', () => {
    /**
     * Runs `start` under its own async resource and tracks the timers and sockets created
     * from it, down every async chain (the client library's included).
     */
    function trackHandles(start: () => void) {
      const family = new Set<number>();
      const live = new Map<number, { type: string; resource: any }>();
      const hook = createHook({
        init(asyncId, type, triggerAsyncId, resource) {
          if (!family.has(triggerAsyncId)) return;
          family.add(asyncId);
          if (type === 'Timeout' || type === 'TCPWRAP') live.set(asyncId, { type, resource });
        },
        destroy(asyncId) {
          live.delete(asyncId);
        },
      }).enable();
      cleanups.push(async () => {
        hook.disable();
      });
      const root = new AsyncResource('EndpointSliceSource');
      family.add(root.asyncId());
      root.runInAsyncScope(start);
      const handles = () => [...live.values()];
      return {
        handles,
        /**
         * Sockets, and timers other than the one the library's Watch never clears (its
         * `AbortSignal.timeout(30000)`, unref'd, which fires into an unused signal).
         */
        ours: () =>
          handles().filter(
            ({ type, resource }) =>
              type !== 'Timeout' || resource.hasRef() || resource._idleTimeout !== 30_000,
          ),
      };
    }

    it('ends an open watch: no socket, no timer of its own left', async () => {
      const api = await apiServer();
      api.lists.push(ok(LIST));
      const watcher = watchService(api);
      const tracked = trackHandles(watcher.start);
      await until(() => api.streams.length === 1, 'the watch');
      expect(tracked.ours().map((h) => h.type)).toContain('TCPWRAP');

      await watcher.source.stop();
      await until(() => api.openConnections === 0, 'the server to see the watch closed');
      await until(() => tracked.ours().length === 0, 'no handle left');
      expect(tracked.handles().every(({ resource }) => !resource.hasRef())).toBe(true);
      expect(watcher.errors).toEqual([]);
    });

    it('ends a list in flight and a back-off', async () => {
      const api = await apiServer();
      const held = watchService(api); // its list is never answered
      const heldHandles = trackHandles(held.start);
      await until(() => api.requests.length === 1, 'the held list');
      api.list = { status: 500, body: '{"kind":"Status","code":500,"message":"etcd timeout"}' };
      const failing = watchService(api);
      const failingHandles = trackHandles(failing.start);
      await until(() => failing.errors.length === 1, 'the failed list');
      expect(failing.errors[0]!.message).toBe(
        'listing EndpointSlices of Service inference/vllm: HTTP 500: etcd timeout',
      );
      // Its back-off sleep, the only timer a list leaves (Node marks a cleared one -1).
      const timers = failingHandles.handles().filter((h) => h.type === 'Timeout');
      expect(timers).toHaveLength(1);
      const backoff = timers[0]!.resource;
      expect(backoff._idleTimeout).toBeGreaterThan(0);

      await Promise.all([held.source.stop(), failing.source.stop()]);
      await until(() => api.openConnections === 0, 'the server to see the list closed');
      await until(
        () => heldHandles.ours().length === 0 && failingHandles.ours().length === 0,
        'no handle left',
      );
      expect(backoff._idleTimeout, 'the back-off cleared, not waited out').toBe(-1);
      // No list again.
      expect(api.requests).toHaveLength(2);
      expect(held.errors).toEqual([]);
      expect(held.reports).toEqual([]);
    });
  });
});
