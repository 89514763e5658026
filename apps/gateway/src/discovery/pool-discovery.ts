import { readFileSync } from 'node:fs';
import type { DiscoveryConfig, PodConfig } from '@fairgate/config';
import type { PodPool } from '../upstream/pods.js';
import { DnsSource } from './dns-source.js';
import { EndpointSliceSource } from './kubernetes-source.js';
import { type DiscoveredPod, type PodSource, podUrl } from './pod-source.js';

export interface PoolDiscoveryOptions {
  pool: string;
  discovery: DiscoveryConfig;
  /** The replica's pods: discovered ones join and leave it (connections, health checks). */
  pods: PodPool;
  /** The pods listed in the config, kept beside the discovered ones. */
  staticPods: () => readonly PodConfig[];
  log: (line: string) => void;
  onError: () => void;
  /** A source other than the config's (tests). */
  source?: PodSource;
}

/**
 * One pool's discovery on this replica: it reads the pool's source (DNS or Kubernetes),
 * keeps the replica's PodPool in step (a new pod is health-checked at once, a pod that
 * left has its connections closed once its requests end) and tells the pod-set writer,
 * which writes the shared set while this replica leads (control/pod-set-writer.ts). Every
 * replica discovers on its own; only the leader's view enters the shared state.
 */
export class PoolDiscovery {
  readonly #source: PodSource;
  readonly #listeners = new Set<(change: PodSetChange) => void>();
  #pods: PodConfig[] | undefined;
  #failing = false;

  constructor(private readonly options: PoolDiscoveryOptions) {
    this.#source = options.source ?? createSource(options.discovery);
  }

  /** The discovered pods, or undefined before the source's first answer. */
  get pods(): readonly PodConfig[] | undefined {
    return this.#pods;
  }

  /** Resolves true at the source's first answer, false after `timeoutMs` without one. */
  ready(timeoutMs: number): Promise<boolean> {
    if (this.#pods) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        unsubscribe();
        resolve(false);
      }, timeoutMs);
      const unsubscribe = this.onChange(() => {
        clearTimeout(timer);
        unsubscribe();
        resolve(true);
      });
    });
  }

  /** Calls `listener` after each answer of the source has been applied to the PodPool. */
  onChange(listener: (change: PodSetChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  start(): void {
    this.#source.start({
      onPods: (pods) => void this.#apply(pods),
      onError: (error) => {
        this.options.onError();
        if (!this.#failing) {
          this.#failing = true;
          this.options.log(
            `fairgate: pool ${this.options.pool}: discovery failed (the last pod set stays): ${error.message}`,
          );
        }
      },
    });
  }

  stop(): Promise<void> {
    return this.#source.stop();
  }

  /**
   * The config of a pod a grant names that this replica has not discovered yet: any
   * `host:port` is a pod of a discovering pool (the leader listed it).
   */
  resolve(name: string): PodConfig | undefined {
    const sep = name.lastIndexOf(':');
    const port = Number(name.slice(sep + 1));
    if (sep <= 0 || !Number.isInteger(port) || port < 1 || port > 65_535) return undefined;
    const scheme = (this.options.discovery.dns ?? this.options.discovery.kubernetes)?.scheme;
    return {
      name,
      url: podUrl(scheme ?? 'http', name.slice(0, sep), port),
      cap: this.options.discovery.cap,
    };
  }

  async #apply(found: readonly DiscoveredPod[]): Promise<void> {
    if (this.#failing) {
      this.#failing = false;
      this.options.log(`fairgate: pool ${this.options.pool}: discovery answers again`);
    }
    const { cap } = this.options.discovery;
    const pods = found.map((pod) => ({ name: pod.name, url: pod.url, cap }));
    const before = new Set((this.#pods ?? []).map((pod) => pod.name));
    const after = new Set(pods.map((pod) => pod.name));
    const joined = pods.filter((pod) => !before.has(pod.name)).map((pod) => pod.name);
    const left = [...before].filter((name) => !after.has(name));
    const added = this.options.pods.update([...this.options.staticPods(), ...pods], {
      unchecked: true,
    });
    this.#pods = pods;
    if (joined.length > 0 || left.length > 0) {
      this.options.log(
        `fairgate: pool ${this.options.pool}: discovery lists ${pods.length} pods${joined.length > 0 ? `, joined: ${joined.join(', ')}` : ''}${left.length > 0 ? `, left: ${left.join(', ')}` : ''}`,
      );
    }
    // A new pod is checked before the writer hears of it: it joins with a known health.
    if (added.length > 0) await this.options.pods.checkOnce(added);
    for (const listener of this.#listeners) listener({ joined, left });
  }
}

/** The pods one answer of the source added and removed (both empty: the same set again). */
export interface PodSetChange {
  joined: readonly string[];
  left: readonly string[];
}

function createSource(discovery: DiscoveryConfig): PodSource {
  if (discovery.dns) {
    return new DnsSource({
      name: discovery.dns.name,
      port: discovery.dns.port,
      srv: discovery.dns.srv,
      servers: discovery.dns.servers,
      scheme: discovery.dns.scheme,
      refreshMs: discovery.refresh_ms,
    });
  }
  const kubernetes = discovery.kubernetes as NonNullable<DiscoveryConfig['kubernetes']>;
  return new EndpointSliceSource({
    namespace: kubernetes.namespace ?? ownNamespace(),
    service: kubernetes.service,
    ...(kubernetes.port !== undefined ? { port: kubernetes.port } : {}),
    scheme: kubernetes.scheme,
  });
}

/** In a cluster, the namespace of the gateway's service account; elsewhere `default`. */
function ownNamespace(): string {
  try {
    return readFileSync(SERVICE_ACCOUNT_NAMESPACE, 'utf8').trim() || 'default';
  } catch {
    return 'default';
  }
}

const SERVICE_ACCOUNT_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';
