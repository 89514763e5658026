import type {
  DiscoveryV1Api,
  KubeConfig,
  ObservableMiddleware,
  V1EndpointSlice,
  Watch,
} from '@kubernetes/client-node';
import {
  type DiscoveredPod,
  type PodSource,
  type PodSourceListener,
  podName,
  podUrl,
} from './pod-source.js';

export interface EndpointSliceSourceOptions {
  /** Namespace of the Service. */
  namespace: string;
  /** Service name: its slices are those labelled kubernetes.io/service-name=<service>. */
  service: string;
  /** A port name or number of the slices; absent = each slice's first port. */
  port?: string | number;
  scheme: 'http' | 'https';
  /** Absent = `loadFromDefault()`: $KUBECONFIG, ~/.kube/config, else in-cluster. */
  kubeConfig?: KubeConfig;
}

type Client = typeof import('@kubernetes/client-node');

/** Back-off after a failure: doubles from 0.5 s to 30 s, each delay jittered down by up to half. */
const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 30_000;
/**
 * The API server ends each watch after this long; a watch still open well past it sits on a
 * connection that died without a FIN (a node gone, a NAT entry dropped) and is abandoned.
 */
const WATCH_TIMEOUT_S = 300;
const WATCH_DEADLINE_MS = (WATCH_TIMEOUT_S + 30) * 1000;
/** A watch that ends sooner than this with no event counts as a failure (so no hot loop). */
const SHORT_WATCH_MS = 1000;
/** Address types in order of preference: a dual-stack Service has slices of both families. */
const ADDRESS_TYPES = ['IPv4', 'IPv6', 'FQDN'];

/**
 * The ready pods of a Kubernetes Service, from its EndpointSlices: a list, then a watch from
 * the list's resourceVersion, applied to a copy of every slice of the Service. The set is
 * reported after each list (a list is a fresh read) and after each event that changes it.
 *
 * A watch that ends cleanly (the server's timeout) resumes from the last resourceVersion; one
 * that the server ends with 410 Gone (that version is compacted away) lists again; a failed
 * list or a broken connection is reported to `onError` and retried with back-off, while the
 * pool keeps the last set it was given.
 */
export class EndpointSliceSource implements PodSource {
  readonly #options: EndpointSliceSourceOptions;
  readonly #port: string | number | undefined;
  readonly #labelSelector: string;
  /** Every slice of the Service by name, as last listed or watched. */
  readonly #slices = new Map<string, V1EndpointSlice>();
  #resourceVersion = '';
  #reported: string | undefined;
  #listener: PodSourceListener | undefined;
  #loop: Promise<void> | undefined;
  /** Aborted by stop(): a list in flight, a back-off sleep, the watch (via `#endWatch`). */
  readonly #stopping = new AbortController();
  #endWatch: (() => void) | undefined;

  constructor(options: EndpointSliceSourceOptions) {
    this.#options = options;
    // Port names are IANA service names, which always hold a letter: digits are a number.
    const { port } = options;
    this.#port = typeof port === 'string' && /^\d+$/.test(port) ? Number(port) : port;
    this.#labelSelector = `kubernetes.io/service-name=${options.service}`;
  }

  start(listener: PodSourceListener): void {
    if (this.#loop) throw new Error('EndpointSliceSource: start() called twice');
    this.#listener = listener;
    this.#loop = this.#run();
  }

  async stop(): Promise<void> {
    this.#stopping.abort();
    this.#endWatch?.();
    await this.#loop;
  }

  get #stopped(): boolean {
    return this.#stopping.signal.aborted;
  }

  async #run(): Promise<void> {
    let client: { k8s: Client; api: DiscoveryV1Api; watch: Watch } | undefined;
    let failures = 0;
    let doing = 'connecting to the API server for';
    while (!this.#stopped) {
      try {
        client ??= await this.#connect();
        if (this.#resourceVersion === '') {
          doing = 'listing';
          await this.#list(client.k8s, client.api);
          failures = 0;
        }
        if (this.#stopped) break;
        doing = 'watching';
        const { events } = await this.#watch(client.watch);
        if (events > 0) failures = 0;
      } catch (error) {
        if (this.#stopped) break;
        this.#listener!.onError(describe(error, `${doing} ${this.#where()}`));
        const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** failures++);
        await sleep(ceiling * (0.5 + Math.random() / 2), this.#stopping.signal);
      }
    }
  }

  /** Loaded here, not at the top: only a gateway configured for Kubernetes needs the client. */
  async #connect() {
    const k8s = await import('@kubernetes/client-node');
    let kubeConfig = this.#options.kubeConfig;
    if (!kubeConfig) {
      kubeConfig = new k8s.KubeConfig();
      kubeConfig.loadFromDefault();
    }
    return {
      k8s,
      api: kubeConfig.makeApiClient(k8s.DiscoveryV1Api),
      watch: new k8s.Watch(kubeConfig),
    };
  }

  async #list(k8s: Client, api: DiscoveryV1Api): Promise<void> {
    // The generated client takes no AbortSignal; a middleware hands it stop()'s.
    const signal = this.#stopping.signal;
    const abortable: ObservableMiddleware = {
      pre: (context) => {
        context.setSignal(signal);
        return new k8s.Observable(Promise.resolve(context));
      },
      post: (context) => new k8s.Observable(Promise.resolve(context)),
    };
    const list = await api.listNamespacedEndpointSlice(
      { namespace: this.#options.namespace, labelSelector: this.#labelSelector },
      { middleware: [abortable], middlewareMergeStrategy: 'append' },
    );
    if (this.#stopped) return;
    this.#slices.clear();
    for (const slice of list.items) this.#slices.set(slice.metadata?.name ?? '', slice);
    this.#resourceVersion = list.metadata?.resourceVersion ?? '';
    this.#report(true);
  }

  /**
   * One watch from `#resourceVersion`, until the server or the connection ends it. Resolves
   * with its event count (410 Gone included: `#resourceVersion` is then cleared, so the loop
   * lists again); rejects on a failure the loop should back off from.
   */
  #watch(watch: Watch): Promise<{ events: number }> {
    const { namespace } = this.#options;
    const path = `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/endpointslices`;
    const query = {
      labelSelector: this.#labelSelector,
      resourceVersion: this.#resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: WATCH_TIMEOUT_S,
    };
    const started = performance.now();
    let events = 0;
    let ended = false;
    let controller: AbortController | undefined;
    let deadline: NodeJS.Timeout | undefined;
    return new Promise((resolve, reject) => {
      const finish = (error?: unknown) => {
        if (ended) return;
        ended = true;
        clearTimeout(deadline);
        this.#endWatch = undefined;
        controller?.abort();
        if (this.#stopped || this.#resourceVersion === '') resolve({ events });
        else if (error) reject(error);
        else if (events === 0 && performance.now() - started < SHORT_WATCH_MS) {
          reject(new Error('the server closed the watch at once, with no event'));
        } else resolve({ events });
      };
      this.#endWatch = () => finish();
      deadline = setTimeout(() => {
        finish(new Error(`watch still open ${WATCH_DEADLINE_MS / 1000} s after it started`));
      }, WATCH_DEADLINE_MS).unref();

      const onEvent = (type: string, object: Record<string, unknown>) => {
        if (ended) return;
        if (type === 'ERROR') {
          // A Status object. The server ends the watch after it; do not wait for that.
          const status = object as { code?: number; message?: string };
          if (status.code === 410) this.#resourceVersion = '';
          finish(status.code === 410 ? undefined : new Error(`watch: ${status.message}`));
          return;
        }
        events++;
        const slice = object as unknown as V1EndpointSlice;
        const name = slice.metadata?.name ?? '';
        if (type === 'ADDED' || type === 'MODIFIED') this.#slices.set(name, slice);
        else if (type === 'DELETED') this.#slices.delete(name);
        // BOOKMARKs only move the version on: after a quiet spell the next watch resumes
        // from a recent version instead of a compacted one (410 and a full list).
        this.#resourceVersion = slice.metadata?.resourceVersion ?? this.#resourceVersion;
        if (type !== 'BOOKMARK') this.#report(false);
      };
      const onDone = (error: unknown) => {
        // The server may also refuse the version with a plain HTTP 410.
        if ((error as { statusCode?: number } | null)?.statusCode === 410) {
          this.#resourceVersion = '';
        }
        finish(error);
      };
      watch.watch(path, query, onEvent, onDone).then((c) => {
        controller = c;
        if (ended) c.abort();
      }, finish);
    });
  }

  /** Reports the set when it changed, or always (`force`, after a list). */
  #report(force: boolean): void {
    const { pods, portless } = readyPods(this.#slices.values(), this.#port, this.#options.scheme);
    const key = pods.map((pod) => pod.name).join(' ');
    if (!force && key === this.#reported) return;
    this.#reported = key;
    if (portless.length > 0) {
      const { port } = this.#options;
      const wanted = port === undefined ? 'no port' : `no port ${JSON.stringify(port)}`;
      this.#listener!.onError(new Error(`${this.#where()}: ${wanted} in ${portless.join(', ')}`));
    }
    this.#listener!.onPods(pods);
  }

  #where(): string {
    return `EndpointSlices of Service ${this.#options.namespace}/${this.#options.service}`;
  }
}

/**
 * The pods to send requests to: each endpoint that is ready (unset counts as ready, per the
 * API) and not terminating, at its first address (the only one the API gives a meaning to)
 * and the chosen port of its slice, deduplicated and sorted by name. Only the slices of one
 * address type count, IPv4 when there are any: a dual-stack Service lists each pod in an IPv4
 * and an IPv6 slice, and counting both would send each pod twice its share (the slices of
 * the two families also change one event apart, so a per-pod choice would flicker).
 * `portless` names the slices with ready endpoints but not the port asked for.
 */
function readyPods(
  slices: Iterable<V1EndpointSlice>,
  port: string | number | undefined,
  scheme: 'http' | 'https',
): { pods: DiscoveredPod[]; portless: string[] } {
  const all = [...slices];
  const addressType = ADDRESS_TYPES.find((type) => all.some((s) => s.addressType === type));
  const pods = new Map<string, DiscoveredPod>();
  const portless: string[] = [];
  for (const slice of all.filter((s) => s.addressType === addressType)) {
    const ports = slice.ports ?? [];
    const chosen =
      port === undefined
        ? ports[0]
        : ports.find((p) => (typeof port === 'number' ? p.port === port : p.name === port));
    const ready = (slice.endpoints ?? []).filter(
      (e) => e.conditions?.ready !== false && e.conditions?.terminating !== true,
    );
    // A slice may leave its port unset ("all ports"): nothing to dial.
    if (typeof chosen?.port !== 'number') {
      if (ready.length > 0) portless.push(slice.metadata?.name ?? '(unnamed slice)');
      continue;
    }
    for (const endpoint of ready) {
      const address = endpoint.addresses[0];
      if (address === undefined) continue;
      // An endpoint can sit in two slices for a moment while the controller moves it.
      const name = podName(address, chosen.port);
      pods.set(name, { name, url: podUrl(scheme, address, chosen.port) });
    }
  }
  const sorted = [...pods.values()].sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
  return { pods: sorted, portless };
}

/** A short error naming the Service; the API server's Status message, not the whole body. */
function describe(error: unknown, where: string): Error {
  const { code, statusCode, body, message } = (error ?? {}) as {
    code?: unknown;
    statusCode?: unknown;
    body?: unknown;
    message?: string;
  };
  let reason = message ?? String(error);
  const status = typeof code === 'number' ? code : statusCode;
  if (typeof status === 'number') {
    // An ApiException carries the Status object (as text); Watch errors only a status line.
    let detail: { message?: string } | undefined;
    try {
      detail = typeof body === 'string' ? JSON.parse(body) : (body as typeof detail);
    } catch {}
    reason = `HTTP ${status}: ${detail?.message ?? message}`;
  }
  return new Error(`${where}: ${reason}`, { cause: error });
}

/** Resolves after `ms`, or at once when `signal` aborts; never holds the process open. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms).unref();
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
