import type { Registry } from 'prom-client';
import { BoundMetric, type ExportedValue, type Labels } from './bound-metric.js';

/** One series: its labels, cumulative-free bucket counts (one per bound, then +Inf), sum. */
interface HistogramSeries {
  readonly labels: Labels;
  readonly counts: Float64Array;
  sum: number;
  count: number;
  touched: boolean;
}

/**
 * A Prometheus histogram of the request path (BoundMetric): an observe is a bucket search
 * and three additions. Same text, JSON and aggregation as a prom-client Histogram with
 * these buckets.
 */
export class BoundHistogram extends BoundMetric<HistogramSeries> {
  readonly type = 'histogram';
  readonly #bounds: readonly number[];

  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    buckets: readonly number[],
    registry: Registry,
  ) {
    if (buckets.some((bound, at) => at > 0 && bound <= buckets[at - 1]!)) {
      throw new Error(`${name}: buckets must be increasing, got ${buckets.join(', ')}`);
    }
    super(name, help, labelNames, registry);
    this.#bounds = [...buckets];
  }

  /** The series of `labels` (every label name, nothing else), bound once. */
  labels(labels: Labels): { observe(value: number): void } {
    const series = this.seriesOf(labels);
    const bounds = this.#bounds;
    return {
      observe(value: number) {
        if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
        let at = 0;
        while (at < bounds.length && value > bounds[at]!) at++;
        series.counts[at]! += 1;
        series.sum += value;
        series.count += 1;
        series.touched = true;
      },
    };
  }

  observe(labels: Labels, value: number): void {
    this.labels(labels).observe(value);
  }

  reset(): void {
    for (const series of this.series) {
      series.counts.fill(0);
      series.sum = 0;
      series.count = 0;
      series.touched = false;
    }
  }

  protected newSeries(labels: Labels): HistogramSeries {
    return {
      labels,
      counts: new Float64Array(this.#bounds.length + 1),
      sum: 0,
      count: 0,
      touched: false,
    };
  }

  /** `le` as the value's own label, the series' labels shared. */
  protected exportValues(all: readonly HistogramSeries[]): ExportedValue[] {
    const bucketName = `${this.name}_bucket`;
    const values: ExportedValue[] = [];
    for (const series of all) {
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
    return values;
  }
}
