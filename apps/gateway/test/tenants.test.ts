import { apiKeyDigest, configSchema } from '@fairgate/config';
import { describe, expect, it } from 'vitest';
import { adminTokenMatches, bearerToken, TenantDirectory } from '../src/tenants.js';

const config = configSchema.parse({
  tenants: [
    { id: 'a', api_key_sha256: [apiKeyDigest('key-a1'), apiKeyDigest('key-a2')] },
    { id: 'b', api_key_sha256: [apiKeyDigest('key-b')] },
  ],
  pods: [{ name: 'p', url: 'http://127.0.0.1:1' }],
});

describe('TenantDirectory', () => {
  const directory = new TenantDirectory(config);
  it.each([
    ['key-a1', 'a'],
    ['key-a2', 'a'],
    ['key-b', 'b'],
    ['key-c', undefined],
    ['', undefined],
    ['KEY-A1', undefined],
  ])('%j -> %s', (key, tenant) => {
    expect(directory.authenticate(key)?.id).toBe(tenant);
  });
});

describe('bearerToken', () => {
  it.each([
    ['Bearer abc', 'abc'],
    ['bearer abc', 'abc'],
    ['Bearer   abc  ', 'abc'],
    ['Basic abc', undefined],
    ['Bearer', undefined],
    ['Bearer a b', undefined],
    [undefined, undefined],
  ])('%j -> %s', (header, token) => expect(bearerToken(header)).toBe(token));
});

describe('adminTokenMatches', () => {
  it.each([
    ['secret', apiKeyDigest('secret'), true],
    ['other', apiKeyDigest('secret'), false],
    [undefined, apiKeyDigest('secret'), false],
    ['secret', undefined, false],
  ])('%j vs digest -> %s', (token, digest, ok) =>
    expect(adminTokenMatches(token, digest)).toBe(ok),
  );
});
