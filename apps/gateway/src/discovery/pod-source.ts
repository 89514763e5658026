/**
 * A pod a discovery source lists: its identity is its address and port (`10.0.3.7:8000`,
 * `fd00::7:8000`), and its URL is where the gateway sends its requests.
 */
export interface DiscoveredPod {
  readonly name: string;
  readonly url: string;
}

/**
 * Where a pool's pods come from when they are not listed in the config: a DNS name
 * (dns-source.ts) or a Kubernetes Service's EndpointSlices (kubernetes-source.ts). A source
 * reports the whole set of ready pods each time it changes (or each time it is read); a
 * source that cannot tell (DNS unreachable, API server away) reports the error and the
 * pool keeps the last set it had.
 */
export interface PodSource {
  /** Starts watching: `onPods` gets every new complete set, `onError` each failure. */
  start(listener: PodSourceListener): void;
  stop(): Promise<void>;
}

export interface PodSourceListener {
  onPods(pods: readonly DiscoveredPod[]): void;
  onError(error: Error): void;
}

/** `host:port` for a discovered pod's name (an IPv6 host keeps its colons, no brackets). */
export function podName(host: string, port: number): string {
  return `${host}:${port}`;
}

/** The URL of `host:port` (an IPv6 host is bracketed). */
export function podUrl(scheme: 'http' | 'https', host: string, port: number): string {
  return `${scheme}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
