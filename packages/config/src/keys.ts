import { hash } from 'node:crypto';

/**
 * The digest stored in the config for an API key: lowercase hex sha256 of its UTF-8 bytes.
 * One-shot `crypto.hash` (Node >= 20.12): ~0.4 us against ~1.5 us for a Hash object, and
 * the gateway digests every request's key (apps/gateway/src/tenants.ts).
 */
export function apiKeyDigest(apiKey: string): string {
  return hash('sha256', apiKey);
}
