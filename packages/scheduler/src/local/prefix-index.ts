import { leadingRun, type PrefixRoutingConfig, prefixGenerationSize } from '@fairgate/core';

/** One generation of a pod's index: the hashes and when the generation lapses. */
interface Generation {
  readonly hashes: Set<string>;
  expiresAt: number;
}

/**
 * Each pod's index of the prompt block hashes it was granted (lua/includes/prefix.lua keeps
 * the same in the sets `pxc:<pod>` and `pxo:<pod>`): two generations, an approximate LRU
 * of two generations (prefixGenerationSize). New hashes go to the current generation; when it
 * holds a generation's size it becomes the previous one (the previous is dropped) and a new one starts. A
 * generation lapses ttlMs after its first entry, as a Redis key with that TTL.
 */
export class PrefixIndex {
  readonly #current = new Map<string, Generation>();
  readonly #previous = new Map<string, Generation>();

  /** How many of `hashes`, from the first, `pod` holds at `now`. */
  matched(pod: string, hashes: readonly string[], now: number): number {
    const current = live(this.#current.get(pod), now);
    const previous = live(this.#previous.get(pod), now);
    if (!current && !previous) return 0;
    return leadingRun(
      hashes,
      (hash) => current?.hashes.has(hash) === true || previous?.hashes.has(hash) === true,
    );
  }

  /**
   * `pod` was granted a request of these hashes: they are its most recent. `podCapacity`: the
   * blocks its KV cache holds (prefixGenerationSize).
   */
  remember(
    pod: string,
    hashes: readonly string[],
    now: number,
    config: PrefixRoutingConfig,
    podCapacity: number | null,
  ): void {
    if (hashes.length === 0) return;
    let current = live(this.#current.get(pod), now);
    let size = current?.hashes.size ?? 0;
    if (current && size >= prefixGenerationSize(config, podCapacity)) {
      this.#previous.set(pod, current);
      current = undefined;
      size = 0;
    }
    if (!current) {
      current = { hashes: new Set(), expiresAt: 0 };
      this.#current.set(pod, current);
    }
    for (const hash of hashes) current.hashes.add(hash);
    if (size === 0) current.expiresAt = now + config.ttlMs;
  }

  /**
   * `pod` had fewer of a request's blocks than its index predicted: its current generation
   * ends now (the previous one is dropped) and `hashes`, which the pod holds since it served
   * them, start the new one (correctPrefix in prefix.lua).
   */
  missed(pod: string, hashes: readonly string[], now: number, config: PrefixRoutingConfig): void {
    const current = live(this.#current.get(pod), now);
    if (current) this.#previous.set(pod, current);
    else this.#previous.delete(pod);
    this.#current.set(pod, { hashes: new Set(hashes), expiresAt: now + config.ttlMs });
  }

  /** The pod restarted (its cache is empty): its index goes. */
  forget(pod: string): void {
    this.#current.delete(pod);
    this.#previous.delete(pod);
  }

  /** Hashes indexed for `pod` (both generations, lapsed ones excluded). */
  size(pod: string, now: number): number {
    return (
      (live(this.#current.get(pod), now)?.hashes.size ?? 0) +
      (live(this.#previous.get(pod), now)?.hashes.size ?? 0)
    );
  }
}

function live(generation: Generation | undefined, now: number): Generation | undefined {
  // A Redis key lives while now <= its expiry time.
  return generation && now <= generation.expiresAt ? generation : undefined;
}
