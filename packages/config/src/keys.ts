import { createHash } from 'node:crypto';

/** The digest stored in the config for an API key: lowercase hex sha256 of its UTF-8 bytes. */
export function apiKeyDigest(apiKey: string): string {
  return createHash('sha256').update(apiKey, 'utf8').digest('hex');
}
