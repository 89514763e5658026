import { describe, expect, it } from 'vitest';
import { collectingBuffers } from '../src/buffer-collection.js';

const CHUNK = 64 * 1024;

/** The most `process.memoryUsage().arrayBuffers` grew while `chunks` dead 64 KiB buffers came. */
async function heldWhileReading(chunks: number, collected: boolean): Promise<number> {
  async function* read(): AsyncGenerator<Buffer> {
    for (let i = 0; i < chunks; i++) yield Buffer.alloc(CHUNK, i);
  }
  const before = process.memoryUsage().arrayBuffers;
  let peak = 0;
  for await (const chunk of collected ? collectingBuffers(read(), 4 * CHUNK) : read()) {
    expect(chunk.length).toBe(CHUNK);
    peak = Math.max(peak, process.memoryUsage().arrayBuffers - before);
  }
  return peak;
}

describe('buffer collection', () => {
  it('collects the dead buffers of a stream every so many bytes: what it holds stays near that', async () => {
    // 8 MiB of 64 KiB chunks, read and dropped, a collection every 256 KiB.
    const held = await heldWhileReading(128, true);
    expect(held).toBeLessThan(1024 * 1024);
    // Left to V8, they are held until its next collection, which those bytes do not bring.
    expect(await heldWhileReading(128, false)).toBeGreaterThan(4 * 1024 * 1024);
  });

  it('passes every chunk on, in order', async () => {
    async function* read(): AsyncGenerator<Buffer> {
      for (let i = 0; i < 5; i++) yield Buffer.from([i]);
    }
    const seen: number[] = [];
    for await (const chunk of collectingBuffers(read(), 2)) seen.push(chunk[0] as number);
    expect(seen).toEqual([0, 1, 2, 3, 4]);
  });
});
