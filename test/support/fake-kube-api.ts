import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';

/**
 * A stand-in Kubernetes API server for end-to-end tests: node:http on 127.0.0.1 (a random
 * port, plain HTTP, no auth) holding EndpointSlices and serving
 * `GET /apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices` as the real API does:
 *
 * - a list: an EndpointSliceList of the namespace's slices that match the `labelSelector`
 *   (equality terms only), its items without kind/apiVersion, at the current resourceVersion;
 * - `watch=true`: a 200 response left open, into which every later change (`apply`) is
 *   written as one JSON line `{"type":...,"object":...}` (objects with kind/apiVersion). A
 *   watch from an older resourceVersion first gets the events it missed; one from a version
 *   `expire()` compacted away gets the 410 ERROR event and ends; one from no version (or
 *   `0`) first gets every slice as ADDED. A watch ends after its `timeoutSeconds`. No
 *   BOOKMARK events (a server may send none).
 *
 * The slices' shapes are those of apps/gateway/test/fixtures/endpointslices/ (recorded from
 * a cluster); `endpointSlice()` builds one. `writeKubeconfig()` points a client at the
 * server (a process's `KUBECONFIG`).
 */

export type EndpointSlice = {
  metadata: { name: string; namespace: string; resourceVersion?: string } & Record<string, unknown>;
} & Record<string, unknown>;

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface EndpointSpec {
  address: string;
  /** Conditions as the EndpointSlice controller sets them (a ready pod: all three default). */
  ready?: boolean | null;
  serving?: boolean;
  terminating?: boolean;
}

export interface EndpointSliceSpec {
  /** The slice's name (`<service>-<5 chars>`, as the controller names them). */
  name: string;
  namespace: string;
  service: string;
  addressType?: 'IPv4' | 'IPv6' | 'FQDN';
  ports: Array<{ name: string; port: number }>;
  endpoints: EndpointSpec[];
}

/** An EndpointSlice of `spec.service`, shaped as the EndpointSlice controller writes one. */
export function endpointSlice(spec: EndpointSliceSpec): EndpointSlice {
  return {
    metadata: {
      name: spec.name,
      generateName: `${spec.service}-`,
      namespace: spec.namespace,
      uid: uid(`slice/${spec.namespace}/${spec.name}`),
      generation: 1,
      creationTimestamp: '2026-12-01T14:00:00Z',
      labels: {
        'app.kubernetes.io/name': spec.service,
        'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
        'kubernetes.io/service-name': spec.service,
      },
      ownerReferences: [
        {
          apiVersion: 'v1',
          kind: 'Service',
          name: spec.service,
          uid: uid(`service/${spec.namespace}/${spec.service}`),
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    addressType: spec.addressType ?? 'IPv4',
    endpoints: spec.endpoints.map((endpoint) => ({
      addresses: [endpoint.address],
      conditions: {
        ready: endpoint.ready === undefined ? true : endpoint.ready,
        serving: endpoint.serving ?? endpoint.ready !== false,
        terminating: endpoint.terminating ?? false,
      },
      targetRef: {
        kind: 'Pod',
        namespace: spec.namespace,
        name: `${spec.service}-${endpoint.address.replaceAll(/[.:]/g, '-')}`,
        uid: uid(`pod/${spec.namespace}/${endpoint.address}`),
      },
      nodeName: 'node-a',
      zone: 'zone-a',
    })),
    ports: spec.ports.map((port) => ({ ...port, protocol: 'TCP' })),
  };
}

/** One request the server answered (or holds open). */
export interface KubeApiRequest {
  verb: 'list' | 'watch';
  namespace: string;
  query: Record<string, string>;
  at: number;
}

interface OpenWatch {
  res: ServerResponse;
  /** The resourceVersion it started from. */
  from: number;
  namespace: string;
  selector: Array<[string, string]>;
}

const PATH = /^\/apis\/discovery\.k8s\.io\/v1\/namespaces\/([^/]+)\/endpointslices$/;
const KIND = { kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1' };

export class FakeKubeApi {
  /** Every list and watch asked for, in order. */
  readonly requests: KubeApiRequest[] = [];
  /** The slices now, by `<namespace>/<name>`. */
  readonly #slices = new Map<string, EndpointSlice>();
  /** Every change since the last `expire()`: what a watch from an older version replays. */
  #history: Array<{ rv: number; type: WatchEventType; slice: EndpointSlice }> = [];
  #rv = 1000;
  /** Watches from a version below this get 410 Gone (compacted away). */
  #oldestRv = 1000;
  readonly #watches = new Set<OpenWatch>();
  readonly #sockets = new Set<Socket>();
  readonly #server: Server;

  private constructor() {
    this.#server = createServer((req, res) => this.#handle(req.url ?? '/', res));
    this.#server.on('connection', (socket) => {
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
    });
  }

  static async start(): Promise<FakeKubeApi> {
    const api = new FakeKubeApi();
    await new Promise<void>((resolve) => api.#server.listen(0, '127.0.0.1', resolve));
    return api;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** The current resourceVersion (of the last change). */
  get resourceVersion(): string {
    return String(this.#rv);
  }

  /** Watches open now. */
  get openWatches(): number {
    return this.#watches.size;
  }

  /**
   * Creates, replaces or deletes a slice at a new resourceVersion and sends the event to
   * every open watch it matches. Returns that version.
   */
  apply(type: WatchEventType, slice: EndpointSlice): string {
    const stored = this.#store(type, slice);
    this.#history.push({ rv: this.#rv, type, slice: stored });
    for (const watch of this.#watches) this.#send(watch, type, stored);
    return this.resourceVersion;
  }

  /**
   * The server's history ends here (an etcd compaction, a watch cache that fell behind):
   * `changes` are made with no event sent, then every open watch gets a 410 Expired ERROR
   * event and ends, and a watch from any version before now gets the same. Only a new list
   * sees the changes.
   */
  expire(changes: Array<[WatchEventType, EndpointSlice]> = []): void {
    for (const [type, slice] of changes) this.#store(type, slice);
    this.#oldestRv = this.#rv;
    this.#history = [];
    for (const watch of [...this.#watches]) {
      watch.res.write(`${JSON.stringify(gone(watch.from, this.#rv))}\n`);
      this.#end(watch);
    }
  }

  async close(): Promise<void> {
    for (const watch of [...this.#watches]) this.#end(watch);
    for (const socket of this.#sockets) socket.destroy();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #store(type: WatchEventType, slice: EndpointSlice): EndpointSlice {
    const key = `${slice.metadata.namespace}/${slice.metadata.name}`;
    this.#rv++;
    const stored = structuredClone(slice);
    stored.metadata.resourceVersion = this.resourceVersion;
    if (type === 'DELETED') this.#slices.delete(key);
    else this.#slices.set(key, stored);
    return stored;
  }

  #handle(rawUrl: string, res: ServerResponse): void {
    const url = new URL(rawUrl, 'http://api');
    const query = Object.fromEntries(url.searchParams);
    const namespace = PATH.exec(url.pathname)?.[1];
    const selector = parseSelector(query.labelSelector);
    if (namespace === undefined || selector === undefined) {
      const [code, reason] = namespace === undefined ? [404, 'NotFound'] : [400, 'BadRequest'];
      res
        .writeHead(code, { 'content-type': 'application/json' })
        .end(JSON.stringify(status(code, reason, `fake API server: cannot serve ${rawUrl}`)));
      return;
    }
    const verb = query.watch === 'true' || query.watch === '1' ? 'watch' : 'list';
    this.requests.push({ verb, namespace, query, at: performance.now() });
    const matches = (slice: EndpointSlice) =>
      slice.metadata.namespace === namespace && matchesSelector(slice, selector);

    if (verb === 'list') {
      const items = [...this.#slices.values()].filter(matches);
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          kind: 'EndpointSliceList',
          apiVersion: 'discovery.k8s.io/v1',
          metadata: { resourceVersion: this.resourceVersion },
          items,
        }),
      );
      return;
    }

    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    const from = Number(query.resourceVersion || this.#rv);
    const watch: OpenWatch = { res, from, namespace, selector };
    if (from < this.#oldestRv) {
      res.end(`${JSON.stringify(gone(from, this.#rv))}\n`);
      return;
    }
    this.#watches.add(watch);
    const timeoutS = Number(query.timeoutSeconds);
    const timer = timeoutS > 0 ? setTimeout(() => this.#end(watch), timeoutS * 1000) : undefined;
    res.on('close', () => {
      clearTimeout(timer);
      this.#watches.delete(watch);
    });
    if (!query.resourceVersion || query.resourceVersion === '0') {
      // From no version (or "any"): the state now, as synthetic ADDED events, first.
      for (const slice of this.#slices.values()) this.#send(watch, 'ADDED', slice);
    } else {
      for (const event of this.#history) {
        if (event.rv > from) this.#send(watch, event.type, event.slice);
      }
    }
  }

  #send(watch: OpenWatch, type: WatchEventType, slice: EndpointSlice): void {
    if (slice.metadata.namespace !== watch.namespace) return;
    if (!matchesSelector(slice, watch.selector)) return;
    watch.res.write(`${JSON.stringify({ type, object: { ...KIND, ...slice } })}\n`);
  }

  #end(watch: OpenWatch): void {
    this.#watches.delete(watch);
    watch.res.end();
  }
}

/**
 * A kubeconfig (YAML) in a fresh temp directory that points at `server`, no auth. It sets
 * `insecure-skip-tls-verify`: @kubernetes/client-node (1.x) refuses a plain `http:` server
 * without it ("HTTP protocol is not allowed when skipTLSVerify is not set or false").
 */
export function writeKubeconfig(server: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-kube-'));
  const path = join(dir, 'kubeconfig.yaml');
  writeFileSync(
    path,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'anonymous', user: {} }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'anonymous' } }],
      'current-context': 'fake',
    }),
  );
  return path;
}

/** `a=b,c==d` as pairs; undefined for anything else (set-based terms, `!=`). */
function parseSelector(selector: string | undefined): Array<[string, string]> | undefined {
  if (!selector) return [];
  const terms: Array<[string, string]> = [];
  for (const term of selector.split(',')) {
    const match = /^\s*([\w./-]+)\s*==?\s*([\w.-]*)\s*$/.exec(term);
    if (!match) return undefined;
    terms.push([match[1]!, match[2]!]);
  }
  return terms;
}

function matchesSelector(slice: EndpointSlice, selector: Array<[string, string]>): boolean {
  const labels = (slice.metadata.labels ?? {}) as Record<string, string>;
  return selector.every(([key, value]) => labels[key] === value);
}

function status(code: number, reason: string, message: string) {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    code,
  };
}

/** The ERROR event the API server ends a watch with when its version was compacted away. */
function gone(asked: number, oldest: number) {
  return {
    type: 'ERROR',
    object: status(410, 'Expired', `too old resource version: ${asked} (${oldest})`),
  };
}

/** A stable made-up UID (the API's are random v4 UUIDs). */
function uid(of: string): string {
  let hash = 0x811c9dc5;
  for (const char of of) hash = Math.imul(hash ^ char.charCodeAt(0), 0x01000193) >>> 0;
  const hex = hash.toString(16).padStart(8, '0');
  return `${hex}-${hex.slice(0, 4)}-4${hex.slice(5, 8)}-8${hex.slice(1, 4)}-${hex}${hex.slice(0, 4)}`;
}
