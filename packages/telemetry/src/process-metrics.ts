import {
  constants,
  monitorEventLoopDelay,
  type PerformanceEntry,
  PerformanceObserver,
} from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** GC pause buckets in seconds (prom-client's default metrics use the same). */
const GC_BUCKETS = [0.001, 0.01, 0.1, 1, 2, 5];

/** The kind label of nodejs_gc_duration_seconds, by perf_hooks' GC kind. */
const GC_KINDS = new Map<number, string>([
  [constants.NODE_PERFORMANCE_GC_MINOR, 'minor'],
  [constants.NODE_PERFORMANCE_GC_MAJOR, 'major'],
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL, 'incremental'],
  [constants.NODE_PERFORMANCE_GC_WEAKCB, 'weakcb'],
]);

/** How often the event-loop delay is sampled, ms (prom-client's default precision). */
const EVENT_LOOP_RESOLUTION_MS = 10;

export interface ProcessMetrics {
  /** Stops the event-loop monitor and the GC observer (the series stay). */
  stop(): void;
}

/**
 * The replica's process, under the names of prom-client's default metrics (so dashboards
 * made for any Node service read them): CPU (`process_cpu_*_seconds_total`: a replica's CPU
 * per request is `rate(process_cpu_seconds_total) / rate(fairgate_requests_total)`), resident
 * memory, start time, V8 heap and external memory, event-loop delay (p50, p99 and max since
 * the last scrape, read as prom-client reads them) and GC pauses by kind.
 *
 * Not prom-client's `collectDefaultMetrics`: its open-file-descriptor count lists
 * /proc/self/fd and its active-handle counts list every handle at each scrape, ~10,000
 * entries each on a replica holding 10,000 waiting streams. Everything here is read in O(1)
 * at scrape time; the two samplers (a 10 ms event-loop timer that does not keep the process
 * alive, and a GC observer) cost nothing per request.
 */
export function registerProcessMetrics(registry: Registry): ProcessMetrics {
  const registers = [registry];
  // A scrape collects the families in registration order: the first of each group reads
  // its source once and sets the others (registered after it) from the same reading.
  let lastCpu = process.cpuUsage();
  new Counter({
    name: 'process_cpu_user_seconds_total',
    help: 'User CPU time the process spent, in seconds.',
    registers,
    collect() {
      const now = process.cpuUsage();
      const user = (now.user - lastCpu.user) / 1e6;
      const system = (now.system - lastCpu.system) / 1e6;
      lastCpu = now;
      this.inc(user);
      cpuSystem.inc(system);
      cpuTotal.inc(user + system);
    },
  });
  const cpuSystem = new Counter({
    name: 'process_cpu_system_seconds_total',
    help: 'System CPU time the process spent, in seconds.',
    registers,
  });
  const cpuTotal = new Counter({
    name: 'process_cpu_seconds_total',
    help: 'User and system CPU time the process spent, in seconds.',
    registers,
  });
  /** A gauge read when scraped. */
  const readOnScrape = (name: string, help: string, read: () => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read());
      },
    });
  readOnScrape('process_resident_memory_bytes', 'Resident memory size in bytes.', () =>
    process.memoryUsage.rss(),
  );
  const startTime = Math.round(Date.now() / 1000 - process.uptime());
  readOnScrape(
    'process_start_time_seconds',
    'Start time of the process since the Unix epoch, in seconds.',
    () => startTime,
  );
  readOnScrape(
    'nodejs_heap_size_total_bytes',
    'Process heap size from V8, in bytes.',
    () => getHeapStatistics().total_heap_size,
  );
  readOnScrape(
    'nodejs_heap_size_used_bytes',
    'Process heap size used from V8, in bytes.',
    () => getHeapStatistics().used_heap_size,
  );
  readOnScrape(
    'nodejs_external_memory_bytes',
    'Memory of C++ objects bound to JavaScript objects managed by V8, in bytes.',
    () => getHeapStatistics().external_memory,
  );

  const delay = monitorEventLoopDelay({ resolution: EVENT_LOOP_RESOLUTION_MS });
  delay.enable();
  // As prom-client: each scrape reads the sampler's intervals since the one before, then
  // starts afresh. A sample is the time between two of its 10 ms timer callbacks (ns), so
  // an idle loop reads ~0.010 s and the excess is how late the loop ran it.
  new Gauge({
    name: 'nodejs_eventloop_lag_p50_seconds',
    help: 'Median interval of the 10 ms event-loop sampler since the last scrape (0.010 = no delay), in seconds.',
    registers,
    collect() {
      // An empty histogram (no sample since the reset, or stopped) reads 0.
      const empty = delay.count === 0;
      this.set(empty ? 0 : delay.percentile(50) / 1e9);
      lagP99.set(empty ? 0 : delay.percentile(99) / 1e9);
      lagMax.set(empty ? 0 : delay.max / 1e9);
      delay.reset();
    },
  });
  const lagP99 = new Gauge({
    name: 'nodejs_eventloop_lag_p99_seconds',
    help: '99th percentile interval of the 10 ms event-loop sampler since the last scrape (0.010 = no delay), in seconds.',
    registers,
  });
  const lagMax = new Gauge({
    name: 'nodejs_eventloop_lag_max_seconds',
    help: 'Longest interval of the 10 ms event-loop sampler since the last scrape (0.010 = no delay), in seconds.',
    registers,
  });

  const gc = new Histogram({
    name: 'nodejs_gc_duration_seconds',
    help: 'Garbage collection pauses by kind (minor, major, incremental, weakcb), in seconds.',
    labelNames: ['kind'],
    buckets: GC_BUCKETS,
    registers,
  });
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const { detail } = entry as PerformanceEntry & { detail?: { kind?: number } };
      const kind = GC_KINDS.get(detail?.kind ?? -1);
      if (kind) gc.observe({ kind }, entry.duration / 1_000);
    }
  });
  observer.observe({ entryTypes: ['gc'] });

  return {
    stop() {
      delay.disable();
      observer.disconnect();
    },
  };
}
