#!/usr/bin/env node
// `npm test` after the build: the suite in two lanes at once (vitest.config.ts names them).
//
//   timing    the files that judge wall-clock timing, one at a time, at normal priority;
//   parallel  every other file on three workers at the lowest CPU priority (nice 19).
//
// A niced process runs only when the timing lane leaves a core idle, so the timing files
// see an unloaded machine while the rest of the suite fills the gaps. Arguments go to both
// vitest runs; `--outputFile.json=F` writes one JSON report per lane and then F, the two
// merged (what .ci/run reads). The exit status is non-zero when either lane fails.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';

const LANES = [
  { project: 'timing', nice: 0 },
  { project: 'parallel', nice: 19 },
];
const JSON_FLAG = '--outputFile.json=';

const vitest = join(
  dirname(createRequire(import.meta.url).resolve('vitest/package.json')),
  'vitest.mjs',
);
const args = process.argv.slice(2);
const jsonOut = args.find((a) => a.startsWith(JSON_FLAG))?.slice(JSON_FLAG.length);
const shared = args.filter((a) => !a.startsWith(JSON_FLAG));
const reportOf = (lane) => `${jsonOut}.${lane.project}.json`;

function run(lane) {
  const laneArgs = [vitest, 'run', '--project', lane.project, '--passWithNoTests', ...shared];
  if (jsonOut) laneArgs.push(`${JSON_FLAG}${reportOf(lane)}`);
  // `nice` before node: every worker and child process (sims, gateways, Redis) inherits it.
  const [command, commandArgs] =
    lane.nice > 0 && existsSync('/usr/bin/nice')
      ? ['/usr/bin/nice', ['-n', String(lane.nice), process.execPath, ...laneArgs]]
      : [process.execPath, laneArgs];
  const child = spawn(command, commandArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
  for (const [stream, out] of [
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ]) {
    createInterface({ input: stream }).on('line', (line) =>
      out.write(`[${lane.project}] ${line}\n`),
    );
  }
  return new Promise((resolve) => {
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

/** One report of the lanes' reports: counts summed, files concatenated. */
function merge() {
  const reports = LANES.map(reportOf)
    .filter((file) => existsSync(file))
    .map((file) => JSON.parse(readFileSync(file, 'utf8')));
  const merged = { ...reports[0], testResults: [] };
  for (const key of Object.keys(merged)) {
    if (typeof merged[key] === 'number' && key !== 'startTime') {
      merged[key] = reports.reduce((sum, r) => sum + (r[key] ?? 0), 0);
    }
  }
  merged.startTime = Math.min(...reports.map((r) => r.startTime));
  merged.success = reports.length === LANES.length && reports.every((r) => r.success);
  merged.testResults = reports.flatMap((r) => r.testResults);
  writeFileSync(jsonOut, JSON.stringify(merged));
  for (const lane of LANES) rmSync(reportOf(lane), { force: true });
}

const codes = await Promise.all(LANES.map(run));
if (jsonOut) merge();
const failed = LANES.filter((_, i) => codes[i] !== 0).map((lane) => lane.project);
console.log(failed.length ? `lanes failed: ${failed.join(', ')}` : 'lanes: both passed');
process.exit(failed.length ? 1 : 0);
