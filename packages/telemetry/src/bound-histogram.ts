import type { Registry } from 'prom-client';

type Labels = Readonly<Record<string, string>>;

/** One series: its labels, cumulative-free bucket counts (one per bound, then +Inf), sum. */
interface Series {
  readonly labels: Labels;
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/** A value of prom-client's metric export (`get()` / `getForPromString()`). */
interface ExportedValue {
  value: number;
  labels: Record<string, string | number>;
  metricName: string;
  sharedLabels?: Labels;
}

/**
 * A Prometheus histogram for the request path, whose series are bound once per label set
 * and then observed with no label work. prom-client 15's Histogram validates and hashes
 * the labels on every observe, bound or not (~2 us each, three per request: ~3% of the
 * gateway's CPU per request in a perf profile, docs/gateway.md).
 *
 * Exposed through prom-client's Registry like its own metrics (it registers itself and has
 * what the registry reads: name, help, type, aggregator, get() and getForPromString()),
 * with the same text, JSON and aggregation as a prom-client Histogram with these buckets
 * (packages/telemetry/test/bound-histogram.test.ts compares the two).
 */
export class BoundHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #bounds: readonly number[];
  readonly #series = new Map<string, Series>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    buckets: readonly number[],
    registry: Registry,
  ) {
    if (buckets.some((bound, at) => at > 0 && bound <= buckets[at - 1]!)) {
      throw new Error(`${name}: buckets must be increasing, got ${buckets.join(', ')}`);
    }
    this.#bounds = [...buckets];
    // The registry's contract is the exported shape, not the Metric class.
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  /** The series of `labels` (every label name, nothing else), bound once. */
  labels(labels: Labels): { observe(value: number): void } {
    const series = this.#seriesOf(labels);
    const bounds = this.#bounds;
    return {
      observe(value: number) {
        if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
        let at = 0;
        while (at < bounds.length && value > bounds[at]!) at++;
        series.counts[at]! += 1;
        series.sum += value;
        series.count += 1;
      },
    };
  }

  observe(labels: Labels, value: number): void {
    this.labels(labels).observe(value);
  }

  reset(): void {
    for (const series of this.#series.values()) {
      series.counts.fill(0);
      series.sum = 0;
      series.count = 0;
    }
  }

  #seriesOf(labels: Labels): Series {
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
      series = {
        labels: { ...labels },
        counts: new Float64Array(this.#bounds.length + 1),
        sum: 0,
        count: 0,
      };
      this.#series.set(key, series);
    }
    return series;
  }

  /** What the registry renders as text: `le` as the value's own label, the series' shared. */
  async getForPromString() {
    const bucketName = `${this.name}_bucket`;
    const values: ExportedValue[] = [];
    for (const series of this.#series.values()) {
      let cumulative = 0;
      this.#bounds.forEach((bound, at) => {
        cumulative += series.counts[at]!;
        values.push({
          labels: { le: bound },
          sharedLabels: series.labels,
          value: cumulative,
          metricName: bucketName,
        });
      });
      const shared = { sharedLabels: series.labels };
      values.push(
        { labels: { le: '+Inf' }, ...shared, value: series.count, metricName: bucketName },
        { labels: {}, ...shared, value: series.sum, metricName: `${this.name}_sum` },
        { labels: {}, ...shared, value: series.count, metricName: `${this.name}_count` },
      );
    }
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      values,
      aggregator: this.aggregator,
    };
  }

  /** The JSON export (getMetricsAsJSON, aggregation): the shared labels after `le`. */
  async get() {
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
