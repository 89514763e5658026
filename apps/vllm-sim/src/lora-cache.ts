/**
 * The LoRA adapters the engine holds in memory, as vLLM's LRUCacheWorkerLoRAManager: at
 * most `capacity` (--max-cpu-loras, by default --max-loras), least recently used evicted
 * when one more is loaded. vLLM keeps serving an evicted adapter: the API still lists it
 * and the next batch that needs it loads it again, which is what `use` reports.
 */
export class AdapterCache {
  readonly capacity: number;
  /** Least recently used first. */
  private readonly names = new Set<string>();

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`bad LoRA cache capacity ${capacity}`);
    }
    this.capacity = capacity;
  }

  has(name: string): boolean {
    return this.names.has(name);
  }

  /** Held adapters, least recently used first. */
  list(): string[] {
    return [...this.names];
  }

  /**
   * Marks `name` used now, loading it if absent; returns true when it had to be loaded. A
   * load beyond capacity evicts the least recently used adapter that is not in `keep` (the
   * batch being run).
   */
  use(name: string, keep: ReadonlySet<string> = new Set()): boolean {
    const loaded = !this.names.delete(name);
    this.names.add(name);
    if (this.names.size > this.capacity) {
      for (const held of this.names) {
        if (held === name || keep.has(held)) continue;
        this.names.delete(held);
        break;
      }
    }
    return loaded;
  }

  remove(name: string): boolean {
    return this.names.delete(name);
  }
}
