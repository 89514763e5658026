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
      'sweep',
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
