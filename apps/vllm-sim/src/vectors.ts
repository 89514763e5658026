import { createRng, deriveSeed } from '@fairgate/runtime';

/**
 * Embedding vectors from a seeded hash of the input: the same text (and --seed) gives the
 * same unit vector in every process; different texts give unrelated ones. `dimensions`
 * (matryoshka) keeps the first components and normalizes again, as vLLM does.
 */
export function embeddingOf(text: string, size: number, seed: number): number[] {
  const rng = createRng(deriveSeed(seed, 'embedding', text));
  const vector: number[] = [];
  for (let index = 0; index < size; index++) vector.push(rng.next() * 2 - 1);
  return normalized(vector);
}

export function normalized(vector: readonly number[]): number[] {
  const norm = Math.sqrt(vector.reduce((sum, value) => sum + value * value, 0));
  return norm === 0 ? vector.map(() => 0) : vector.map((value) => value / norm);
}

export function cosine(a: readonly number[], b: readonly number[]): number {
  let dot = 0;
  for (let index = 0; index < a.length; index++) dot += (a[index] ?? 0) * (b[index] ?? 0);
  return dot;
}

/**
 * A relevance score in [0, 1] for a (query, document) pair: (1 + cosine) / 2 of their
 * vectors, the sim's stand-in for a cross-encoder's sigmoid output.
 */
export function pairScore(query: string, document: string, size: number, seed: number): number {
  return (1 + cosine(embeddingOf(query, size, seed), embeddingOf(document, size, seed))) / 2;
}

/** OpenAI's base64 encoding of an embedding: little-endian float32. */
export function base64Floats(vector: readonly number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (const [index, value] of vector.entries()) bytes.writeFloatLE(value, index * 4);
  return bytes.toString('base64');
}
