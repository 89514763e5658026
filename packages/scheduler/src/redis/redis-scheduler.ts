import {
  assertInteger,
  assertValidName,
  type PodName,
  type ReplicaId,
  type RequestId,
} from '@fairgate/core';
import { Redis } from 'ioredis';
import { rejectionOf, ScriptCode, schedulerError } from '../codes.js';
import type {
  ConfigureOptions,
  ControlWrite,
  EndResult,
  EnqueueRequest,
  EnqueueResult,
  Fence,
  HandoverResult,
  HeartbeatResult,
  LeadershipResult,
  Notice,
  PodAdapterReport,
  PodLoadReport,
  PolledNotices,
  ReclaimReport,
  ReleaseOptions,
  Scheduler,
  SchedulerSnapshot,
  UsageBucket,
  UsageCount,
} from '../contract.js';
import { QUIET_MS } from '../contract.js';
import { type PoolKeys, poolKeys } from '../keys.js';
import { decodeStanding, limitOf, rejected, withLimits } from '../limits.js';
import { parseNotice } from '../notices.js';
import {
  normalizeEnqueue,
  normalizeHandover,
  normalizePodAdapters,
  normalizePodLoads,
  normalizeRelease,
  normalizeUsage,
  usageCounts,
  usageHours,
} from '../requests.js';
import {
  type PodConfig,
  type PodHealth,
  resolvePod,
  resolveSettings,
  resolveTenant,
  type SchedulerSettings,
  type SchedulerSettingsInput,
  type TenantConfig,
} from '../settings.js';
import { BlockingNotices, MAX_NOTICES_PER_POP } from './blocking-notices.js';
import { functionRunner, type RunScript, type ScriptArg } from './commands.js';
import { blockingDuplicate, type RedisConnection } from './connection.js';
import { EngineBatch, type EngineCall } from './engine-batch.js';
import { decodeSnapshot, flatToMap } from './replies.js';
import { encodeSettings } from './settings-hash.js';

export interface RedisSchedulerOptions {
  /** Pool name: the hash tag `{fg:<pool>}` of every key. */
  pool: string;
  /**
   * An ioredis connection (left open by close()): one server, a Sentinel-managed primary or
   * a Cluster (createRedisConnection); or a redis:// URL (owned and closed).
   */
  connection: RedisConnection | string;
  /** How long TTFT histogram seconds are kept (default 5 minutes). */
  latencyRetentionMs?: number;
}

/**
 * Most ms a poll may be skipped while the pool is quiet (lua/poll-1.lua). While the pool
 * waits on a full budget nothing but a release, a time-driven change (which bounds the hint
 * itself), a budget write or a config write can let a pass grant; the first runs its own
 * pass, and so do the last two (setControl and configure below), whichever replica makes
 * them. So this is only a safety net: the bound on how late a write that runs no pass (a
 * replica of an older release, in a rolling deploy) reaches a dispatch pass of this
 * replica's polls. At 20 ms the polls of 10,000 waiting requests cost the replica ~2.5% of a
 * core over idle; at 250, nothing measurable (bench:waiting, 2-core VM).
 */
export const MAX_QUIET_MS = 250;
const END_STATES = ['unknown', 'granted', 'queued'] as const;

/** `notices` with the quiet hint (whole ms, none when under 1 ms). */
function quietFor(ms: number, notices: Notice[]): PolledNotices {
  const whole = Math.floor(ms);
  // Not enumerable: the answer still compares and prints as the plain list of notices.
  if (whole >= 1) Object.defineProperty(notices, QUIET_MS, { value: whole, enumerable: false });
  return notices;
}

/**
 * The shared-state scheduler: every operation is one Lua script call on the pool's keys,
 * so any number of replicas share fairness, budget and quotas exactly.
 */
export class RedisScheduler implements Scheduler {
  readonly keys: PoolKeys;
  private readonly redis: RedisConnection;
  private readonly ownsConnection: boolean;
  private readonly run: RunScript;
  private readonly engineKeys: readonly string[];
  private readonly engineCalls: EngineBatch;
  private readonly latencyRetentionMs: number;
  /**
   * Dedicated connection for BLMPOP, created on the first waitForNotices. Its waits are
   * bounded by their own timeout plus a grace, not by the main connection's command timeout
   * (which would cut every wait short), and it has an 'error' listener like the main
   * connection (blockingDuplicate).
   */
  private blocking: RedisConnection | undefined;
  /** The notices that reach this process without a poll: BLMPOP's, and a release's. */
  private readonly notices = new BlockingNotices(
    () => {
      this.blocking ??= blockingDuplicate(this.redis);
      return this.blocking;
    },
    (replica) => `${this.keys.noticesPrefix}${replica}`,
  );
  /**
   * Until when (performance.now()) poll() may answer [] without a Redis call: the last
   * poll, or the last release made while a BLMPOP was outstanding, found the pool
   * waiting on its budget with nothing time-driven due before then (lua/includes/quiet.lua,
   * taken by keepQuiet). Every other write of
   * this process that could let a pass grant or expire something (reclaim, configure,
   * tenants, pods, a budget write) clears it, and so does a release that carries no hint; a
   * budget or config write made elsewhere runs its own pass (its grants come as notices),
   * anything else within MAX_QUIET_MS. A notice does not clear it: it comes
   * from a pass that already ran. With thousands of requests waiting on a full budget this
   * turns the 1 ms tick's round trips (~120 us of the gateway's CPU each) into one per
   * MAX_QUIET_MS, and a release (each one frees a slot that its own pass hands on) costs no
   * poll after it.
   */
  private quietUntil = 0;

  constructor(options: RedisSchedulerOptions) {
    this.keys = poolKeys(options.pool);
    this.ownsConnection = typeof options.connection === 'string';
    this.redis =
      typeof options.connection === 'string' ? new Redis(options.connection) : options.connection;
    this.run = functionRunner(this.redis);
    this.engineKeys = [this.keys.tag];
    this.engineCalls = new EngineBatch(this.run, this.engineKeys);
    this.latencyRetentionMs = options.latencyRetentionMs ?? 300_000;
    assertInteger('latencyRetentionMs', this.latencyRetentionMs, 1_000);
  }

  async configure(
    input: SchedulerSettingsInput = {},
    options: ConfigureOptions = {},
  ): Promise<SchedulerSettings> {
    const s = resolveSettings(input);
    this.wake();
    // FCALL lua/configure-1.lua
    await this.run('configure', this.engineKeys, [
      JSON.stringify(encodeSettings(s)),
      options.configHash ?? '',
      options.mode ?? 'replace',
    ]);
    await this.passAfterWrite();
    return s;
  }

  /**
   * A pass right after a budget or config write (the janitor's call: it also runs one), so
   * a pool waiting on its full budget takes the room such a write opens at once, whichever
   * replica wrote it: the others' polls stay quiet (MAX_QUIET_MS) and get the grants as
   * notices, as after a release. Best effort: the write has taken either way, and if the
   * pass fails (Redis unreachable) the replicas' next polls find the room, within
   * MAX_QUIET_MS. Its reply matters to nobody.
   */
  private async passAfterWrite(): Promise<void> {
    // FCALL lua/reclaim-1.lua
    await this.engine('reclaim', []).catch(() => {});
  }

  async upsertTenants(tenants: readonly TenantConfig[]): Promise<void> {
    if (tenants.length === 0) return;
    this.wake();
    const args = tenants.flatMap((tenant) => {
      const t = resolveTenant(tenant);
      return [
        t.id,
        t.weight,
        t.queueMax ?? '',
        t.maxConcurrent ?? '',
        t.maxKvBlocks ?? '',
        t.tokenBucket?.capacity ?? '',
        t.tokenBucket?.refillPerSecond ?? '',
        t.limits.tokensPerDay ?? '',
        t.limits.tokensPerMonth ?? '',
        t.limits.requestsPerMinute ?? '',
      ];
    });
    // FCALL lua/upsertTenants-2.lua
    await this.run('upsertTenants', [this.keys.tenants, this.keys.tenantPrefix], args);
  }

  async upsertPods(pods: readonly PodConfig[]): Promise<void> {
    if (pods.length === 0) return;
    this.wake();
    const args = podArgs(pods);
    // FCALL lua/upsertPods-1.lua
    await this.run('upsertPods', [this.keys.pods], args);
  }

  async syncPods(fence: Fence, pods: readonly PodConfig[]): Promise<boolean> {
    const args = podArgs(pods);
    this.wake();
    // FCALL lua/syncPods-7.lua
    return this.fenced(
      'syncPods',
      [
        this.keys.leader,
        this.keys.leaderEpoch,
        this.keys.pods,
        this.keys.discovered,
        this.keys.prefixCurrentPrefix,
        this.keys.prefixPreviousPrefix,
        this.keys.adaptersPrefix,
      ],
      fence,
      args,
    );
  }

  async setPodHealth(pods: readonly PodHealth[]): Promise<void> {
    if (pods.length === 0) return;
    const args = pods.flatMap((pod) => {
      assertValidName('pod', pod.name);
      return [pod.name, pod.healthy ? '1' : '0'];
    });
    this.wake();
    // FCALL lua/setPodHealth-1.lua
    await this.run('setPodHealth', [this.keys.pods], args);
  }

  async forgetPrefixes(pods: readonly PodName[]): Promise<void> {
    if (pods.length === 0) return;
    for (const pod of pods) assertValidName('pod', pod);
    this.wake();
    // FCALL lua/forgetPrefixes-1.lua
    await this.run('forgetPrefixes', this.engineKeys, [...pods]);
  }

  async reportPodAdapters(
    reports: readonly PodAdapterReport[],
    keepClaimsMs: number,
  ): Promise<void> {
    const checked = normalizePodAdapters(reports, keepClaimsMs);
    if (checked.length === 0) return;
    const args = checked.flatMap((r) => [r.pod, r.slots ?? '', r.adapters.join(',')]);
    // FCALL lua/setPodAdapters-1.lua
    await this.run('setPodAdapters', this.engineKeys, ['report', keepClaimsMs, ...args]);
  }

  async dropPodAdapter(pod: PodName, adapter: string): Promise<void> {
    assertValidName('pod', pod);
    assertValidName('adapter', adapter);
    // FCALL lua/setPodAdapters-1.lua
    await this.run('setPodAdapters', this.engineKeys, ['drop', pod, adapter]);
  }

  async enqueue(request: EnqueueRequest): Promise<EnqueueResult> {
    const r = normalizeEnqueue(request);
    // FCALL lua/enqueue-1.lua
    const reply = await this.engine('enqueue', [
      r.id,
      r.tenant,
      r.band,
      r.replica,
      r.sloClass,
      r.cost,
      r.kvBlocks,
      r.deadlineMs ?? '',
      r.ttlMs ?? '',
      r.podHint,
      r.tokens,
      r.prefix.join(','),
      r.budgetTokens,
      r.inputTokens,
      r.maxTokens,
      r.adapter,
    ]);
    if (typeof reply === 'number')
      throw schedulerError(reply, `enqueue ${r.id} (tenant ${r.tenant})`);
    const [status, pod, retried, contended] = reply as [
      number,
      string | number | null,
      number,
      number?,
    ];
    const limits = (reply as unknown[]).length > 4 ? decodeStanding(reply as unknown[]) : undefined;
    if (status < 0) {
      const code = rejectionOf(status);
      if (!code) throw schedulerError(status, `enqueue ${r.id} (tenant ${r.tenant})`);
      return rejected(code, typeof pod === 'number' ? pod : undefined, limitOf(status), limits);
    }
    if (status !== 1) return withLimits({ status: 'queued', retried: retried === 1 }, limits);
    const granted = { status: 'granted', pod: pod as string, retried: retried === 1 } as const;
    return withLimits(contended === 1 ? { ...granted, contended: true } : granted, limits);
  }

  async poll(replica: ReplicaId): Promise<PolledNotices> {
    assertValidName('replica', replica);
    // Notices a release (or a BLMPOP no wait took) popped for the replica come first: older.
    const carried = this.notices.takeCarried(replica);
    const sent = performance.now();
    if (sent < this.quietUntil) return quietFor(this.quietUntil - sent, carried);
    this.quietUntil = 0;
    const changesBefore = this.changes;
    // Only with a BLMPOP outstanding: without one, notices made elsewhere (a release's pass on
    // another replica) reach this process by polls alone, so none may be skipped.
    const hinted = this.notices.arriveFor(replica);
    // FCALL lua/poll-1.lua
    const reply = this.expectList(
      await this.engine('poll', [replica, MAX_NOTICES_PER_POP, ...(hinted ? [MAX_QUIET_MS] : [])]),
      `poll ${replica}`,
    );
    if (!hinted) return [...carried, ...reply.map(parseNotice)];
    const notices = [...carried, ...reply.slice(1).map(parseNotice)];
    // A poll that popped notices gives no hint (something moved).
    if (notices.length === 0 && this.keepQuiet(sent, reply[0], changesBefore)) {
      return quietFor(this.quietUntil - performance.now(), notices);
    }
    return notices;
  }

  /**
   * Takes a script's quiet hint (ms) for a call sent at `sent`: quiet from the send (the
   * server's instant is later), so never past a due change; and only when no write of this
   * process came meanwhile (`changes` still `changesBefore`). True when taken.
   */
  private keepQuiet(sent: number, hint: unknown, changesBefore: number): boolean {
    const quiet = Number(hint);
    if (!(quiet > 0) || this.changes !== changesBefore) return false;
    this.quietUntil = sent + quiet;
    return true;
  }

  async waitForNotices(replica: ReplicaId, timeoutMs: number): Promise<Notice[]> {
    assertValidName('replica', replica);
    assertInteger('timeoutMs', timeoutMs, 1);
    return this.notices.wait(replica, timeoutMs);
  }

  cancel(id: RequestId): Promise<EndResult> {
    return this.release(id, { outcome: 'cancelled' });
  }

  /** Writes of this process that may let a pass grant or expire something: poll at once. */
  private changes = 0;
  private wake(): void {
    this.changes += 1;
    this.quietUntil = 0;
  }

  async release(id: RequestId, options: ReleaseOptions): Promise<EndResult> {
    this.wake();
    const r = normalizeRelease(id, options);
    // With a BLMPOP outstanding (the notices of this release's pass reach this process
    // through it), ask how long the pool stays quiet after the pass, as a poll would
    // answer: no poll round trip after each release while requests wait on a full budget.
    // And have the release pop that replica's notices: the grant its pass made for a request
    // of this process comes back with the reply, and the BLMPOP stays outstanding
    // (BlockingNotices).
    const sent = performance.now();
    const popping = this.notices.popping();
    const hinted = popping !== undefined;
    const changesBefore = this.changes;
    // FCALL lua/release-1.lua
    const reply = await this.engine('release', [
      id,
      r.outcome,
      r.inputTokens ?? '',
      r.outputTokens ?? '',
      r.actualTokens ?? '',
      r.prefixCachedBlocks ?? '',
      ...(hinted ? [MAX_QUIET_MS, popping, MAX_NOTICES_PER_POP] : []),
    ]);
    if (!Array.isArray(reply)) throw schedulerError(reply as number, `release ${id}`);
    const [state, predicted, quiet, ...carried] = reply as [number, number, unknown, ...string[]];
    if (popping !== undefined) this.notices.carry(popping, carried);
    const was = END_STATES[state];
    if (was === undefined) throw schedulerError(state, `release ${id}`);
    this.keepQuiet(sent, quiet, changesBefore);
    return predicted >= 0 ? { was, predictedBlocks: predicted } : { was };
  }

  async handover(
    from: RequestId,
    options: ReleaseOptions,
    request: EnqueueRequest,
  ): Promise<HandoverResult> {
    const { release: r, request: next } = normalizeHandover(from, options, request);
    // FCALL lua/handover-1.lua (no dispatch pass: the slot never was free, nothing woke)
    const reply = await this.engine('handover', [
      from,
      r.outcome,
      r.inputTokens ?? '',
      r.outputTokens ?? '',
      next.id,
      next.tenant,
      next.band,
      next.replica,
      next.sloClass,
      next.cost,
      next.kvBlocks,
      next.budgetTokens,
      next.inputTokens,
      next.maxTokens,
    ]);
    if (reply === 0) return { handedOver: false };
    if (!Array.isArray(reply))
      throw schedulerError(reply as number, `handover ${from} -> ${next.id}`);
    const [, pod, contended] = reply as [number, string, number];
    if (reply.length === 3) return { handedOver: true, pod, contended: contended === 1 };
    return { handedOver: true, pod, contended: contended === 1, limits: decodeStanding(reply, 3) };
  }

  async heartbeat(replica: ReplicaId, ids: readonly RequestId[] = []): Promise<HeartbeatResult> {
    assertValidName('replica', replica);
    for (const id of ids) assertValidName('heartbeat id', id);
    // FCALL lua/heartbeat-1.lua
    const reply = await this.engine('heartbeat', [replica, ...ids]);
    return { lost: this.expectList(reply, `heartbeat ${replica}`) };
  }

  async reclaim(): Promise<ReclaimReport> {
    this.wake();
    // FCALL lua/reclaim-1.lua
    const reply = await this.engine('reclaim', []);
    const [expired, evicted, cancelled] = this.expectList(reply, 'reclaim').map(Number);
    return { expired: expired ?? 0, evicted: evicted ?? 0, cancelled: cancelled ?? 0 };
  }

  async snapshot(): Promise<SchedulerSnapshot> {
    const k = this.keys;
    // FCALL lua/snapshot-13.lua
    const reply = await this.run(
      'snapshot',
      [
        k.config,
        k.ctl,
        k.pods,
        k.replicas,
        k.stats,
        k.tenants,
        k.tenantPrefix,
        k.leader,
        k.leaderEpoch,
        k.bands,
        k.service,
        k.ringPrefix,
        k.adaptersPrefix,
      ],
      [],
    );
    return decodeSnapshot(reply);
  }

  async acquireLeadership(
    replica: ReplicaId,
    ttlMs: number,
    epochFloor = 0,
  ): Promise<LeadershipResult> {
    assertValidName('replica', replica);
    assertInteger('ttlMs', ttlMs, 1);
    assertInteger('epochFloor', epochFloor, 0);
    // FCALL lua/acquireLeadership-2.lua
    const [won, epoch, holder, expiresInMs] = (await this.run(
      'acquireLeadership',
      [this.keys.leader, this.keys.leaderEpoch],
      [replica, ttlMs, epochFloor],
    )) as [number, number, string | undefined, number | undefined];
    return won === 1
      ? { leader: true, epoch }
      : {
          leader: false,
          epoch,
          holder: holder as string,
          expiresInMs: Math.max(0, expiresInMs ?? 0),
        };
  }

  async renewLeadership(fence: Fence, ttlMs: number): Promise<boolean> {
    assertInteger('ttlMs', ttlMs, 1);
    // FCALL lua/renewLeadership-2.lua
    return this.fenced('renewLeadership', [this.keys.leader, this.keys.leaderEpoch], fence, [
      ttlMs,
    ]);
  }

  async releaseLeadership(fence: Fence): Promise<boolean> {
    // FCALL lua/releaseLeadership-2.lua
    return this.fenced('releaseLeadership', [this.keys.leader, this.keys.leaderEpoch], fence, []);
  }

  async setControl(fence: Fence, write: ControlWrite): Promise<boolean> {
    if (write.budget !== undefined) assertInteger('budget', write.budget, 0);
    if (write.state === '') throw new TypeError('controller state must be a non-empty string');
    if (write.budget !== undefined) this.wake();
    // FCALL lua/setControl-3.lua
    const written = await this.fenced('setControl', this.controlKeys(), fence, [
      write.budget ?? '',
      write.state ?? '',
    ]);
    if (written && write.budget !== undefined) await this.passAfterWrite();
    return written;
  }

  async takeInflightPeak(fence: Fence): Promise<number | null> {
    assertValidName('fence.replica', fence.replica);
    assertInteger('fence.epoch', fence.epoch, 1);
    // FCALL lua/takeInflightPeak-3.lua
    const reply = (await this.run('takeInflightPeak', this.controlKeys(), [
      fence.replica,
      fence.epoch,
    ])) as number;
    if (reply === ScriptCode.StaleFence) return null;
    if (reply < 0) throw schedulerError(reply, `takeInflightPeak by ${fence.replica}`);
    return reply;
  }

  async reportPodLoad(fence: Fence, loads: readonly PodLoadReport[]): Promise<boolean> {
    const args = normalizePodLoads(loads).flatMap((load) => [
      load.pod,
      load.waiting,
      load.running,
      String(load.kvUtilization),
      load.prefixCapacity ?? '',
    ]);
    // FCALL lua/reportPodLoad-4.lua
    return this.fenced(
      'reportPodLoad',
      [this.keys.leader, this.keys.leaderEpoch, this.keys.pods, this.keys.config],
      fence,
      args,
    );
  }

  async setLeaderData(fence: Fence, field: string, value: string): Promise<boolean> {
    assertValidName('leader data field', field);
    if (typeof value !== 'string') throw new TypeError('leader data value must be a string');
    // FCALL lua/setLeaderData-3.lua
    return this.fenced(
      'setLeaderData',
      [this.keys.leader, this.keys.leaderEpoch, this.keys.leaderData],
      fence,
      [field, value],
    );
  }

  async getLeaderData(field: string): Promise<string | null> {
    assertValidName('leader data field', field);
    return this.redis.hget(this.keys.leaderData, field);
  }

  async flushLatency(counts: ReadonlyMap<number, number>): Promise<void> {
    const args: ScriptArg[] = [this.latencyRetentionMs];
    for (const [bucket, count] of counts) {
      assertInteger('latency bucket', bucket, 0);
      assertInteger('latency count', count, 0);
      if (count > 0) args.push(bucket, count);
    }
    // FCALL lua/flushLatency-1.lua
    if (args.length > 1) await this.run('flushLatency', [this.keys.latencyPrefix], args);
  }

  async meterUsage(
    counts: readonly UsageCount[],
    retentionS: number,
    flushId: string,
  ): Promise<void> {
    const fields = normalizeUsage(counts, retentionS, flushId);
    // FCALL lua/meterUsage-1.lua
    if (fields.length > 0) {
      await this.run(
        'meterUsage',
        [this.keys.usagePrefix],
        [retentionS, flushId, ...fields.flat()],
      );
    }
  }

  async readUsage(fromHour: number, toHour: number): Promise<UsageBucket[]> {
    const hours = usageHours(fromHour, toHour);
    const pipeline = this.redis.pipeline();
    for (const hour of hours) pipeline.hgetall(`${this.keys.usagePrefix}${hour}`);
    const replies = (await pipeline.exec()) ?? [];
    return hours.flatMap((hour, i) => {
      const [error, fields] = replies[i] ?? [null, {}];
      if (error) throw error;
      const entries = Object.entries(fields as Record<string, string>).map(
        ([field, value]) => [field, Number(value)] as [string, number],
      );
      return usageCounts(hour, entries);
    });
  }

  async readLatencyWindow(seconds: number): Promise<Map<number, number>> {
    assertInteger('seconds', seconds, 1, 3_600);
    // FCALL lua/readLatency-1.lua
    const reply = await this.run('readLatency', [this.keys.latencyPrefix], [seconds]);
    const merged = new Map<number, number>();
    for (const [bucket, count] of flatToMap(reply)) merged.set(Number(bucket), Number(count));
    return merged;
  }

  async close(): Promise<void> {
    this.blocking?.disconnect();
    this.blocking = undefined;
    if (this.ownsConnection) await this.redis.quit();
  }

  /** An engine call: alone on an idle connection, else batched with its turn's (EngineBatch). */
  private engine(name: EngineCall, args: ScriptArg[]) {
    return this.engineCalls.call(name, args);
  }

  private controlKeys(): string[] {
    return [this.keys.leader, this.keys.leaderEpoch, this.keys.ctl];
  }

  private async fenced(
    name:
      | 'renewLeadership'
      | 'releaseLeadership'
      | 'setControl'
      | 'reportPodLoad'
      | 'setLeaderData'
      | 'syncPods',
    keys: string[],
    fence: Fence,
    args: ScriptArg[],
  ): Promise<boolean> {
    assertValidName('fence.replica', fence.replica);
    assertInteger('fence.epoch', fence.epoch, 1);
    const reply = await this.run(name, keys, [fence.replica, fence.epoch, ...args]);
    if (reply === 1) return true;
    if (reply === ScriptCode.StaleFence) return false;
    throw schedulerError(reply as number, `${name} by ${fence.replica}`);
  }

  /** Engine scripts answer a list, or a negative code when the pool is not configured. */
  private expectList(reply: unknown, context: string): string[] {
    if (Array.isArray(reply)) return reply as string[];
    throw schedulerError(reply as number, context);
  }
}

/** Pods as upsertPods-1.lua and syncPods-7.lua take them: groups of name, cap, healthy. */
function podArgs(pods: readonly PodConfig[]): ScriptArg[] {
  return pods.flatMap((pod) => {
    const p = resolvePod(pod);
    return [p.name, p.cap, p.healthy ? '1' : '0'];
  });
}
