import { describe, expect, it } from 'vitest';
import {
  builtInNames,
  loadScenario,
  parseScenario,
  parseScenarioYaml,
  resolveInstant,
  ScenarioError,
  tenantApiKey,
} from '../src/load/scenario.js';

const GOOD = `
name: two
duration_s: 20
seed: 7
tenants:
  - name: a
    key_ref: paying
    weight: 2
    slo_class: standard
    arrival: { kind: poisson, rate: 5 }
  - name: b
    api_key: sk-test-b
    arrival: { kind: burst, base_rate: 1, rate: 50, at_s: "50%", duration_s: 2 }
    prompt_tokens: { median: 100, sigma: 0.3, max: 400 }
    stream: false
    via_replica: 1
gateway:
  scheduler: { budget: 16, dispatch_order: fifo }
  controller: { target_p99_ttft_s: 1.5 }
`;

function problems(value: unknown): string[] {
  try {
    parseScenario(value);
  } catch (error) {
    if (error instanceof ScenarioError) return error.problems;
    throw error;
  }
  return [];
}

const base = () => ({
  name: 'x',
  tenants: [{ name: 't', key_ref: 'paying', arrival: { kind: 'poisson', rate: 1 } }],
});

describe('scenario parsing', () => {
  it('reads a good file with defaults filled in', () => {
    const s = parseScenarioYaml(GOOD, 'two.yaml');
    expect(s.name).toBe('two');
    expect(s.kind).toBe('run');
    expect(s.seed).toBe(7);
    expect(s.tenants[0]?.stream).toBe(true);
    expect(s.tenants[0]?.prompt_tokens.median).toBe(12);
    expect(s.tenants[1]?.prompt_tokens).toEqual({ median: 100, sigma: 0.3, min: 1, max: 400 });
    expect(s.tenants[1]?.stream).toBe(false);
    expect(tenantApiKey(s.tenants[0]!)).toBe('fg-dev-paying');
    expect(tenantApiKey(s.tenants[1]!)).toBe('sk-test-b');
    expect(s.gateway.scheduler).toEqual({ budget: 16, dispatch_order: 'fifo' });
    expect(s.stack.replicas).toBe(3);
    expect(s.limits.max_outstanding).toBeGreaterThan(0);
  });

  it('loads every built-in', () => {
    expect(builtInNames()).toEqual([
      'steady',
      'burst',
      'mixed_priority',
      'noisy_neighbor',
      'shared_prefix',
      'batch_backfill',
      'sweep',
      'autoscale',
      'unequal_sizes',
      'documents',
    ]);
    for (const name of builtInNames()) {
      const s = loadScenario(name);
      expect(s.name).toBe(name);
    }
    const nn = loadScenario('noisy_neighbor');
    expect(nn.tenants.map((t) => [t.name, t.weight])).toEqual([
      ['paying', 2],
      ['free', 1],
    ]);
    const sweep = loadScenario('sweep');
    expect(sweep.kind).toBe('sweep');
    expect(sweep.sweep?.caps).toEqual([4, 8, 16, 32, 64, 128, 256]);
    expect(sweep.sweep?.controller).toEqual(['off', 'on']);
    const shared = loadScenario('shared_prefix');
    expect(shared.tenants[0]?.shared_prefix).toEqual({
      system_prompts: 8,
      system_tokens: 1000,
      users: 64,
      max_turns: 4,
    });
    expect(shared.gateway.routing).toEqual({ prefix: 'on' });
    const backfill = loadScenario('batch_backfill');
    expect(backfill.tenants.map((t) => [t.name, t.slo_class, t.arrival?.kind])).toEqual([
      ['interactive', 'standard', 'diurnal'],
      ['backfill', 'batch', undefined],
    ]);
    expect(backfill.batch).toMatchObject({ tenant: 'backfill', lines: 5000, poll_ms: 500 });
    expect(backfill.gateway.scheduler).toMatchObject({ inflight_eviction: true });
    expect(backfill.gateway.batch).toMatchObject({ concurrency: 32 });
    expect(backfill.stack).toMatchObject({ pods: 2, replicas: 2 });
  });

  it('reads a batch section, with defaults, and a batch-only tenant without arrival', () => {
    const s = parseScenario({
      ...base(),
      tenants: [...base().tenants, { name: 'bulk', key_ref: 'free', batch_class: 'sheddable' }],
      batch: { tenant: 'bulk', lines: 300, output_tokens: { median: 8, max: 16 } },
      gateway: { batch: { concurrency: 8, retry_base_ms: 100 } },
    });
    expect(s.batch).toEqual({
      tenant: 'bulk',
      lines: 300,
      at_s: 0,
      output_tokens: { median: 8, sigma: 0.5, min: 1, max: 16 },
      poll_ms: 500,
      drain_s: 60,
      via_replica: 0,
    });
    expect(s.tenants[1]?.arrival).toBeUndefined();
    expect(s.tenants[1]?.batch_class).toBe('sheddable');
    expect(s.gateway.batch).toEqual({ concurrency: 8, retry_base_ms: 100 });
  });

  it('reads a diurnal arrival', () => {
    const s = parseScenario({
      ...base(),
      tenants: [
        {
          ...base().tenants[0],
          arrival: { kind: 'diurnal', peak_rate: 20, period_s: '50%', start_s: 5 },
        },
      ],
    });
    expect(s.tenants[0]?.arrival).toEqual({
      kind: 'diurnal',
      base_rate: 0,
      peak_rate: 20,
      period_s: '50%',
      start_s: 5,
    });
  });

  it('resolves percentages against the duration', () => {
    expect(resolveInstant('25%', 60)).toBe(15);
    expect(resolveInstant(4, 60)).toBe(4);
  });

  const bad: Array<[string, (s: ReturnType<typeof base>) => unknown, string]> = [
    ['unknown top-level key', (s) => ({ ...s, durations: 3 }), 'durations: unknown key'],
    ['missing tenants', (s) => ({ name: s.name }), 'tenants:'],
    ['empty tenants', (s) => ({ ...s, tenants: [] }), 'tenants:'],
    ['bad name', (s) => ({ ...s, name: 'a b' }), 'name:'],
    ['negative duration', (s) => ({ ...s, duration_s: -1 }), 'duration_s:'],
    [
      'unknown arrival kind',
      (s) => ({ ...s, tenants: [{ ...s.tenants[0], arrival: { kind: 'zipf' } }] }),
      'tenants[0].arrival.kind:',
    ],
    [
      'negative rate',
      (s) => ({ ...s, tenants: [{ ...s.tenants[0], arrival: { kind: 'poisson', rate: -2 } }] }),
      'tenants[0].arrival.rate:',
    ],
    [
      'onoff without on_s',
      (s) => ({
        ...s,
        tenants: [{ ...s.tenants[0], arrival: { kind: 'onoff', rate: 2, off_s: 1 } }],
      }),
      'tenants[0].arrival.on_s:',
    ],
    [
      'bad percentage',
      (s) => ({
        ...s,
        tenants: [
          { ...s.tenants[0], arrival: { kind: 'burst', rate: 2, at_s: 'soon', duration_s: 1 } },
        ],
      }),
      'tenants[0].arrival.at_s:',
    ],
    [
      'typo in arrival',
      (s) => ({
        ...s,
        tenants: [{ ...s.tenants[0], arrival: { kind: 'poisson', rate: 1, rte: 2 } }],
      }),
      'tenants[0].arrival.rte: unknown key',
    ],
    [
      'no key at all',
      (s) => ({ ...s, tenants: [{ name: 't', arrival: { kind: 'poisson', rate: 1 } }] }),
      'tenants[0].api_key: give exactly one',
    ],
    [
      'both keys',
      (s) => ({ ...s, tenants: [{ ...s.tenants[0], api_key: 'k' }] }),
      'tenants[0].api_key: give exactly one',
    ],
    [
      'unknown key_ref',
      (s) => ({ ...s, tenants: [{ ...s.tenants[0], key_ref: 'platinum' }] }),
      "tenants[0].key_ref: unknown development key 'platinum'",
    ],
    [
      'lengths min > max',
      (s) => ({
        ...s,
        tenants: [{ ...s.tenants[0], output_tokens: { median: 5, min: 10, max: 8 } }],
      }),
      'tenants[0].output_tokens.min:',
    ],
    [
      'weight zero',
      (s) => ({ ...s, tenants: [{ ...s.tenants[0], weight: 0 }] }),
      'tenants[0].weight:',
    ],
    [
      'duplicate tenant',
      (s) => ({ ...s, tenants: [s.tenants[0], s.tenants[0]] }),
      "tenants[1].name: duplicate tenant name 't'",
    ],
    [
      'unknown gateway section',
      (s) => ({ ...s, gateway: { schedular: {} } }),
      'gateway.schedular: unknown key',
    ],
    [
      'unknown stack key',
      (s) => ({ ...s, stack: { pods: 2, gpus: 1 } }),
      'stack.gpus: unknown key',
    ],
    ['too many replicas', (s) => ({ ...s, stack: { replicas: 40 } }), 'stack.replicas:'],
    [
      'sweep without sweep section',
      (s) => ({ ...s, kind: 'sweep' }),
      'sweep: is required when kind is sweep',
    ],
    ['sweep bad caps', (s) => ({ ...s, kind: 'sweep', sweep: { caps: [0] } }), 'sweep.caps[0]:'],
    [
      'diurnal without peak_rate',
      (s) => ({
        ...s,
        tenants: [{ ...s.tenants[0], arrival: { kind: 'diurnal', base_rate: 1, period_s: 10 } }],
      }),
      'tenants[0].arrival.peak_rate:',
    ],
    [
      'diurnal peak below base',
      (s) => ({
        ...s,
        tenants: [
          {
            ...s.tenants[0],
            arrival: { kind: 'diurnal', base_rate: 9, peak_rate: 3, period_s: 10 },
          },
        ],
      }),
      'tenants[0].arrival.peak_rate: must be >= base_rate (9)',
    ],
    [
      'diurnal period zero',
      (s) => ({
        ...s,
        tenants: [{ ...s.tenants[0], arrival: { kind: 'diurnal', peak_rate: 3, period_s: 0 } }],
      }),
      'tenants[0].arrival.period_s: must be > 0',
    ],
    [
      'diurnal period "0%"',
      (s) => ({
        ...s,
        tenants: [{ ...s.tenants[0], arrival: { kind: 'diurnal', peak_rate: 3, period_s: '0%' } }],
      }),
      'tenants[0].arrival.period_s: must be > 0',
    ],
    [
      'diurnal typo',
      (s) => ({
        ...s,
        tenants: [
          {
            ...s.tenants[0],
            arrival: { kind: 'diurnal', peak_rate: 3, period_s: 10, peak: 4 },
          },
        ],
      }),
      'tenants[0].arrival.peak: unknown key',
    ],
    [
      'a tenant without arrival that is not the batch tenant',
      (s) => ({ ...s, tenants: [...s.tenants, { name: 'idle', key_ref: 'free' }] }),
      'tenants[1].arrival: is required (only the tenant of the batch: section may go without)',
    ],
    [
      'batch of an unknown tenant',
      (s) => ({ ...s, batch: { tenant: 'nobody', lines: 10 } }),
      "batch.tenant: unknown tenant 'nobody' (tenants: t)",
    ],
    ['batch without lines', (s) => ({ ...s, batch: { tenant: 't' } }), 'batch.lines:'],
    ['batch with zero lines', (s) => ({ ...s, batch: { tenant: 't', lines: 0 } }), 'batch.lines:'],
    [
      'batch typo',
      (s) => ({ ...s, batch: { tenant: 't', lines: 10, line_count: 5 } }),
      'batch.line_count: unknown key',
    ],
    [
      'batch bad at_s',
      (s) => ({ ...s, batch: { tenant: 't', lines: 10, at_s: 'early' } }),
      'batch.at_s:',
    ],
    [
      'batch poll_ms too small',
      (s) => ({ ...s, batch: { tenant: 't', lines: 10, poll_ms: 1 } }),
      'batch.poll_ms:',
    ],
    [
      'batch lengths min > max',
      (s) => ({
        ...s,
        batch: { tenant: 't', lines: 10, output_tokens: { median: 4, min: 9, max: 8 } },
      }),
      'batch.output_tokens.min:',
    ],
    [
      'batch length typo',
      (s) => ({
        ...s,
        batch: { tenant: 't', lines: 10, prompt_tokens: { median: 4, max: 8, mean: 3 } },
      }),
      'batch.prompt_tokens.mean: unknown key',
    ],
    [
      'batch in a sweep',
      (s) => ({ ...s, kind: 'sweep', sweep: {}, batch: { tenant: 't', lines: 10 } }),
      'batch: is not supported in a sweep',
    ],
    ['gateway.batch not a section', (s) => ({ ...s, gateway: { batch: 16 } }), 'gateway.batch:'],
    [
      'via_replica negative',
      (s) => ({ ...s, tenants: [{ ...s.tenants[0], via_replica: -1 }] }),
      'tenants[0].via_replica:',
    ],
  ];
  it.each(bad)('refuses %s, naming the key', (_what, mutate, expected) => {
    const found = problems(mutate(base()));
    expect(found.length).toBeGreaterThan(0);
    expect(found.join('\n')).toContain(expected);
  });

  it('reports YAML syntax errors', () => {
    expect(() => parseScenarioYaml('name: [unclosed', 'broken.yaml')).toThrow(
      /broken.yaml: invalid scenario[\s\S]*YAML/,
    );
  });

  it('names the file and the built-ins for an unknown scenario', () => {
    expect(() => loadScenario('/nonexistent/x.yaml')).toThrow(
      /not a built-in scenario \(built-ins: steady/,
    );
  });
});
