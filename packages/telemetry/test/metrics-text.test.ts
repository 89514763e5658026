import { AggregatorRegistry, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createEdgeMetrics, createGatewayMetrics, metricsText } from '../src/metrics.js';

/** A replica's registries as the gateway has them: the edge's and one per pool, with series. */
function replicaRegistries(pools: readonly string[]) {
  const edge = createEdgeMetrics({ replica: 'r1' });
  edge.connectionsRefused.inc({ reason: 'max_connections' });
  edge.batchLinesRunning.set({ tenant: 'acme' }, 2);
  const registries: Registry[] = [edge.registry];
  pools.forEach((pool, i) => {
    const metrics = createGatewayMetrics({ replica: 'r1', pool });
    const series = metrics.series('acme', 'interactive');
    series.ttft.observe(0.02 * (i + 1));
    series.queueWait.observe(0.001);
    series.outcome('completed').inc();
    metrics.series('free', 'batch').outcome('expired').inc();
    metrics.drops.inc({ tenant: 'free', class: 'batch', reason: 'rate_limited' });
    metrics.waiting.set(5 + i);
    registries.push(metrics.registry);
  });
  return registries;
}

/** prom-client's own merge of registries (what metricsText did before the text merge). */
async function aggregated(registries: readonly Registry[]): Promise<string> {
  const families = await Promise.all(registries.map((registry) => registry.getMetricsAsJSON()));
  return AggregatorRegistry.aggregate(families).metrics();
}

/** Series lines with their labels in one order, and the header lines, sorted. */
function normalized(text: string): string[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const match = /^([^{\s]+)\{(.*)\} (\S+)$/.exec(line);
      if (!match) return line;
      const labels = match[2]!.split(/,(?=[a-zA-Z_]+=")/).sort();
      return `${match[1]}{${labels.join(',')}} ${match[3]}`;
    })
    .sort();
}

describe('metricsText', () => {
  it.each([[['main']], [['main', 'batch']], [['a', 'b', 'c']]])(
    'has every series of prom-client aggregation for pools %j, each family once',
    async (pools) => {
      const registries = replicaRegistries(pools);
      const text = await metricsText(registries);
      expect(normalized(text)).toEqual(normalized(await aggregated(registries)));
      const helps = text.match(/^# HELP (\S+) /gm) ?? [];
      expect(new Set(helps).size).toBe(helps.length);
      // Prometheus's text format: a family's series follow its header, in one block.
      for (const block of text.trimEnd().split('\n\n')) {
        const [help, type, ...series] = block.split('\n');
        const name = /^# HELP (\S+) /.exec(help!)![1]!;
        expect(type).toMatch(new RegExp(`^# TYPE ${name} `));
        for (const line of series) expect(line.startsWith(name)).toBe(true);
      }
      expect(text.endsWith('\n')).toBe(true);
    },
  );

  it('keeps a family whose first registry has no series yet', async () => {
    const empty = createGatewayMetrics({ replica: 'r1', pool: 'idle' });
    const busy = createGatewayMetrics({ replica: 'r1', pool: 'busy' });
    busy.drops.inc({ tenant: 't', class: 'c', reason: 'shed' });
    const text = await metricsText([empty.registry, busy.registry]);
    expect(text).toContain(
      '# TYPE fairgate_drops_total counter\nfairgate_drops_total{tenant="t",class="c",reason="shed",replica="r1",pool="busy"} 1\n',
    );
  });

  it('renders registries without metrics as prom-client does', async () => {
    expect(await metricsText([new Registry(), new Registry()])).toBe('\n');
    const edge = createEdgeMetrics({ replica: 'r1' });
    expect(await metricsText([new Registry(), edge.registry])).toBe(await edge.registry.metrics());
  });
});
