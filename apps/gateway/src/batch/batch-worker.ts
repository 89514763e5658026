import type { EdgeMetrics } from '@fairgate/telemetry';
import { Attr, endSpan, SpanKind, startChildSpan, traceHeaders } from '@fairgate/telemetry';
import { ROOT_CONTEXT, type Tracer } from '@opentelemetry/api';
import type { BatchStore } from './batch-store.js';
import type { FileStore } from './file-store.js';
import { parseBatchInput } from './jsonl.js';
import { errorLine, lineOutcome } from './line-outcome.js';
import { type BatchJob, type LineQueue, RetryLater } from './line-queue.js';
import type { LineRunner } from './line-runner.js';

/** The span of one try of a batch line (parent of the line's SERVER span). */
export const BATCH_LINE_SPAN = 'fairgate.batch_line';

export interface BatchWorkerDeps {
  store: BatchStore;
  files: FileStore;
  runner: () => LineRunner | undefined;
  /** The tenant's batch class (config tenants[].batch_class). */
  batchClass: (tenant: string) => string;
  lineTimeoutMs: () => number;
  maxLines: () => number;
  metrics: EdgeMetrics;
  tracer: Tracer;
}

/**
 * What a replica's worker does with each job of its pool's queue (line-queue.ts). A line
 * first asks the batch whether it may run (BatchStore.beginLine: one script, so nothing
 * starts once a cancel is acknowledged), then goes through the replica's own request
 * pipeline (LineRunner), and its result is recorded once (BatchStore.recordLine). Flow
 * control's drops throw RetryLater: BullMQ tries the line again after its backoff.
 */
export class BatchWorker {
  constructor(
    private readonly deps: BatchWorkerDeps,
    private readonly queue: LineQueue,
  ) {}

  process = async (job: BatchJob, update: (data: BatchJob) => Promise<void>): Promise<void> => {
    if (job.kind === 'start') return this.#start(job.batch);
    if (job.kind === 'finalize') return this.#finalize(job.batch);
    return this.#line(job, update);
  };

  /** Adds the batch's line jobs (again, after a crash: the same ids are the same jobs). */
  async #start(id: string): Promise<void> {
    const { store, files } = this.deps;
    const batch = await store.read(id);
    if (!batch) return;
    const content = await files.content(batch.tenant, batch.inputFileId);
    if (!content) {
      // Deleted between the batch's creation and this job: the batch cannot run.
      await store.failValidation(id, {
        code: 'input_file_missing',
        message: `The input file ${batch.inputFileId} was deleted before the batch started`,
        param: 'input_file_id',
        line: null,
      });
      return;
    }
    const status = await store.start(id);
    if (status === 'finalizing') return this.queue.add([{ kind: 'finalize', batch: id }]);
    if (status !== 'in_progress' && status !== 'cancelling') return;
    const lines = parseBatchInput(content.toString('utf8'), { maxLines: this.deps.maxLines() });
    for (let from = 0; from < lines.length; from += ADD_CHUNK) {
      await this.queue.add(
        lines.slice(from, from + ADD_CHUNK).map((line, offset) => ({
          kind: 'line' as const,
          batch: id,
          index: from + offset,
          customId: line.customId,
          body: line.body,
        })),
      );
    }
  }

  async #line(
    job: Extract<BatchJob, { kind: 'line' }>,
    update: (data: BatchJob) => Promise<void>,
  ): Promise<void> {
    const { store, metrics } = this.deps;
    const start = await store.beginLine(job.batch, job.index);
    if (start.kind === 'done' || start.kind === 'gone') return;
    if (start.kind === 'cancelled') return this.#record(job, 'skipped', '', undefined);
    if (start.kind === 'expired') {
      const line = errorLine(job.customId, 'batch_expired', EXPIRED);
      return this.#record(job, 'error', line, undefined);
    }
    const runner = this.deps.runner();
    if (!runner) throw new RetryLater('this replica is not serving yet');
    const { tenant } = start;
    const sloClass = this.deps.batchClass(tenant);
    const { span, ctx } = startChildSpan(
      this.deps.tracer,
      ROOT_CONTEXT,
      BATCH_LINE_SPAN,
      SpanKind.INTERNAL,
      {
        [Attr.tenant]: tenant,
        [Attr.sloClass]: sloClass,
        'fairgate.batch_id': job.batch,
        'fairgate.batch_custom_id': job.customId,
      },
    );
    const running = metrics.batchLinesRunning.labels({ tenant });
    running.inc();
    try {
      const answer = await runner.run({
        tenant,
        batch: job.batch,
        sloClass,
        endpoint: start.endpoint,
        body: job.body,
        requestId: `${job.batch}-${job.index}`,
        traceHeaders: traceHeaders(ctx),
        timeoutMs: this.deps.lineTimeoutMs(),
      });
      const upstreamFailures = job.upstreamFailures ?? 0;
      const outcome = lineOutcome(job.customId, answer, upstreamFailures);
      span.setAttribute(Attr.outcome, outcome.kind);
      span.setAttribute(Attr.httpStatus, answer.status);
      if (outcome.kind === 'retry') {
        metrics.batchLines.inc({ tenant, outcome: 'retried' });
        if (answer.status === 502 || answer.status === 504) {
          await update({ ...job, upstreamFailures: upstreamFailures + 1 });
        }
        throw new RetryLater(outcome.reason);
      }
      if (outcome.kind === 'skipped') return await this.#record(job, 'skipped', '', tenant);
      return await this.#record(job, outcome.kind, outcome.line, tenant);
    } finally {
      running.dec();
      endSpan(span);
    }
  }

  async #record(
    job: Extract<BatchJob, { kind: 'line' }>,
    kind: 'output' | 'error' | 'skipped',
    line: string,
    tenant: string | undefined,
  ): Promise<void> {
    const recorded = await this.deps.store.recordLine(job.batch, job.index, kind, line);
    if (recorded.written && tenant) {
      const outcome = kind === 'output' ? 'completed' : kind === 'error' ? 'failed' : 'skipped';
      this.deps.metrics.batchLines.inc({ tenant, outcome });
    }
    if (recorded.finalize) await this.queue.add([{ kind: 'finalize', batch: job.batch }]);
  }

  /** Writes the output and error files and ends the batch (once, whoever runs it). */
  async #finalize(id: string): Promise<void> {
    const { store, files } = this.deps;
    const batch = await store.read(id);
    if (batch?.status !== 'finalizing') return;
    const { output, errors } = await store.results(id);
    const write = async (lines: string[], suffix: string) => {
      if (lines.length === 0) return null;
      const file = await files.put(
        {
          tenant: batch.tenant,
          filename: `${id}_${suffix}.jsonl`,
          purpose: 'batch_output',
          content: Buffer.from(`${lines.join('\n')}\n`),
        },
        // The results are the tenant's already: written whatever the upload limits.
        { maxFileBytes: Number.MAX_SAFE_INTEGER, maxTenantBytes: Number.MAX_SAFE_INTEGER },
      );
      return file.id;
    };
    const outputFile = await write(output, 'output');
    const errorFile = await write(errors, 'error');
    if (!(await store.finish(id, outputFile, errorFile))) {
      // Another run of this job ended the batch first: its files are the batch's.
      for (const file of [outputFile, errorFile]) if (file) await files.delete(batch.tenant, file);
    }
  }
}

/** Line jobs added per BullMQ call. */
const ADD_CHUNK = 500;

const EXPIRED = 'This request could not be executed before the completion window expired.';
