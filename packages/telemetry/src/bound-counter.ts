import { BoundMetric, type ExportedValue, type Labels } from './bound-metric.js';

interface CounterSeries {
  readonly labels: Labels;
  value: number;
  touched: boolean;
}

/**
 * A Prometheus counter of the request path (BoundMetric): an inc is one addition. Same
 * text, JSON and aggregation as a prom-client Counter.
 */
export class BoundCounter extends BoundMetric<CounterSeries> {
  readonly type = 'counter';

  /** The series of `labels` (every label name, nothing else), bound once. */
  labels(labels: Labels): { inc(value?: number): void } {
    const series = this.seriesOf(labels);
    return {
      inc(value = 1) {
        if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
        if (value < 0) throw new Error('It is not possible to decrease a counter');
        series.value += value;
        series.touched = true;
      },
    };
  }

  inc(labels: Labels, value = 1): void {
    this.labels(labels).inc(value);
  }

  reset(): void {
    for (const series of this.series) {
      series.value = 0;
      series.touched = false;
    }
  }

  protected newSeries(labels: Labels): CounterSeries {
    return { labels, value: 0, touched: false };
  }

  protected exportValues(all: readonly CounterSeries[]): ExportedValue[] {
    return all.map((series) => ({ value: series.value, labels: series.labels }));
  }
}
