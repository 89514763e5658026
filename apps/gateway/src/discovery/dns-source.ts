import { Resolver } from 'node:dns/promises';
import {
  type DiscoveredPod,
  type PodSource,
  type PodSourceListener,
  podName,
  podUrl,
} from './pod-source.js';

export interface DnsSourceOptions {
  /** The name to resolve: a headless Service, a compose service. */
  name: string;
  /** The pods' port; with `srv` the SRV records give it instead. */
  port?: number | undefined;
  srv: boolean;
  /** DNS servers (`host` or `host:port`); absent = the system's (/etc/resolv.conf). */
  servers?: readonly string[] | undefined;
  scheme: 'http' | 'https';
  refreshMs: number;
}

/** Answers that mean "no such record" rather than "could not ask". */
const NO_RECORDS = new Set(['ENODATA', 'ENOTFOUND', 'NXDOMAIN']);

/**
 * Pods from DNS: the name's A and AAAA records (each address with the configured port), or
 * its SRV records (each target's addresses with the record's port), read every refreshMs.
 * A Kubernetes headless Service lists only ready endpoints, and a compose service one
 * record per container, so the answer is the set of pods. A name with no record is an
 * empty set (every pod scaled away); a resolver that cannot answer (timeout, refused) is
 * an error, and the pool keeps its last set.
 */
export class DnsSource implements PodSource {
  readonly #resolver: Resolver;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #reading: Promise<void> = Promise.resolve();

  constructor(private readonly options: DnsSourceOptions) {
    // Each try waits up to a third of the period, so a read ends before the next is due.
    this.#resolver = new Resolver({
      timeout: Math.max(50, Math.floor(options.refreshMs / 3)),
      tries: 2,
    });
    if (options.servers) this.#resolver.setServers([...options.servers]);
  }

  start(listener: PodSourceListener): void {
    if (this.#running) return;
    this.#running = true;
    const loop = () => {
      this.#reading = this.read().then(
        (pods) => {
          if (this.#running) listener.onPods(pods);
        },
        (error: unknown) => {
          if (this.#running)
            listener.onError(error instanceof Error ? error : new Error(String(error)));
        },
      );
      void this.#reading.then(() => {
        if (this.#running) this.#timer = setTimeout(loop, this.options.refreshMs).unref();
      });
    };
    loop();
  }

  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    this.#resolver.cancel();
    await this.#reading.catch(() => {});
  }

  /** One read of the name: the pods it lists now, sorted by name. */
  async read(): Promise<DiscoveredPod[]> {
    const { name, scheme } = this.options;
    const targets = this.options.srv
      ? (await this.#records(() => this.#resolver.resolveSrv(name))).map((r) => ({
          host: r.name,
          port: r.port,
        }))
      : [{ host: name, port: this.options.port as number }];
    const pods = new Map<string, DiscoveredPod>();
    for (const { host, port } of targets) {
      for (const address of await this.#addresses(host)) {
        const pod = { name: podName(address, port), url: podUrl(scheme, address, port) };
        pods.set(pod.name, pod);
      }
    }
    return [...pods.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** A host's IPv4 and IPv6 addresses; an address literal is itself. */
  async #addresses(host: string): Promise<string[]> {
    if (/^[\d.]+$/.test(host) || host.includes(':')) return [host];
    const [v4, v6] = await Promise.all([
      this.#records(() => this.#resolver.resolve4(host)),
      this.#records(() => this.#resolver.resolve6(host)),
    ]);
    return [...v4, ...v6];
  }

  /** The records a query gives; none when the name or the record type does not exist. */
  async #records<T>(query: () => Promise<T[]>): Promise<T[]> {
    try {
      return await query();
    } catch (error) {
      if (NO_RECORDS.has((error as NodeJS.ErrnoException).code ?? '')) return [];
      throw error;
    }
  }
}
