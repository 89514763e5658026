/**
 * The paged KV cache: a fixed pool of blocks, each holding `blockSize` tokens of one
 * sequence, plus vLLM's automatic prefix cache.
 *
 * Invariants (as in vLLM's BlockPool):
 * - a block is *in use* (refCount > 0, possibly shared by several sequences through a
 *   prefix-cache hit) or *free* (refCount 0, in `freeQueue`);
 * - a free block may still hold a cached prompt block (`hash` set, listed in `cached`):
 *   it can be revived by a later hit until it is handed out again, which evicts it;
 * - `freeQueue` is in eviction order: released blocks go to the tail, allocation takes
 *   from the head, so the cache is LRU over free blocks;
 * - usage = blocks in use / total, the value behind vllm:kv_cache_usage_perc.
 */
export interface KvBlock {
  readonly id: number;
  refCount: number;
  /** Chained hash of the prompt block this block holds, or null (uncached content). */
  hash: string | null;
}

export class KvBlockPool {
  readonly total: number;
  private readonly freeQueue = new Map<number, KvBlock>();
  private readonly cached = new Map<string, KvBlock>();

  constructor(total: number) {
    if (!Number.isInteger(total) || total < 1) throw new RangeError(`bad KV pool size ${total}`);
    this.total = total;
    for (let id = 0; id < total; id++) this.freeQueue.set(id, { id, refCount: 0, hash: null });
  }

  get freeCount(): number {
    return this.freeQueue.size;
  }

  get usedCount(): number {
    return this.total - this.freeQueue.size;
  }

  get usage(): number {
    return this.usedCount / this.total;
  }

  /** Blocks currently holding a cached prompt block (in use or free). */
  get cachedCount(): number {
    return this.cached.size;
  }

  /**
   * The longest run of cached blocks matching `hashes` from the start, at most `maxBlocks`.
   * Chained hashes make this a prefix match: block k can only hit if blocks 0..k-1 did.
   */
  lookup(hashes: readonly string[], maxBlocks: number): KvBlock[] {
    const hits: KvBlock[] = [];
    const limit = Math.min(hashes.length, maxBlocks);
    for (let index = 0; index < limit; index++) {
      const block = this.cached.get(hashes[index]!);
      if (!block) break;
      hits.push(block);
    }
    return hits;
  }

  /**
   * Free blocks an admission consumes: fresh blocks plus hit blocks that are currently free
   * (reviving them takes them out of the free queue).
   */
  freeBlocksNeeded(hits: readonly KvBlock[], freshBlocks: number): number {
    let revived = 0;
    for (const block of hits) if (block.refCount === 0) revived++;
    return freshBlocks + revived;
  }

  /** Takes a reference on prefix-cache hits returned by {@link lookup}. */
  acquire(hits: readonly KvBlock[]): void {
    for (const block of hits) {
      if (block.refCount === 0) this.freeQueue.delete(block.id);
      block.refCount++;
    }
  }

  /** Hands out `count` free blocks (LRU first), evicting whatever prompt block they cached. */
  allocate(count: number): KvBlock[] {
    if (count > this.freeQueue.size) {
      throw new RangeError(`KV pool exhausted: need ${count}, ${this.freeQueue.size} free`);
    }
    const blocks: KvBlock[] = [];
    for (const block of this.freeQueue.values()) {
      if (blocks.length === count) break;
      blocks.push(block);
    }
    for (const block of blocks) {
      this.freeQueue.delete(block.id);
      if (block.hash !== null) {
        this.cached.delete(block.hash);
        block.hash = null;
      }
      block.refCount = 1;
    }
    return blocks;
  }

  /**
   * Marks an in-use block as holding the prompt block `hash`. A hash already cached in
   * another block stays with that block (no duplicates); this one stays uncached.
   */
  cache(block: KvBlock, hash: string): void {
    if (block.hash !== null || this.cached.has(hash)) return;
    block.hash = hash;
    this.cached.set(hash, block);
  }

  /**
   * Drops one reference on each block. Released in reverse order, as vLLM does, so a
   * sequence's tail blocks (least likely to be shared) are evicted before its head.
   */
  release(blocks: readonly KvBlock[]): void {
    for (let index = blocks.length - 1; index >= 0; index--) {
      const block = blocks[index]!;
      if (block.refCount <= 0) throw new Error(`KV block ${block.id} released twice`);
      block.refCount--;
      if (block.refCount === 0) this.freeQueue.set(block.id, block);
    }
  }
}
