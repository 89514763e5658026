import type { Registry } from 'prom-client';

export type Labels = Readonly<Record<string, string>>;

/** A value of prom-client's metric export (`get()` / `getForPromString()`). */
export interface ExportedValue {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
  sharedLabels?: Labels;
}

/** What prom-client's Registry reads from a metric to render and aggregate it. */
export interface ExportedMetric {
  name: string;
  help: string;
  type: string;
  values: ExportedValue[];
  aggregator: string;
}

/**
 * A Prometheus metric of the request path whose series are bound once per label set and
 * then updated with no label work: prom-client 15 validates and hashes the labels on every
 * observe or inc, bound or not (~1.5-2 us each, several per request: ~3-4% of the
 * gateway's CPU per request in a perf profile).
 *
 * Exposed through prom-client's Registry like its own metrics (it registers itself and has
 * what the registry reads: name, help, type, aggregator, get() and getForPromString()), with
 * the same text, JSON and aggregation as the prom-client metric of its type
 * (packages/telemetry/test/bound-metrics.test.ts compares them). As there, a series is
 * exported once it was observed or incremented (binding alone shows nothing), and `reset()`
 * hides every series again; bound ones keep counting from zero where prom-client's would
 * be dropped.
 */
export abstract class BoundMetric<S extends { readonly labels: Labels; touched: boolean }> {
  abstract readonly type: 'counter' | 'histogram';
  readonly aggregator = 'sum';
  readonly #series = new Map<string, S>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    // The registry's contract is the exported shape, not the Metric class.
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  abstract reset(): void;

  /** A new series of `labels` (a copy the metric owns), zeroed and not touched. */
  protected abstract newSeries(labels: Labels): S;

  /** The text export's values of `series` (the touched ones; the JSON export derives from them). */
  protected abstract exportValues(series: readonly S[]): ExportedValue[];

  /** Every series, in the order they were first bound. */
  protected get series(): Iterable<S> {
    return this.#series.values();
  }

  /** The series of `labels` (every label name, nothing else), bound once. */
  protected seriesOf(labels: Labels): S {
    const names = Object.keys(labels);
    const unknown = names.find((name) => !this.labelNames.includes(name));
    if (unknown !== undefined || names.length !== this.labelNames.length) {
      throw new Error(
        `${this.name}: labels must be exactly ${this.labelNames.join(', ')}; got ${names.join(', ')}`,
      );
    }
    const key = this.labelNames.map((name) => labels[name]).join('\u0000');
    let series = this.#series.get(key);
    if (!series) {
      series = this.newSeries({ ...labels });
      this.#series.set(key, series);
    }
    return series;
  }

  /** What the registry renders as text. */
  async getForPromString(): Promise<ExportedMetric> {
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      values: this.exportValues([...this.#series.values()].filter((series) => series.touched)),
      aggregator: this.aggregator,
    };
  }

  /** The JSON export (getMetricsAsJSON, aggregation): shared labels after the value's own. */
  async get(): Promise<ExportedMetric> {
    const metric = await this.getForPromString();
    return {
      ...metric,
      values: metric.values.map(({ sharedLabels, labels, ...value }) => ({
        ...value,
        labels: { ...labels, ...sharedLabels },
      })),
    };
  }
}
