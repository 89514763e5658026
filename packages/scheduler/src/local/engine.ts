import { FlowRing, type FlowState } from '@fairgate/core';
import type { ScriptCode } from '../codes.js';
import { compareBytes, counterField, rejectionField } from '../counters.js';
import type { SchedulerSettings } from '../settings.js';
import { SortedSet } from './sorted-set.js';

/**
 * The in-process engine state and the operations the Lua includes perform, one method per
 * Lua function and in the same order of effects (lua/includes/*.lua name the counterpart),
 * so LocalScheduler dispatches, expires and reclaims exactly as RedisScheduler does.
 */
export interface LocalRequest {
  id: string;
  tenant: string;
  band: number;
  owner: string;
  sloClass: string;
  cost: number;
  kvBlocks: number;
  hint: string;
  expiresAt: number;
  seq: number;
  state: 'queued' | 'granted';
  pod: string;
}

/** A queue head the pass may dispatch, with its owner's liveness expiry (caps the lease). */
interface ReadyHead {
  req: LocalRequest;
  ownerLiveness: number;
}

export interface LocalTenant {
  weight: number;
  queueMax: number | null;
  maxConcurrent: number | null;
  maxKvBlocks: number | null;
  inflight: number;
  kvBlocks: number;
  waiting: number;
}

export interface LocalPod {
  name: string;
  cap: number;
  healthy: boolean;
  inflight: number;
}

export class LocalEngine {
  settings: SchedulerSettings | null = null;
  budget: number | undefined;
  controllerState: string | null = null;
  inflight = 0;
  /** Most in flight at once since the leader last took it (ctl.peakInflight). */
  peakInflight = 0;
  waiting = 0;
  seq = 0;
  readonly waitingByBand = new Map<number, number>();
  readonly tenants = new Map<string, LocalTenant>();
  readonly pods = new Map<string, LocalPod>();
  readonly requests = new Map<string, LocalRequest>();
  readonly queues = new Map<string, SortedSet>();
  readonly rings = new Map<number, FlowRing>();
  readonly queueDeadlines = new SortedSet();
  readonly leases = new SortedSet();
  readonly replicas = new SortedSet();
  readonly waitingByReplica = new Map<string, SortedSet>();
  readonly notices = new Map<string, string[]>();
  readonly stats = new Map<string, number>();
  /** Called after a notice is queued for a replica (wakes waitForNotices). */
  onNotice: (replica: string) => void = () => {};

  // --- stats.lua
  countFlow(counter: string, tenant: string, sloClass: string, amount = 1): void {
    const field = counterField(counter, tenant, sloClass);
    this.stats.set(field, (this.stats.get(field) ?? 0) + amount);
  }

  countRejection(tenant: string, sloClass: string, code: ScriptCode): void {
    const field = rejectionField(tenant, sloClass, code);
    this.stats.set(field, (this.stats.get(field) ?? 0) + 1);
  }

  // --- replicas.lua
  touchReplica(replica: string, now: number, settings: SchedulerSettings): void {
    this.replicas.add(replica, now + settings.leaseTtlMs);
  }

  replicaLiveness(replica: string, now: number): number | undefined {
    const expiry = this.replicas.score(replica);
    return expiry !== undefined && expiry > now ? expiry : undefined;
  }

  notifyReplica(replica: string, notice: string): void {
    if (this.replicas.score(replica) === undefined) return;
    const list = this.notices.get(replica) ?? [];
    list.push(notice);
    this.notices.set(replica, list);
    this.onNotice(replica);
  }

  // --- tenants.lua
  tenantAtQuota(tenant: LocalTenant, kvBlocks: number): boolean {
    if (tenant.maxConcurrent !== null && tenant.inflight >= tenant.maxConcurrent) return true;
    return tenant.maxKvBlocks !== null && tenant.kvBlocks + kvBlocks > tenant.maxKvBlocks;
  }

  // --- pods.lua
  podsByName(): LocalPod[] {
    return [...this.pods.values()].sort((a, b) => compareBytes(a.name, b.name));
  }

  choosePod(pods: readonly LocalPod[], hint: string): LocalPod | undefined {
    const hasRoom = (pod: LocalPod) => pod.healthy && pod.inflight < pod.cap;
    const hinted = hint === '' ? undefined : this.pods.get(hint);
    if (hinted && hasRoom(hinted)) return hinted;
    let best: LocalPod | undefined;
    for (const pod of pods) {
      if (hasRoom(pod) && (!best || pod.inflight * best.cap < best.inflight * pod.cap)) best = pod;
    }
    return best;
  }

  // --- requests.lua
  linkWaiting(req: LocalRequest, score: number): void {
    this.queueOf(req.band, req.tenant, true).add(req.id, score);
    this.queueDeadlines.add(req.id, req.expiresAt);
    const byOwner = this.waitingByReplica.get(req.owner) ?? new SortedSet();
    byOwner.add(req.id, req.seq);
    this.waitingByReplica.set(req.owner, byOwner);
    this.waiting += 1;
    this.waitingByBand.set(req.band, (this.waitingByBand.get(req.band) ?? 0) + 1);
    this.tenantOf(req.tenant).waiting += 1;
  }

  unlinkWaiting(req: LocalRequest): void {
    const queue = this.queueOf(req.band, req.tenant, false);
    queue?.remove(req.id);
    if (queue?.size === 0) this.queues.delete(queueName(req.band, req.tenant));
    this.queueDeadlines.remove(req.id);
    const byOwner = this.waitingByReplica.get(req.owner);
    byOwner?.remove(req.id);
    if (byOwner?.size === 0) this.waitingByReplica.delete(req.owner);
    this.waiting -= 1;
    this.waitingByBand.set(req.band, (this.waitingByBand.get(req.band) ?? 0) - 1);
    this.tenantOf(req.tenant).waiting -= 1;
  }

  holdLease(
    req: LocalRequest,
    pod: LocalPod,
    now: number,
    settings: SchedulerSettings,
    ownerLiveness: number,
  ): void {
    this.leases.add(req.id, Math.min(now + settings.leaseTtlMs, ownerLiveness));
    this.inflight += 1;
    this.peakInflight = Math.max(this.peakInflight, this.inflight);
    const tenant = this.tenantOf(req.tenant);
    tenant.inflight += 1;
    tenant.kvBlocks += req.kvBlocks;
    pod.inflight += 1;
  }

  freeLease(req: LocalRequest): void {
    this.leases.remove(req.id);
    this.inflight -= 1;
    const tenant = this.tenantOf(req.tenant);
    tenant.inflight -= 1;
    tenant.kvBlocks -= req.kvBlocks;
    const pod = this.pods.get(req.pod);
    if (pod) pod.inflight -= 1;
  }

  endRequest(req: LocalRequest, outcome: string): void {
    if (req.state === 'granted') this.freeLease(req);
    else this.unlinkWaiting(req);
    this.countFlow(outcome, req.tenant, req.sloClass);
    this.requests.delete(req.id);
  }

  // --- expiry.lua
  expireWaiting(req: LocalRequest): void {
    this.endRequest(req, 'expired');
    this.notifyReplica(req.owner, `expired|${req.id}`);
  }

  evictGranted(req: LocalRequest): void {
    this.endRequest(req, 'evicted');
    this.notifyReplica(req.owner, `evict|${req.id}`);
  }

  // --- ring.lua
  joinRing(band: number, tenant: string, turnCredit: number): void {
    let ring = this.rings.get(band);
    if (!ring) {
      ring = new FlowRing();
      this.rings.set(band, ring);
    }
    ring.join(tenant, turnCredit);
  }

  /** probeFlow: drops expired heads and heads of dead owners, then classifies the flow. */
  probeFlow(band: number, tenantName: string, now: number): FlowState & { ready?: ReadyHead } {
    for (;;) {
      const head = this.queueOf(band, tenantName, false)?.first();
      if (!head) return { kind: 'empty' };
      const req = this.requests.get(head.member) as LocalRequest;
      const ownerLiveness = req.expiresAt > now ? this.replicaLiveness(req.owner, now) : undefined;
      if (req.expiresAt <= now) {
        this.expireWaiting(req);
      } else if (ownerLiveness === undefined) {
        this.endRequest(req, 'cancelled');
      } else {
        if (this.tenantAtQuota(this.tenantOf(tenantName), req.kvBlocks)) return { kind: 'blocked' };
        const ready = { req, ownerLiveness };
        return { kind: 'ready', cost: req.cost, head: { score: head.score, id: req.id }, ready };
      }
    }
  }

  selectFlow(band: number, now: number, settings: SchedulerSettings): ReadyHead | undefined {
    const ring = this.rings.get(band);
    if (!ring) return undefined;
    const ready = new Map<string, ReadyHead>();
    const tenant = ring.select(
      settings.fairness,
      (name) => {
        const state = this.probeFlow(band, name, now);
        if (state.ready) ready.set(name, state.ready);
        return state;
      },
      (name) => this.tenantOf(name).weight * settings.quantum,
    );
    return tenant === undefined ? undefined : ready.get(tenant);
  }

  // --- dispatch.lua
  dispatchPass(now: number, settings: SchedulerSettings, selfId: string | null): string | null {
    if (this.waiting <= 0) return null;
    let inflight = this.inflight;
    const budget = this.budget ?? 0;
    if (inflight >= budget) return null;
    const pods = this.podsByName();
    let grants = 0;
    let selfPod: string | null = null;
    const bands = [...this.rings]
      .filter(([, ring]) => ring.size > 0)
      .map(([band]) => band)
      .sort((a, b) => b - a);
    for (const band of bands) {
      while (grants < settings.maxGrantsPerPass && inflight < budget && this.choosePod(pods, '')) {
        const selected = this.selectFlow(band, now, settings);
        if (!selected) break;
        const { req, ownerLiveness } = selected;
        const pod = this.choosePod(pods, req.hint) as LocalPod;
        this.unlinkWaiting(req);
        req.state = 'granted';
        req.pod = pod.name;
        this.holdLease(req, pod, now, settings, ownerLiveness);
        const queueEmptyNow = !this.queues.has(queueName(band, req.tenant));
        this.rings.get(band)?.charge(req.tenant, req.cost, settings.fairness, queueEmptyNow);
        grants += 1;
        inflight += 1;
        if (req.id === selfId) selfPod = pod.name;
        else this.notifyReplica(req.owner, `grant|${req.id}|${pod.name}`);
      }
      if (grants >= settings.maxGrantsPerPass || inflight >= budget || !this.choosePod(pods, '')) {
        break;
      }
    }
    return selfPod;
  }

  // --- janitor.lua
  runJanitor(now: number, settings: SchedulerSettings): [number, number, number] {
    const batch = settings.janitorBatch;
    const due = this.queueDeadlines.upTo(now, batch);
    for (const id of due) this.expireWaiting(this.requests.get(id) as LocalRequest);
    const lapsed = this.leases.upTo(now, batch);
    for (const id of lapsed) this.evictGranted(this.requests.get(id) as LocalRequest);
    let cancelled = 0;
    const dead = this.replicas.upTo(now, 1)[0];
    if (dead !== undefined) {
      for (const id of this.waitingByReplica.get(dead)?.head(batch) ?? []) {
        this.endRequest(this.requests.get(id) as LocalRequest, 'cancelled');
        cancelled += 1;
      }
      if (!this.waitingByReplica.has(dead)) {
        this.replicas.remove(dead);
        this.notices.delete(dead);
      }
    }
    return [due.length, lapsed.length, cancelled];
  }

  tenantOf(name: string): LocalTenant {
    const tenant = this.tenants.get(name);
    if (!tenant) throw new Error(`internal: tenant ${name} has requests but no configuration`);
    return tenant;
  }

  queueOf(band: number, tenant: string, create: true): SortedSet;
  queueOf(band: number, tenant: string, create: false): SortedSet | undefined;
  queueOf(band: number, tenant: string, create: boolean): SortedSet | undefined {
    const name = queueName(band, tenant);
    let queue = this.queues.get(name);
    if (!queue && create) {
      queue = new SortedSet();
      this.queues.set(name, queue);
    }
    return queue;
  }
}

function queueName(band: number, tenant: string): string {
  return `${band}:${tenant}`;
}
