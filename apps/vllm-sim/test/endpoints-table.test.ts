import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SIM_ENDPOINTS } from '../src/endpoints.js';
import { inProcessSims } from './http.js';

// src/endpoints.ts is the one table of routes: docs/sim.md shows it and the server serves it.
const sim = inProcessSims({});

function docsRows(): string[][] {
  const docs = readFileSync(new URL('../../../docs/sim.md', import.meta.url), 'utf8');
  const table = /<!-- endpoints:start -->\n([\s\S]*?)<!-- endpoints:end -->/.exec(docs)?.[1];
  if (!table) throw new Error('docs/sim.md has no endpoints table');
  return table
    .trim()
    .split('\n')
    .slice(2)
    .map((row) =>
      row
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
}

describe('the endpoints table', () => {
  it('docs/sim.md shows src/endpoints.ts row for row', () => {
    expect(docsRows()).toEqual(
      SIM_ENDPOINTS.map((endpoint) => [
        endpoint.method,
        endpoint.paths.map((path) => `\`${path}\``).join(', '),
        endpoint.answers,
        endpoint.cost,
      ]),
    );
  });

  it('the server (LoRA on) serves exactly the routes of the table', () => {
    const { app } = sim({ maxLoras: 1 });
    // Routes, not middleware (`ALL`: the count of engine requests on their paths).
    const served = new Set(
      app.routes
        .filter((route) => route.method !== 'ALL')
        .map((route) => `${route.method} ${route.path}`),
    );
    const listed = new Set(
      SIM_ENDPOINTS.flatMap((endpoint) =>
        endpoint.paths.map((path) => `${endpoint.method} ${path}`),
      ),
    );
    expect([...served].sort()).toEqual([...listed].sort());
  });
});
