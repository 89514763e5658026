import type { RunProgress } from './runner.js';
import { fmtMs, percentile } from './stats.js';

/**
 * The view while a run goes: a progress bar and a table redrawn every second on a TTY (per
 * tenant: offered, admitted, dropped, errors, p50/p99 TTFT of the last 10 s; the pool from
 * /admin/state: budget, in flight, waiting, leader, cap, last controller action). When stdout
 * is not a TTY (CI, a pipe) it prints one plain line every `plainEveryS` seconds instead.
 */
const ROLLING_S = 10;

export function progressBar(fraction: number, width = 24): string {
  const f = Math.min(1, Math.max(0, fraction));
  const full = Math.round(f * width);
  return `[${'#'.repeat(full)}${'-'.repeat(width - full)}]`;
}

function rollingTtft(ttft: Array<[number, number]>, nowS: number): number[] {
  const out: number[] = [];
  for (let i = ttft.length - 1; i >= 0; i--) {
    const entry = ttft[i]!;
    if (entry[0] < nowS - ROLLING_S) break;
    out.push(entry[1]);
  }
  return out;
}

export function actionLine(progress: RunProgress): string {
  const a = progress.admin.lastAction;
  if (!a) return 'none yet';
  const p99 = typeof a.p99S === 'number' ? `${a.p99S.toFixed(2)}s` : String(a.p99S);
  return `tick ${a.tick} ${a.kind} cap ${a.capBefore}->${a.capAfter} budget ${a.budget} (p99 ${p99}, ${a.code})`;
}

/** The table as lines (no ANSI), for a TTY redraw or a test. */
export function renderTable(progress: RunProgress, title: string): string[] {
  const lines: string[] = [];
  const phase = progress.phase === 'running' ? '' : ` (${progress.phase})`;
  lines.push(
    `${title}  ${progressBar(progress.elapsedS / progress.durationS)} ${Math.min(progress.elapsedS, progress.durationS).toFixed(0).padStart(4)}/${progress.durationS}s  open ${progress.outstanding}${phase}`,
  );
  lines.push(
    `${'tenant'.padEnd(12)}${'offered'.padStart(9)}${'admitted'.padStart(10)}${'dropped'.padStart(9)}${'errors'.padStart(8)}${'p50 TTFT'.padStart(10)}${'p99 TTFT'.padStart(10)}  (last ${ROLLING_S}s)`,
  );
  for (const t of progress.tenants) {
    const recent = rollingTtft(t.ttft, progress.elapsedS);
    lines.push(
      `${t.name.slice(0, 11).padEnd(12)}${String(t.offered).padStart(9)}${String(t.admitted).padStart(10)}${String(t.dropped).padStart(9)}${String(t.errors).padStart(8)}${fmtMs(percentile(recent, 0.5)).padStart(10)}${fmtMs(percentile(recent, 0.99)).padStart(10)}`,
    );
  }
  const s = progress.admin.latest;
  if (s) {
    const cap = s.capPerWorker === null ? '-' : String(s.capPerWorker);
    const p99 = s.windowP99S === null ? '-' : `${s.windowP99S.toFixed(2)}s`;
    lines.push(
      `pool: budget ${s.budget}  in flight ${s.inflight}  waiting ${s.waiting}  leader ${s.leader ?? '-'}  cap/worker ${cap}  window p99 ${p99}`,
    );
  } else {
    lines.push(`pool: ${progress.admin.lastError ?? 'waiting for /admin/state'}`);
  }
  lines.push(`controller: ${actionLine(progress)}`);
  if (progress.batch) lines.push(`batch: ${batchLine(progress)}`);
  return lines;
}

/** The batch's progress: status and request_counts at the last poll. */
export function batchLine(progress: RunProgress): string {
  const b = progress.batch;
  if (!b) return '';
  const c = b.requestCounts;
  const errors = b.errors.length > 0 ? `  last error: ${b.errors.at(-1)}` : '';
  return `${b.status} ${c.completed}/${b.lines} completed ${c.failed} failed (${b.tenant}${b.id ? ` ${b.id}` : ''})${errors}`;
}

/** One plain line (non-TTY). */
export function renderPlain(progress: RunProgress, title: string): string {
  const tenants = progress.tenants
    .map((t) => {
      const recent = rollingTtft(t.ttft, progress.elapsedS);
      return `${t.name} off ${t.offered} adm ${t.admitted} drop ${t.dropped} err ${t.errors} p99 ${fmtMs(percentile(recent, 0.99))}`;
    })
    .join(' | ');
  const s = progress.admin.latest;
  const pool = s
    ? `budget ${s.budget} inflight ${s.inflight} waiting ${s.waiting} leader ${s.leader ?? '-'}`
    : (progress.admin.lastError ?? 'no /admin/state yet');
  const batch = progress.batch ? ` | batch ${batchLine(progress)}` : '';
  return `[${title} ${progress.elapsedS.toFixed(0)}/${progress.durationS}s] ${tenants} | ${pool} | ctl ${actionLine(progress)}${batch}`;
}

export interface LiveView {
  onTick(progress: RunProgress): void;
  finish(): void;
}

export function createLiveView(
  title: string,
  options: { stream?: NodeJS.WriteStream; plain?: boolean; plainEveryS?: number } = {},
): LiveView {
  const stream = options.stream ?? process.stdout;
  const plainEveryS = options.plainEveryS ?? 5;
  if (stream.isTTY && !options.plain) {
    let drawn = 0;
    return {
      onTick(progress) {
        const lines = renderTable(progress, title);
        const width = stream.columns || 120;
        const text = lines.map((l) => l.slice(0, width - 1)).join('\n');
        stream.write(`${drawn > 0 ? `\x1b[${drawn}F\x1b[J` : ''}${text}\n`);
        drawn = lines.length;
      },
      finish() {
        drawn = 0;
      },
    };
  }
  let last = -Infinity;
  return {
    onTick(progress) {
      if (progress.elapsedS - last < plainEveryS - 0.01) return;
      last = progress.elapsedS;
      stream.write(`${renderPlain(progress, title)}\n`);
    },
    finish() {},
  };
}
