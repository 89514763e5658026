import { createRng } from '@fairgate/runtime';
import { type Dispatcher, request } from 'undici';
import { drawLength } from './arrivals.js';
import { promptText } from './client.js';
import { pause } from './pause.js';
import {
  type BatchSpec,
  type LengthSpec,
  resolveInstant,
  type Scenario,
  type TenantSpec,
  tenantApiKey,
} from './scenario.js';

/**
 * The scenario's Batch API batch (the `batch:` section, docs/load.md): at `at_s` the input
 * file is built (one chat request per line, bodies like the generator's own requests,
 * max_tokens = the drawn output length, seeded), uploaded with POST /v1/files, the batch
 * created with POST /v1/batches and polled with GET /v1/batches/{id} every poll_ms until
 * it ends or the deadline (the run's duration + drain_s) passes, when it is cancelled. At
 * the end the output and error files are fetched and every custom_id is checked to appear
 * exactly once. Every call has a timeout and every loop a bound in time and count.
 */
export interface BatchLine {
  customId: string;
  promptTokens: number;
  outputTokens: number;
}

/** Batch statuses after which nothing changes. */
export const TERMINAL_STATUSES = new Set(['completed', 'failed', 'expired', 'cancelled']);
/** Statuses after which no line runs any more (the lines have ended). */
const LINES_ENDED = new Set(['finalizing', ...TERMINAL_STATUSES]);

/** One poll of the batch object. */
export interface BatchSample {
  /** Seconds from the run's start. */
  t: number;
  status: string;
  total: number;
  completed: number;
  failed: number;
}

/** The check of the output and error files against the input's custom_ids. */
export interface OutputCheck {
  outputLines: number;
  errorLines: number;
  /** Input custom_ids found exactly once over both files. */
  exactlyOnce: number;
  missing: number;
  duplicated: number;
  /** custom_ids in the files that the input does not have. */
  unexpected: number;
  /** Every custom_id of the input exactly once, nothing else. */
  ok: boolean;
  examples: { missing: string[]; duplicated: string[]; unexpected: string[] };
}

export interface BatchResult {
  tenant: string;
  lines: number;
  model: string;
  /** Index of the target the calls went to. */
  target: number;
  /** Seconds from the run's start: the upload began, the batch was created. */
  submittedS?: number;
  createdS?: number;
  id?: string;
  inputFileId?: string;
  outputFileId?: string | null;
  errorFileId?: string | null;
  /** Last status seen, or not_submitted / submit_failed. */
  status: string;
  /** Run seconds at which a poll first saw each status. */
  statusSeenS: Record<string, number>;
  /** The batch object's own times (unix seconds, whole) as run seconds. */
  gatewayTimesS: Record<string, number>;
  requestCounts: { total: number; completed: number; failed: number };
  samples: BatchSample[];
  /** Run seconds when a poll first saw the lines ended (finalizing or a terminal status). */
  linesEndedS?: number;
  /** Run seconds when a poll first saw a terminal status. */
  endedS?: number;
  /** The deadline passed before the batch ended. */
  timedOut: boolean;
  /** Cancelled by the load generator (deadline or Ctrl-C). */
  cancelledByRunner: boolean;
  polls: number;
  output?: OutputCheck;
  /** Failed calls (the first 20). */
  errors: string[];
}

/** The lines' lengths: the batch's own, else its tenant's. */
export function batchLengthSpecs(
  spec: BatchSpec,
  tenant: TenantSpec | undefined,
): { prompt: LengthSpec; output: LengthSpec } {
  const fallback = { median: 12, sigma: 0.5, min: 1, max: 256 };
  return {
    prompt: spec.prompt_tokens ?? tenant?.prompt_tokens ?? fallback,
    output: spec.output_tokens ?? tenant?.output_tokens ?? fallback,
  };
}

/** The batch's lines (seeded: one PRNG stream, independent of the tenants' schedules). */
export function batchLines(scenario: Scenario): BatchLine[] {
  const spec = scenario.batch;
  if (!spec) return [];
  const tenant = scenario.tenants.find((t) => t.name === spec.tenant);
  const { prompt, output } = batchLengthSpecs(spec, tenant);
  const rng = createRng(scenario.seed, `batch:${spec.tenant}`);
  const width = String(spec.lines).length;
  return Array.from({ length: spec.lines }, (_, i) => ({
    customId: `line-${String(i + 1).padStart(width, '0')}`,
    promptTokens: drawLength(prompt, rng),
    outputTokens: drawLength(output, rng),
  }));
}

/** The JSONL input file: one chat completion per line (not streamed: batches do not stream). */
export function batchInput(lines: BatchLine[], model: string): string {
  return lines
    .map((line) =>
      JSON.stringify({
        custom_id: line.customId,
        method: 'POST',
        url: '/v1/chat/completions',
        body: {
          model,
          messages: [{ role: 'user', content: promptText(line.promptTokens, line.customId) }],
          max_tokens: line.outputTokens,
        },
      }),
    )
    .join('\n')
    .concat('\n');
}

/** Counts the custom_ids of output/error file lines against the input's. */
export function checkOutput(
  expected: readonly string[],
  outputText: string,
  errorText: string,
): OutputCheck {
  const counts = new Map<string, number>();
  const read = (text: string): number => {
    let n = 0;
    for (const raw of text.split('\n')) {
      if (raw.trim() === '') continue;
      n++;
      let id = '';
      try {
        const parsed = JSON.parse(raw) as { custom_id?: unknown };
        id = typeof parsed.custom_id === 'string' ? parsed.custom_id : '';
      } catch {
        id = '';
      }
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    return n;
  };
  const outputLines = read(outputText);
  const errorLines = read(errorText);
  const wanted = new Set(expected);
  const missing: string[] = [];
  const duplicated: string[] = [];
  let exactlyOnce = 0;
  for (const id of expected) {
    const n = counts.get(id) ?? 0;
    if (n === 0) missing.push(id);
    else if (n > 1) duplicated.push(id);
    else exactlyOnce++;
  }
  const unexpected = [...counts.keys()].filter((id) => !wanted.has(id));
  return {
    outputLines,
    errorLines,
    exactlyOnce,
    missing: missing.length,
    duplicated: duplicated.length,
    unexpected: unexpected.reduce((sum, id) => sum + (counts.get(id) ?? 0), 0),
    ok: missing.length === 0 && duplicated.length === 0 && unexpected.length === 0,
    examples: {
      missing: missing.slice(0, 5),
      duplicated: duplicated.slice(0, 5),
      unexpected: unexpected.slice(0, 5),
    },
  };
}

export interface BatchDriverOptions {
  scenario: Scenario;
  targets: string[];
  /** The run's model (the lines' model unless batch.model is set). */
  model: string;
  /** Milliseconds since the run's start. */
  clock: () => number;
  /** Date.now() at the run's start (to place the batch object's unix times). */
  wallAtZeroMs: number;
  /** Seconds of arrivals: the batch gets until durationS + batch.drain_s. */
  durationS: number;
  /** External stop (Ctrl-C): stop polling, cancel the batch. */
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
}

const CALL_TIMEOUT_MS = 10_000;
const UPLOAD_TIMEOUT_MS = 60_000;
const CANCEL_TIMEOUT_MS = 3_000;
const MAX_ERRORS = 20;

type Json = Record<string, unknown>;

/** A request body, encoded: JSON text, or multipart/form-data (`multipart`). */
interface EncodedBody {
  readonly contentType: string;
  readonly bytes: string | Buffer;
}

/**
 * Encodes `form` with Node's own Response, the implementation its global FormData and Blob
 * come from. undici's `request` given a FormData of another undici fails while it reads the
 * body ("action is not a function"): the npm package's FormData on Node 24, Node's global
 * one on Node 20 (`bash test/other-node.sh 24` found it).
 */
async function multipart(form: FormData): Promise<EncodedBody> {
  const encoded = new Response(form);
  return {
    contentType: encoded.headers.get('content-type') ?? 'multipart/form-data',
    bytes: Buffer.from(await encoded.arrayBuffer()),
  };
}

/** Submits, polls and checks the scenario's batch (BatchDriver.run). */
export class BatchDriver {
  readonly result: BatchResult;
  readonly #options: BatchDriverOptions;
  readonly #spec: BatchSpec;
  readonly #lines: BatchLine[];
  readonly #url: string;
  readonly #apiKey: string;

  constructor(options: BatchDriverOptions) {
    const spec = options.scenario.batch;
    if (!spec) throw new Error('the scenario has no batch: section');
    this.#options = options;
    this.#spec = spec;
    this.#lines = batchLines(options.scenario);
    const target = Math.min(spec.via_replica, options.targets.length - 1);
    this.#url = options.targets[target]!;
    const tenant = options.scenario.tenants.find((t) => t.name === spec.tenant);
    this.#apiKey = tenant ? tenantApiKey(tenant) : '';
    this.result = {
      tenant: spec.tenant,
      lines: spec.lines,
      model: spec.model ?? options.model,
      target,
      status: 'not_submitted',
      statusSeenS: {},
      gatewayTimesS: {},
      requestCounts: { total: 0, completed: 0, failed: 0 },
      samples: [],
      timedOut: false,
      cancelledByRunner: false,
      polls: 0,
      errors: [],
    };
  }

  /** Seconds from the run's start by when the batch must have ended. */
  get deadlineS(): number {
    return this.#options.durationS + this.#spec.drain_s;
  }

  /** Waits for at_s, submits, polls to the end (or the deadline), checks the output. */
  async run(): Promise<BatchResult> {
    const { clock, signal, durationS } = this.#options;
    const atS = resolveInstant(this.#spec.at_s, durationS);
    const wait = atS * 1_000 - clock();
    if (wait > 0 && !(await pause(wait, signal))) return this.result;
    try {
      await this.#submit();
    } catch (error) {
      this.result.status = 'submit_failed';
      this.#error(error);
      return this.result;
    }
    await this.#poll();
    if (!this.result.endedS) {
      this.result.timedOut = !signal?.aborted;
      await this.#cancel();
    } else if (this.result.status === 'completed') {
      await this.#check().catch((error) => this.#error(error));
    }
    return this.result;
  }

  async #submit(): Promise<void> {
    const { clock } = this.#options;
    this.result.submittedS = clock() / 1_000;
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append(
      'file',
      new Blob([batchInput(this.#lines, this.result.model)], { type: 'application/jsonl' }),
      `${this.#options.scenario.name}-batch.jsonl`,
    );
    const file = await this.#call('POST', '/v1/files', await multipart(form), UPLOAD_TIMEOUT_MS);
    this.result.inputFileId = String(file.id);
    const batch = await this.#call(
      'POST',
      '/v1/batches',
      JSON.stringify({
        input_file_id: this.result.inputFileId,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        metadata: { scenario: this.#options.scenario.name },
      }),
    );
    this.result.createdS = clock() / 1_000;
    this.result.id = String(batch.id);
    this.#observe(batch);
  }

  /** Polls every poll_ms until a terminal status, the deadline or the external stop. */
  async #poll(): Promise<void> {
    const { clock, signal } = this.#options;
    const deadlineMs = this.deadlineS * 1_000;
    const maxPolls = Math.ceil(Math.max(0, deadlineMs - clock()) / this.#spec.poll_ms) + 2;
    for (let n = 0; n < maxPolls && !this.result.endedS; n++) {
      const left = deadlineMs - clock();
      if (left <= 0 || signal?.aborted) return;
      if (!(await pause(Math.min(this.#spec.poll_ms, left), signal))) return;
      try {
        this.#observe(await this.#call('GET', `/v1/batches/${this.result.id}`));
      } catch (error) {
        this.#error(error);
      }
    }
  }

  /** Records one batch object: counts, status and the first time each status was seen. */
  #observe(batch: Json): void {
    const t = this.#options.clock() / 1_000;
    const counts = (batch.request_counts ?? {}) as Json;
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
    const status = typeof batch.status === 'string' ? batch.status : 'unknown';
    this.result.polls++;
    this.result.status = status;
    this.result.requestCounts = {
      total: num(counts.total),
      completed: num(counts.completed),
      failed: num(counts.failed),
    };
    this.result.samples.push({ t, status, ...this.result.requestCounts });
    this.result.statusSeenS[status] ??= t;
    if (LINES_ENDED.has(status)) this.result.linesEndedS ??= t;
    if (TERMINAL_STATUSES.has(status)) this.result.endedS ??= t;
    for (const key of [
      'created_at',
      'in_progress_at',
      'finalizing_at',
      'completed_at',
      'failed_at',
      'expired_at',
      'cancelling_at',
      'cancelled_at',
    ]) {
      const at = batch[key];
      if (typeof at === 'number') {
        this.result.gatewayTimesS[key] = (at * 1_000 - this.#options.wallAtZeroMs) / 1_000;
      }
    }
    if (typeof batch.output_file_id === 'string' || batch.output_file_id === null)
      this.result.outputFileId = batch.output_file_id;
    if (typeof batch.error_file_id === 'string' || batch.error_file_id === null)
      this.result.errorFileId = batch.error_file_id;
  }

  /** The output and error files against the input's custom_ids. */
  async #check(): Promise<void> {
    const content = async (id: string | null | undefined) =>
      id ? this.#text(`/v1/files/${id}/content`) : '';
    const output = await content(this.result.outputFileId);
    const errors = await content(this.result.errorFileId);
    this.result.output = checkOutput(
      this.#lines.map((l) => l.customId),
      output,
      errors,
    );
  }

  /** Cancels a batch the run no longer waits for (bounded: one call). */
  async #cancel(): Promise<void> {
    if (!this.result.id) return;
    try {
      const path = `/v1/batches/${this.result.id}/cancel`;
      this.#observe(await this.#call('POST', path, '{}', CANCEL_TIMEOUT_MS, false));
      this.result.cancelledByRunner = true;
    } catch (error) {
      this.#error(error);
    }
  }

  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: string | EncodedBody,
    timeoutMs = CALL_TIMEOUT_MS,
    /** Whether the external stop aborts the call (not the cancel sent because of it). */
    stoppable = true,
  ): Promise<Json> {
    const external = stoppable ? this.#options.signal : undefined;
    const payload: EncodedBody | undefined =
      typeof body === 'string' ? { contentType: 'application/json', bytes: body } : body;
    const response = await request(`${this.#url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.#apiKey}`,
        ...(payload ? { 'content-type': payload.contentType } : {}),
      },
      ...(payload ? { body: payload.bytes } : {}),
      ...(this.#options.dispatcher ? { dispatcher: this.#options.dispatcher } : {}),
      signal: external
        ? AbortSignal.any([external, AbortSignal.timeout(timeoutMs)])
        : AbortSignal.timeout(timeoutMs),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    const text = await response.body.text();
    if (response.statusCode !== 200) {
      throw new Error(`${method} ${path}: HTTP ${response.statusCode}: ${text.slice(0, 300)}`);
    }
    return JSON.parse(text) as Json;
  }

  async #text(path: string): Promise<string> {
    const response = await request(`${this.#url}${path}`, {
      headers: { authorization: `Bearer ${this.#apiKey}` },
      ...(this.#options.dispatcher ? { dispatcher: this.#options.dispatcher } : {}),
      signal: AbortSignal.timeout(UPLOAD_TIMEOUT_MS),
      headersTimeout: UPLOAD_TIMEOUT_MS,
      bodyTimeout: UPLOAD_TIMEOUT_MS,
    });
    const text = await response.body.text();
    if (response.statusCode !== 200) {
      throw new Error(`GET ${path}: HTTP ${response.statusCode}: ${text.slice(0, 300)}`);
    }
    return text;
  }

  #error(error: unknown): void {
    if (this.result.errors.length >= MAX_ERRORS) return;
    const t = (this.#options.clock() / 1_000).toFixed(1);
    this.result.errors.push(`${t}s ${error instanceof Error ? error.message : String(error)}`);
  }
}
